"""simulate(): play one training step's pipeline schedule and return its step time and parts.

Two engines compute the same timeline:
- the event engine (`paraplan.sim.replay` on the heapq core of `paraplan.sim.des`): every stream of every
  rank is a resource with a FIFO queue and jobs wait for other jobs; it records events (traces) and is the
  reference;
- the fast path below, for the tuner's hot loop. With static per-rank orders, the start of a task is
  max(end of the previous task on its rank, arrival of its inputs, release time): a max-plus recurrence,
  so one pass over the tasks in a topological order gives every time exactly, with flat int lists, no
  per-event objects and no heap. The first run of a shape finds that order (each rank runs its next tasks
  while their inputs have arrived, and sleeps until the send it waits for is made); later runs reuse it.
  Sends keep the FIFO rule of the rank's pp stream; the DP stream (parameter gathers, gradient buckets,
  FSDP) follows the issue order of `paraplan.sim.timeline`. Tests check that both engines agree on random
  cases.
"""

from __future__ import annotations

import numpy as np

from paraplan.sim.costs import PipelineCosts
from paraplan.sim.plan import Plan, build_plan
from paraplan.sim.replay import replay
from paraplan.sim.result import SimResult
from paraplan.sim.schedules import chunks_per_rank, validate_schedule
from paraplan.sim.summary import summarize
from paraplan.sim.tables import DurationTables, build_tables
from paraplan.sim.timeline import Timeline, bucket_delay_s, param_lead_s


def check_costs(costs: PipelineCosts) -> list[str]:
    """Shape and sign problems of `costs`, one line each (empty when fine)."""
    problems = []
    pp = costs.pp
    if pp < 1:
        return ["costs hold no pipeline rank"]
    n_chunks = costs.chunks_per_rank
    vpp = n_chunks if costs.schedule == "interleaved" else 1
    problems += validate_schedule(costs.schedule, pp, vpp, costs.num_microbatches)
    if problems:
        return problems
    want = chunks_per_rank(costs.schedule, vpp)
    for rank, row in enumerate(costs.chunks):
        if len(row) != want:
            problems.append(f"rank {rank} has {len(row)} chunks; {costs.schedule} needs {want}")
        for c, chunk in enumerate(row):
            for name in ("forward_s", "backward_input_s", "backward_weight_s", "dp_grad_reduce_s"):
                if getattr(chunk, name) < 0:
                    problems.append(f"rank {rank} chunk {c}: {name} is negative ({getattr(chunk, name)})")
    if costs.p2p_s < 0:
        problems.append(f"p2p_s is negative ({costs.p2p_s})")
    if len(costs.optimizer_per_rank_s()) != pp:
        problems.append(f"optimizer_s has {len(costs.optimizer_per_rank_s())} values for pp={pp}")
    if costs.dp_buckets_per_chunk < 1:
        problems.append(f"dp_buckets_per_chunk must be >= 1 (got {costs.dp_buckets_per_chunk})")
    return problems


def plan_for(costs: PipelineCosts) -> Plan:
    n_chunks = costs.chunks_per_rank
    vpp = n_chunks if costs.schedule == "interleaved" else 1
    return build_plan(costs.schedule, costs.pp, vpp, costs.num_microbatches, costs.ep_overlap_on())


def simulate(costs: PipelineCosts, *, record_events: bool = False, engine: str = "auto") -> SimResult:
    """Simulate one step. engine: "auto" (the fast path, or the event engine when events are recorded),
    "fast" or "events" (tests compare the two). Raises ValueError listing every problem with `costs`."""
    problems = check_costs(costs)
    if problems:
        raise ValueError("; ".join(problems))
    if engine not in ("auto", "fast", "events"):
        raise ValueError(f"engine must be auto, fast or events (got {engine!r})")
    plan = plan_for(costs)
    tables = build_tables(plan, costs)
    if engine == "events" or (engine == "auto" and record_events):
        timeline = replay(plan, costs, tables, record=record_events)
    else:
        timeline = fast_timeline(plan, costs, tables)
    return summarize(plan, costs, tables, timeline, record_events=record_events)


