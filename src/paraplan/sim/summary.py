"""From a timeline to a SimResult: step time, its named parts, exposed communication, memory peaks."""

from __future__ import annotations

import numpy as np

from paraplan.sim import loops_jit
from paraplan.sim.breakdown import BreakdownPart as Part
from paraplan.sim.breakdown import close_with_bubble
from paraplan.sim.costs import PipelineCosts
from paraplan.sim.plan import Plan, peak_live_bytes
from paraplan.sim.result import Event, SimResult
from paraplan.sim.tables import DurationTables
from paraplan.sim.timeline import Timeline

PIPELINE_WIDE_COMM = frozenset({"pp", "dp", "fsdp"})
"""Communication kinds whose total is every pipeline rank's (`SimResult.comm_total_s`), the others' the critical
rank's."""


def critical_path_waits(plan: Plan, tl: Timeline) -> dict[str, float]:
    """Walk back from the last task to time 0 along what each task waited for, and add up the waits that
    were communication: "pp" (send time and queueing of the inputs it waited for), "dp" (parameter
    all-gather), "fsdp" (FSDP all-gather). Where a rank was busy until the task started, the walk stays on
    that rank, so only waits that lengthened the step count."""
    start, end, slots = tl.start_s, tl.end_s, tl.slots_s
    waits = {"pp": 0.0, "dp": 0.0, "fsdp": 0.0}
    lasts = [h - 1 for lo, h in zip(plan.lo, plan.hi, strict=True) if h > lo]
    task = max(lasts, key=lambda t: (float(end[t]), -t)) if lasts else 0
    if isinstance(start, np.ndarray) and not tl.gates and loops_jit.loaded():  # from the compiled loops, no FSDP
        from paraplan.sim.kernels import critical_waits

        is_first = plan.memo.get("is_first")
        if is_first is None:
            is_first = plan.memo["is_first"] = np.zeros(plan.n_tasks + 1, dtype=np.bool_)
            is_first[list(plan.lo)] = True
        waits["pp"], waits["dp"] = critical_waits(
            start, end, slots, plan.dep_slots, plan.send_producer, plan.send_base, plan.release_base, is_first, task
        )
        return waits
    if isinstance(start, np.ndarray):  # from the compiled loops: lists read faster one by one
        start, end, slots = start.tolist(), end.tolist(), slots.tolist()
    cols, producer_of = plan.rows[:-2], plan.send_producer  # per task: its dependency slots
    send_base, release_base = plan.send_base, plan.release_base
    first_of_rank = set(plan.lo)
    while task:
        s = start[task]
        p = 0 if task in first_of_rank else task - 1
        busy_until = end[p] if p else 0.0
        if s <= busy_until:
            task = p
            continue
        producer = 0
        released = False
        for col in cols:
            slot = col[task]
            if slot and slots[slot] >= s:
                if slot < release_base:
                    producer = int(producer_of[slot - send_base])
                else:
                    released = True
                break
        if producer:
            waits["pp"] += s - end[producer]
            task = producer
            continue
        gate = tl.gates.get(task)
        if gate is not None and gate[0] >= s:
            waits[gate[1]] += s - busy_until
        elif released:
            waits["dp"] += s - busy_until
        task = p
    return waits


def summarize(
    plan: Plan,
    costs: PipelineCosts,
    tables: DurationTables,
    tl: Timeline,
    *,
    record_events: bool,
    breakdown: bool = True,
) -> SimResult:
    """breakdown=False leaves the named parts and the communication figures empty (the tuner ranks by the
    step time and memory alone)."""
    pp, n_chunks = plan.pp, plan.n_chunks
    end = tl.end_s
    last_tasks = plan.last_tasks
    if last_tasks is not None and isinstance(end, np.ndarray):
        pipeline_s = float(end[last_tasks].max())  # the same float: a maximum rounds nothing
    else:
        pipeline_s = max((float(end[h - 1]) for lo, h in zip(plan.lo, plan.hi, strict=True) if h > lo), default=0.0)
    busy = (plan.key_counts @ tables.dur_s).tolist()
    rank_done = list(tl.rank_done_s)
    sync_s = max(rank_done)
    optimizer = costs.optimizer_per_rank_s()
    if costs.overlap_param_gather:
        gather_after = [0.0] * pp
    else:  # sum() over a list: the same additions as over a generator, without one per rank
        gather_after = [sum([c.dp_param_gather_s for c in row]) for row in costs.chunks]
    post = [optimizer[r] + gather_after[r] for r in range(pp)]
    post_rank = max(range(pp), key=lambda r: (post[r], -r))
    step_s = sync_s + post[post_rank]
    critical = max(range(pp), key=lambda r: (rank_done[r], busy[r], -r))
    parts: dict[str, float] = {}
    comm_total: dict[str, float] = {}
    comm_exposed: dict[str, float] = {}
    if breakdown:
        tail = (optimizer[post_rank], gather_after[post_rank], step_s)
        parts, comm_total, comm_exposed = _parts(plan, costs, tables, tl, critical, busy[critical], pipeline_s, *tail)

    peak_bytes = [peak_live_bytes(plan, rank, [c.activation_bytes for c in costs.chunks[rank]]) for rank in range(pp)]

    events: tuple[Event, ...] = ()
    if record_events:
        tail = []
        for rank in range(pp):
            tail.append(Event(rank, "compute", "optimizer step", sync_s, optimizer[rank]))
            if gather_after[rank] > 0:
                tail.append(Event(rank, "dp", "param all-gather", sync_s + optimizer[rank], gather_after[rank]))
        events = tuple(sorted(tl.events + tail, key=lambda e: (e.rank, e.stream, e.start_s, -e.dur_s)))

    return SimResult(
        step_time_s=step_s,
        pipeline_time_s=pipeline_s,
        # a rank's tasks run one after another inside the pipeline phase, so busy <= pipeline_s: a difference below
        # zero is the rounding of the two sums (-1e-16 s), no time
        bubble_s=tuple(max(0.0, pipeline_s - b) for b in busy),
        compute_busy_s=tuple(busy),
        comm_total_s=comm_total,
        comm_exposed_s=comm_exposed,
        optimizer_s=optimizer[post_rank],
        peak_inflight_microbatches=tuple(c / n_chunks for c in plan.peak_inflight_chunks),
        peak_activation_bytes=tuple(peak_bytes),
        critical_rank=critical,
        events=events,
        breakdown_s=parts,
        dp_done_s=tuple(rank_done),
        peak_inflight_chunks=plan.peak_inflight_chunks,
    )


