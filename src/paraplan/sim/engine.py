"""simulate(): play one training step's pipeline schedule and return its step time and parts.

Two engines compute the same timeline:
- the event engine (`paraplan.sim.replay` on the heapq core of `paraplan.sim.des`): every stream of every
  rank is a resource with a FIFO queue and jobs wait for other jobs; it records events (traces) and is the
  reference;
- the fast path below, for the tuner's hot loop. With static per-rank orders, the start of a task is
  max(end of the previous task on its rank, arrival of its inputs, release time): a max-plus recurrence,
  so one pass over the tasks in a topological order gives every time exactly, with flat int lists, no
  per-event objects and no heap (`paraplan.sim.loops`; the order: `paraplan.sim.order`).
  Sends keep the FIFO rule of the rank's pp stream; the DP stream (parameter gathers, gradient buckets,
  FSDP) follows the issue order of `paraplan.sim.timeline`. Tests check that both engines agree on random
  cases. With numba installed (the extra `fast`) the loops run compiled once loaded (`paraplan.sim.loops_jit`:
  when and why; the same floats to the bit); PARAPLAN_NO_JIT=1 keeps the pure-Python ones.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from paraplan.sim import loops_jit
from paraplan.sim.costs import PipelineCosts
from paraplan.sim.loops import full_loop, full_loop_jit, jit_rows_of, rows_of, static_loop
from paraplan.sim.plan import Plan, build_plan
from paraplan.sim.replay import replay
from paraplan.sim.result import SimResult
from paraplan.sim.summary import summarize
from paraplan.sim.tables import DurationTables, build_tables
from paraplan.sim.timeline import Timeline, bucket_delays_s, param_lead_s
from paraplan.specs.schedule import SCHEDULES, validate_schedule


def check_costs(costs: PipelineCosts) -> list[str]:
    """Shape and sign problems of `costs`, one line each (empty when fine)."""
    problems = []
    pp = costs.pp
    if pp < 1:
        return ["costs hold no pipeline rank"]
    vpp = _vpp(costs)
    problems += _schedule_problems(costs.schedule, pp, vpp, costs.num_microbatches)
    if problems:
        return problems
    want = SCHEDULES[costs.schedule].chunks_per_rank(vpp)
    fine: set[int] = set()  # chunks found fine (the ranks share their stages' chunk objects)
    for rank, row in enumerate(costs.chunks):
        if len(row) != want:
            problems.append(f"rank {rank} has {len(row)} chunks; {costs.schedule} needs {want}")
        for c, chunk in enumerate(row):
            if id(chunk) in fine:
                continue
            if min(chunk.forward_s, chunk.backward_input_s, chunk.backward_weight_s, chunk.dp_grad_reduce_s) >= 0:
                fine.add(id(chunk))  # the common case, without a lookup by name
                continue
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


@lru_cache(maxsize=1024)
def _schedule_problems(schedule: str, pp: int, vpp: int, num_microbatches: int) -> tuple[str, ...]:
    """`validate_schedule`, kept per shape (the tuner simulates thousands of candidates on a few hundred shapes)."""
    return tuple(validate_schedule(schedule, pp, vpp, num_microbatches))


def _vpp(costs: PipelineCosts) -> int:
    """The virtual pipeline size the costs' chunks stand for: their count where the schedule interleaves, else 1."""
    return _vpp_of(costs.schedule, costs.chunks_per_rank)


def _vpp_of(schedule: str, n_chunks: int) -> int:
    spec = SCHEDULES.get(schedule)
    return n_chunks if spec is not None and spec.interleaves else 1


def plan_for(costs: PipelineCosts) -> Plan:
    return schedule_plan(costs.schedule, costs.pp, costs.chunks_per_rank, costs.num_microbatches, costs.ep_overlap_on())


def schedule_plan(schedule: str, pp: int, n_chunks: int, num_microbatches: int, paired: bool) -> Plan:
    """The static plan the engines play for a schedule with `n_chunks` model chunks per rank (the memory
    pre-filter reads its in-flight micro-batches without costs)."""
    return build_plan(schedule, pp, _vpp_of(schedule, n_chunks), num_microbatches, paired)


def simulate(
    costs: PipelineCosts, *, record_events: bool = False, engine: str = "auto", breakdown: bool = True
) -> SimResult:
    """Simulate one step. engine: "auto" (the fast path, or the event engine when events are recorded),
    "fast" or "events" (tests compare the two); breakdown=False: the step time, memory peaks and busy
    times only (no named parts, no communication figures). Raises ValueError listing every problem with
    `costs`."""
    problems = check_costs(costs)
    if problems:
        raise ValueError("; ".join(problems))
    if engine not in ("auto", "fast", "events"):
        raise ValueError(f"engine must be auto, fast or events (got {engine!r})")
    plan = plan_for(costs)
    tables = build_tables(plan, costs, parts=breakdown)
    if engine == "events" or (engine == "auto" and record_events):
        timeline = replay(plan, costs, tables, record=record_events)
    else:
        timeline = fast_timeline(plan, costs, tables)
    return summarize(plan, costs, tables, timeline, record_events=record_events, breakdown=breakdown)