def _initial_slots(plan: Plan, costs: PipelineCosts, dur: list[float]) -> tuple[list[float], list[float]]:
    """Time slots before the run (release slots filled) and each rank's DP stream free time after the
    previous step's parameter all-gather, which heads the DP stream when it overlaps the first forwards."""
    t = [0.0] * plan.n_slots
    dp_free = [0.0] * plan.pp
    if costs.overlap_param_gather:
        buckets = costs.dp_buckets_per_chunk
        for rank in range(plan.pp):
            row = costs.chunks[rank]
            at = 0.0
            for task, c in sorted((task, c) for c, task in enumerate(plan.first_forward[rank]) if task):
                gather = row[c].dp_param_gather_s
                if gather > 0:
                    lead = param_lead_s(gather, dur[task], buckets)
                    first_end = at + lead
                    t[plan.release_base + rank * plan.n_chunks + c] = first_end
                    at = first_end + (gather - lead)
            dp_free[rank] = at
    return t, dp_free


def fast_timeline(plan: Plan, costs: PipelineCosts, tables: DurationTables) -> Timeline:
    """Every task's start and end without the event queue (see the module docstring)."""
    n = plan.n_tasks
    dur = tables.dur_s[plan.cost_key].tolist()
    t, dp_free = _initial_slots(plan, costs, dur)
    start = [0.0] * (n + 1)
    p2p = costs.p2p_s
    fsdp = bool(tables.fsdp_gather_s.any() or tables.fsdp_scatter_s.any())
    order = plan.memo.get("order")
    swept = order is None
    if swept:  # first run of this shape: find a topological order (the times hold unless FSDP)
        order = plan.memo["order"] = _sweep(plan, t, start, dur, p2p)
        if fsdp:
            t, dp_free = _initial_slots(plan, costs, dur)
    if fsdp:
        return _fsdp_loop(plan, costs, tables, order, t, start, dur, dp_free)
    if not swept and plan.max_deps == 2:
        if "rows" not in plan.memo:
            plan.memo["rows"] = _static_rows(plan, order)
        _static_loop(plan.memo["rows"], tables.dur_s, t, start, p2p, plan.pp)
    elif not swept:
        _generic_loop(plan, order, t, start, dur, p2p)
    end = t[: n + 1]
    end[0] = 0.0
    return Timeline(start, end, t, _grad_reduction(plan, costs, start, end, dur, dp_free))


def _static_loop(memo: tuple, dur_table: np.ndarray, t: list[float], start: list[float], p2p: float, pp: int) -> None:
    """The hot loop: tasks in a topological order, start = max(previous task on the rank, inputs)."""
    tasks, prevs, dep0, dep1, ranks, send0, send1, keys = memo
    pp_free = [0.0] * pp
    durs = dur_table[keys].tolist()
    for i, p, a, b, d, r, k0, k1 in zip(tasks, prevs, dep0, dep1, durs, ranks, send0, send1, strict=True):
        s = t[p]
        x = t[a]
        if x > s:
            s = x
        x = t[b]
        if x > s:
            s = x
        start[i] = s
        e = s + d
        t[i] = e
        if k0:  # sends leave in FIFO order on the rank's pp stream
            f = pp_free[r]
            if f < e:
                f = e
            f += p2p
            t[k0] = f
            if k1:
                f += p2p
                t[k1] = f
            pp_free[r] = f


def _grad_reduction(
    plan: Plan, costs: PipelineCosts, start: list[float], end: list[float], dur: list[float], dp_free: list[float]
) -> list[float]:
    """Per rank: when the last backward and the gradient reduction (DP stream, after the parameter
    all-gather) have both finished."""
    buckets = costs.dp_buckets_per_chunk
    rank_done = []
    for rank in range(plan.pp):
        row = costs.chunks[rank]
        lo, hi = plan.lo[rank], plan.hi[rank]
        last = end[hi - 1] if hi > lo else 0.0
        done = last
        at = dp_free[rank]
        for task, c in sorted((task, c) for c, task in enumerate(plan.last_weight[rank]) if task):
            reduce_s = row[c].dp_grad_reduce_s
            if reduce_s <= 0:
                continue
            if costs.overlap_grad_reduce:
                for bucket in range(buckets):
                    ready = start[task] + bucket_delay_s(dur[task], bucket, buckets)
                    at = (at if at > ready else ready) + reduce_s / buckets
            else:
                at = (at if at > last else last) + reduce_s
            done = at if at > done else done
        rank_done.append(done)
    return rank_done