def _parts(
    plan: Plan,
    costs: PipelineCosts,
    tables: DurationTables,
    tl: Timeline,
    critical: int,
    busy_s: float,
    pipeline_s: float,
    optimizer_s: float,
    gather_after_s: float,
    step_s: float,
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """The named parts of the step (`BreakdownPart`), and the communication on the critical rank: (breakdown, total,
    exposed). `step_s` = pipeline_s + the data-parallel tail + optimizer_s + gather_after_s."""
    rank_done = tl.rank_done_s
    dp_tail_s = max(rank_done) - pipeline_s
    # the pipeline part, seen from the critical rank: its compute, then its idle time
    counts = plan.key_counts[critical]
    breakdown: dict[str, float] = {
        Part.FORWARD_COMPUTE: float(counts @ tables.forward_s),
        Part.BACKWARD_COMPUTE: float(counts @ tables.backward_s),
        Part.RECOMPUTE: float(counts @ tables.recompute_s),
    }
    if tables.interference_s is not None:  # the EP all-to-all hidden in F&B pairs slows their compute
        breakdown[Part.COMM_INTERFERENCE] = float(counts @ tables.interference_s)
    kinds = tuple(tables.exposed_s)
    exposed_intra = {k: float(counts @ tables.exposed_s[k]) for k in kinds}
    for k in kinds:
        breakdown[Part.comm_exposed(k)] = exposed_intra[k]
    # the critical rank's idle time in the pipeline phase: first the communication it waited for, the rest bubble
    waits = critical_path_waits(plan, tl)
    idle = max(0.0, pipeline_s - busy_s)
    pp_exposed = min(waits["pp"], idle)
    fsdp_exposed = min(waits["fsdp"], idle - pp_exposed)
    gather_wait = min(waits["dp"], idle - pp_exposed - fsdp_exposed)
    sync_rank = max(range(plan.pp), key=lambda r: (rank_done[r], -r))
    fsdp_tail = tl.tail_kind and tl.tail_kind[sync_rank] == "fsdp"
    breakdown[Part.PP_P2P_EXPOSED] = pp_exposed
    breakdown[Part.FSDP_EXPOSED] = fsdp_exposed + (dp_tail_s if fsdp_tail else 0.0)
    breakdown[Part.DP_PARAM_GATHER_WAIT] = gather_wait
    breakdown[Part.PIPELINE_BUBBLE] = 0.0  # its place in the order; set below to the rest of the step
    breakdown[Part.DP_GRAD_REDUCE_EXPOSED] = 0.0 if fsdp_tail else dp_tail_s
    breakdown[Part.OPTIMIZER] = optimizer_s
    breakdown[Part.DP_PARAM_GATHER_EXPOSED] = gather_after_s
    # = idle - pp_exposed - fsdp_exposed - gather_wait: the busy parts add up to busy_s, the others to the rest
    close_with_bubble(breakdown, step_s)

    row = costs.chunks[critical]
    mbs = plan.microbatches_per_chunk[critical]
    comm_total = {k: sum(n * c.comm_total_s.get(k, 0.0) for n, c in zip(mbs, row, strict=True)) for k in kinds}
    # pp, dp and fsdp are exposed where the critical path waits on them, and that path crosses every rank (the fill
    # waits on each stage's send in turn; the data-parallel tail is the last rank to finish's; a forward waits on
    # another rank's gather), so their totals are the whole pipeline's: each exposed wait lies inside one rank's
    # stream of those transfers, and the waits lie apart in time. The critical rank's own sends alone made the
    # exposed pp twice the total with one micro-batch on pp=2 (issue 34).
    comm_total["pp"] = sum(plan.sends_per_rank) * costs.p2p_s  # PIPELINE_WIDE_COMM
    comm_total["dp"] = sum(c.dp_grad_reduce_s + c.dp_param_gather_s for chunks in costs.chunks for c in chunks)
    comm_total["fsdp"] = sum(
        n * (2 * c.fsdp_gather_s + c.fsdp_refetch_s + c.fsdp_reduce_scatter_s)
        for rank, chunks in enumerate(costs.chunks)
        for n, c in zip(plan.microbatches_per_chunk[rank], chunks, strict=True)
    )
    comm_exposed = dict(exposed_intra)
    comm_exposed["pp"] = pp_exposed
    comm_exposed["dp"] = breakdown[Part.DP_GRAD_REDUCE_EXPOSED] + gather_wait + gather_after_s
    comm_exposed["fsdp"] = breakdown[Part.FSDP_EXPOSED]
    return breakdown, comm_total, comm_exposed