def _initial_slots(
    plan: Plan, costs: PipelineCosts, key_dur: list[float]
) -> tuple[list[tuple[int, float]], list[float]]:
    """The release slots filled before the run, (slot, time) each, and each rank's DP stream free time after
    the previous step's parameter all-gather, which heads the DP stream when it overlaps the first forwards."""
    released = []
    dp_free = [0.0] * plan.pp
    if costs.overlap_param_gather:
        buckets = costs.dp_buckets_per_chunk
        for rank in range(plan.pp):
            row = costs.chunks[rank]
            at = 0.0
            for _, c, key in plan.first_forwards[rank]:
                gather = row[c].dp_param_gather_s
                if gather > 0:
                    lead = param_lead_s(gather, key_dur[key], buckets)
                    first_end = at + lead
                    released.append((plan.release_base + rank * plan.n_chunks + c, first_end))
                    at = first_end + (gather - lead)
            dp_free[rank] = at
    return released, dp_free


def fast_timeline(plan: Plan, costs: PipelineCosts, tables: DurationTables, *, jit: bool | None = None) -> Timeline:
    """Every task's start and end without the event queue (see the module docstring). jit: the compiled
    loops (lists become float64 arrays in the timeline); None: as `paraplan.sim.loops_jit.use` says."""
    n = plan.n_tasks
    key_dur = tables.dur_s.tolist()
    released, dp_free = _initial_slots(plan, costs, key_dur)
    fsdp = plan.max_deps > 2 or tables.fsdp_gather_s.any() or tables.fsdp_scatter_s.any()
    if jit if jit is not None else loops_jit.use(n):
        rows = jit_rows_of(plan)
        t = np.zeros(plan.n_slots)
        for slot, at in released:
            t[slot] = at
        start = np.zeros(n + 1)
        if fsdp:
            return full_loop_jit(plan, rows, costs, tables, t, start, dp_free)
        static, _ = loops_jit.loops()
        static(
            rows.tasks, rows.dep0, rows.dep1, rows.ranks, rows.send0, rows.send1, rows.keys, tables.dur_s, t, start,
            float(costs.p2p_s), plan.pp,
        )  # fmt: skip
        end = t[: n + 1].copy()
    else:
        rows = rows_of(plan)
        durs = tables.dur_s[rows.keys].tolist()
        t = [0.0] * plan.n_slots
        for slot, at in released:
            t[slot] = at
        start = [0.0] * (n + 1)
        if fsdp:
            return full_loop(plan, rows, costs, tables, durs, t, start, dp_free)
        static_loop(rows, durs, t, start, costs.p2p_s, plan.pp)
        end = t[: n + 1]
    end[0] = 0.0
    if isinstance(start, np.ndarray) and loops_jit.loaded():
        return Timeline(start, end, t, _grad_reduction_compiled(plan, costs, start, end, tables.dur_s, dp_free))
    return Timeline(start, end, t, _grad_reduction(plan, costs, start, end, key_dur, dp_free))


def _grad_reduction_compiled(
    plan: Plan, costs: PipelineCosts, start: np.ndarray, end: np.ndarray, dur_s: np.ndarray, dp_free: list[float]
) -> list[float]:
    """`_grad_reduction` by the compiled kernel (`paraplan.sim.kernels.grad_reduction`): the same floats."""
    from paraplan.sim.kernels import grad_reduction

    found = plan.memo.get("last_weights")
    if found is None:  # each chunk's last weight-gradient task, rank after rank, in task order: (task, chunk, key)
        rows = [(rank, task, c, key) for rank in range(plan.pp) for task, c, key in plan.last_weights[rank]]
        found = plan.memo["last_weights"] = np.array(rows, dtype=np.int64).reshape(-1, 4).T.copy()
    rank_of, tasks, chunk, keys = found
    pairs = zip(rank_of.tolist(), chunk.tolist(), strict=True)
    reduce_s = np.array([costs.chunks[r][c].dp_grad_reduce_s for r, c in pairs], dtype=np.float64)
    last_tasks = plan.last_tasks
    if last_tasks is not None:
        last = end[last_tasks]
    else:
        last = np.array([float(end[h - 1]) if h > lo else 0.0 for lo, h in zip(plan.lo, plan.hi, strict=True)])
    done = grad_reduction(
        last, start, tasks, reduce_s, dur_s[keys], rank_of, int(costs.dp_buckets_per_chunk),
        bool(costs.overlap_grad_reduce), np.array(dp_free, dtype=np.float64),
    )  # fmt: skip
    return done.tolist()


def _grad_reduction(
    plan: Plan,
    costs: PipelineCosts,
    start: list[float] | np.ndarray,
    end: list[float] | np.ndarray,
    key_dur: list[float],
    dp_free: list[float],
) -> list[float]:
    """Per rank: when the last backward and the gradient reduction (DP stream, after the parameter
    all-gather) have both finished."""
    buckets = costs.dp_buckets_per_chunk
    rank_done = []
    for rank in range(plan.pp):
        row = costs.chunks[rank]
        lo, hi = plan.lo[rank], plan.hi[rank]
        last = float(end[hi - 1]) if hi > lo else 0.0
        done = last
        at = dp_free[rank]
        for task, c, key in plan.last_weights[rank]:
            reduce_s = row[c].dp_grad_reduce_s
            if reduce_s <= 0:
                continue
            if costs.overlap_grad_reduce:
                share = reduce_s / buckets
                began = float(start[task])
                for delay in bucket_delays_s(key_dur[key], buckets):
                    ready = began + delay
                    at = (at if at > ready else ready) + share
            else:
                at = (at if at > last else last) + reduce_s
            done = at if at > done else done
        rank_done.append(done)
    return rank_done