def _fsdp_loop(
    plan: Plan,
    costs: PipelineCosts,
    tables: DurationTables,
    order: list[int],
    t: list[float],
    start: list[float],
    dur: list[float],
    dp_free: list[float],
) -> Timeline:
    """The loop with FSDP on the DP stream: the gather for task i+1 is issued when task i starts, then the
    gradient buckets of task i, then its reduce-scatter when it ends (the issue order of
    `paraplan.sim.timeline`)."""
    n, pp = plan.n_tasks, plan.pp
    buckets = costs.dp_buckets_per_chunk
    gathers = tables.fsdp_gather_s[plan.cost_key].tolist()
    scatters = tables.fsdp_scatter_s[plan.cost_key].tolist()
    rank_of = plan.task_rank.tolist()
    cols = plan.rows[:-2]
    send0, send1 = plan.rows[-2], plan.rows[-1]
    first = set(plan.lo)
    last_of_rank = {h - 1 for h in plan.hi}
    bucket_task: dict[int, float] = {}
    if costs.overlap_grad_reduce:
        for rank in range(pp):
            for c, task in enumerate(plan.last_weight[rank]):
                if task and costs.chunks[rank][c].dp_grad_reduce_s > 0:
                    bucket_task[task] = costs.chunks[rank][c].dp_grad_reduce_s
    dp = list(dp_free)
    gate = [0.0] * (n + 1)
    gates: dict[int, tuple[float, str]] = {}
    for rank in range(pp):  # the first task's gather is issued at the start of the step
        head = plan.lo[rank]
        if head < plan.hi[rank] and gathers[head] > 0:
            dp[rank] += gathers[head]
            gate[head] = dp[rank]
            gates[head] = (dp[rank], "fsdp")
    grads_done = [0.0] * pp
    scatters_done = [0.0] * pp
    pp_free = [0.0] * pp
    p2p = costs.p2p_s
    for i in order:
        r = rank_of[i]
        s = 0.0 if i in first else t[i - 1]
        for col in cols:
            x = t[col[i]]
            if x > s:
                s = x
        if gate[i] > s:
            s = gate[i]
        start[i] = s
        if i not in last_of_rank and gathers[i + 1] > 0:  # prefetch the next task's parameters
            d = dp[r] if dp[r] > s else s
            d += gathers[i + 1]
            dp[r] = gate[i + 1] = d
            gates[i + 1] = (d, "fsdp")
        e = s + dur[i]
        t[i] = e
        f = pp_free[r]
        for k in (send0[i], send1[i]):
            if k:
                if f < e:
                    f = e
                f += p2p
                t[k] = f
        pp_free[r] = f
        if i in bucket_task:
            reduce_s = bucket_task[i]
            for bucket in range(buckets):
                ready = s + bucket_delay_s(dur[i], bucket, buckets)
                dp[r] = (dp[r] if dp[r] > ready else ready) + reduce_s / buckets
            grads_done[r] = dp[r]
        if scatters[i] > 0:
            dp[r] = (dp[r] if dp[r] > e else e) + scatters[i]
            scatters_done[r] = dp[r]
    end = t[: n + 1]
    end[0] = 0.0
    rank_done, tail_kind = [], []
    for rank in range(pp):
        lo, hi = plan.lo[rank], plan.hi[rank]
        last = end[hi - 1] if hi > lo else 0.0
        grads = max(last, grads_done[rank])
        if not costs.overlap_grad_reduce:
            at = dp[rank]
            for _, c in sorted((task, c) for c, task in enumerate(plan.last_weight[rank]) if task):
                reduce_s = costs.chunks[rank][c].dp_grad_reduce_s
                if reduce_s > 0:
                    at = (at if at > last else last) + reduce_s
                    grads = at
        scatter = max(last, scatters_done[rank])
        rank_done.append(max(grads, scatter))
        tail_kind.append("fsdp" if scatter > grads else "dp")
    return Timeline(start, end, t, rank_done, gates, tail_kind=tail_kind)


def _static_rows(plan: Plan, order: list[int]) -> tuple:
    """The fast loop's inputs in topological order: task, previous task on its rank (0 = none), two
    dependency slots, rank, two send slots, and the cost keys (numpy, for the per-call durations)."""
    o = np.array(order, dtype=np.int64)
    first = np.zeros(plan.n_tasks + 1, dtype=bool)
    first[list(plan.lo)] = True
    prev = np.where(first[o], 0, o - 1)
    deps = plan.dep_slots[o]
    sends = plan.send_slots[o]
    return (
        order,
        prev.tolist(),
        deps[:, 0].tolist(),
        deps[:, 1].tolist(),
        plan.task_rank[o].tolist(),
        sends[:, 0].tolist(),
        sends[:, 1].tolist(),
        plan.cost_key[o],
    )


def _generic_loop(
    plan: Plan, order: list[int], t: list[float], start: list[float], dur: list[float], p2p: float
) -> None:
    """The fast loop for plans where a task waits for more than two slots."""
    first = set(plan.lo)
    cols, rank_of = plan.rows[:-2], plan.task_rank.tolist()
    send0, send1 = plan.rows[-2], plan.rows[-1]
    pp_free = [0.0] * plan.pp
    for i in order:
        s = 0.0 if i in first else t[i - 1]
        for col in cols:
            x = t[col[i]]
            if x > s:
                s = x
        start[i] = s
        e = s + dur[i]
        t[i] = e
        r = rank_of[i]
        f = pp_free[r]
        for k in (send0[i], send1[i]):
            if k:
                if f < e:
                    f = e
                f += p2p
                t[k] = f
        pp_free[r] = f


def _sweep(plan: Plan, t: list[float], start: list[float], dur: list[float], p2p: float) -> list[int]:
    """First run of a plan: each rank runs its next tasks for as long as their inputs have arrived; a rank
    that waits for a send is woken when that send is made. Returns the order the tasks ran in (a
    topological order). Ranks left waiting with nothing to wake them mean the static orders deadlock."""
    pp = plan.pp
    for slot in range(plan.send_base, plan.release_base):
        t[slot] = -1.0  # not known yet; every real time is >= 0
    lo, hi = plan.lo, plan.hi
    cur = list(lo)
    pp_free = [0.0] * pp
    order: list[int] = []
    waiting = [-1] * plan.n_slots  # send slot -> the rank waiting for it
    cols = plan.rows[:-2]
    send0, send1 = plan.rows[-2], plan.rows[-1]
    d0, d1 = cols[0], cols[1]
    extra = cols[2:]
    ready = list(reversed(range(pp)))
    while ready:
        r = ready.pop()
        i = first = cur[r]
        h = hi[r]
        last = t[i - 1] if i > lo[r] else 0.0
        f = pp_free[r]
        while i < h:
            s = last
            a = d0[i]
            x = t[a]
            if x < 0:
                waiting[a] = r
                break
            if x > s:
                s = x
            a = d1[i]
            x = t[a]
            if x < 0:
                waiting[a] = r
                break
            if x > s:
                s = x
            if extra:
                missing = [col[i] for col in extra if t[col[i]] < 0]
                if missing:
                    waiting[missing[0]] = r
                    break
                x = max(t[col[i]] for col in extra)
                if x > s:
                    s = x
            start[i] = s
            last = s + dur[i]
            t[i] = last
            k = send0[i]
            if k:  # sends leave in FIFO order on the rank's pp stream
                if f < last:
                    f = last
                f += p2p
                t[k] = f
                if waiting[k] >= 0:
                    ready.append(waiting[k])
                k = send1[i]
                if k:
                    f += p2p
                    t[k] = f
                    if waiting[k] >= 0:
                        ready.append(waiting[k])
            i += 1
        order.extend(range(first, i))
        cur[r] = i
        pp_free[r] = f
    stuck = [r for r in range(pp) if cur[r] < hi[r]]
    if stuck:
        raise ValueError(f"{plan.schedule} (pp={pp}, m={plan.num_microbatches}) deadlocks on ranks {stuck[:8]}")
    return order
