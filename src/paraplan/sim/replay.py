"""Play a plan on the heapq event engine: every stream of every rank as its own resource.

This is the reference semantics (and the only path for FSDP and for recorded events); the flat fast path
in `paraplan.sim.engine` computes the same times without the event queue and is tested against it.
"""

from __future__ import annotations

from paraplan.sim.costs import PipelineCosts
from paraplan.sim.des import EventEngine
from paraplan.sim.plan import Plan
from paraplan.sim.program import BW, W
from paraplan.sim.result import Event
from paraplan.sim.tables import DurationTables
from paraplan.sim.timeline import Timeline, bucket_delays_s, param_lead_s

COMPUTE, PP, DP = 0, 1, 2


def replay(plan: Plan, costs: PipelineCosts, tables: DurationTables, *, record: bool) -> Timeline:
    pp, n = plan.pp, plan.n_tasks
    dur = tables.dur_s[plan.cost_key].tolist()
    p2p = costs.p2p_s
    buckets = max(1, costs.dp_buckets_per_chunk)
    eng = EventEngine(3 * pp)
    labels: list[tuple[int, str, str, int, int]] = []  # per job: rank, stream, name, mb, chunk

    def add(rank: int, stream: int, duration: float, name: str, mb: int = -1, chunk: int = -1) -> int:
        labels.append((rank, ("compute", "pp", "dp")[stream], name, mb, chunk))
        return eng.add(3 * rank + stream, duration)

    rank_tasks = [range(plan.lo[r], plan.hi[r]) for r in range(pp)]
    actions = [()] + [plan.actions(t) for t in range(1, n + 1)]
    job = [0] * (n + 1)
    for rank, tasks in enumerate(rank_tasks):
        for t in tasks:
            _, chunk, mb = actions[t][0]
            job[t] = add(rank, COMPUTE, dur[t], plan.task_name(t), mb, chunk)
    send_job: dict[int, int] = {}
    for rank, tasks in enumerate(rank_tasks):
        for t in tasks:
            for slot in plan.send_slots[t].tolist():
                if slot:
                    send_job[slot] = add(rank, PP, p2p, f"send {plan.task_name(t)}")
                    eng.after(send_job[slot], job[t])
    for t in range(1, n + 1):
        for slot in plan.deps(t):
            if slot < plan.release_base:
                eng.after(job[t], send_job[slot])

    gate_job: dict[int, tuple[int, str]] = {}  # task -> DP-stream job that gates its start
    grad_jobs: list[list[int]] = [[] for _ in range(pp)]
    scatter_jobs: list[list[int]] = [[] for _ in range(pp)]
    gathers = tables.fsdp_gather_s[plan.cost_key].tolist()  # FSDP: parameters F and B need
    scatters = tables.fsdp_scatter_s[plan.cost_key].tolist()  # FSDP: gradients W makes
    units = tables.fsdp_units[plan.cost_key].tolist()  # FSDP: the units they come in
    demand = tables.fsdp_on_demand[plan.cost_key].tolist()  # FSDP: gathered on demand, not prefetched

    def fsdp_gather(rank: int, t: int, issued_at_start_of: int) -> None:
        """The gather in two jobs: until the task may start (`param_lead_s`), then the rest."""
        if gathers[t] > 0:
            mb, chunk = actions[t][0][2], actions[t][0][1]
            lead = gathers[t] if demand[t] else param_lead_s(gathers[t], dur[t], units[t])
            gj = add(rank, DP, lead, "fsdp all-gather", mb, chunk)
            if issued_at_start_of:
                eng.after(gj, job[issued_at_start_of], at_start=not demand[t])
            if gathers[t] > lead:
                add(rank, DP, gathers[t] - lead, "fsdp all-gather", mb, chunk)
            eng.after(job[t], gj)
            gate_job[t] = (gj, "fsdp")

    for rank, tasks in enumerate(rank_tasks):
        row = costs.chunks[rank]
        # 1. parameter all-gather of the previous step, overlapped with the first forwards
        if costs.overlap_param_gather:
            for t, c in sorted((t, c) for c, t in enumerate(plan.first_forward[rank]) if t):
                gather = row[c].dp_param_gather_s
                if gather > 0:
                    lead = param_lead_s(gather, dur[t], buckets)
                    first = add(rank, DP, lead, "param all-gather", chunk=c)
                    add(rank, DP, gather - lead, "param all-gather", chunk=c)
                    eng.after(job[t], first)
                    gate_job[t] = (first, "dp")
        # 2./3. FSDP gathers (one task ahead), gradient buckets, FSDP reduce-scatters, in issue order
        if len(tasks):
            fsdp_gather(rank, tasks[0], 0)
        for k, t in enumerate(tasks):
            if demand[t] and scatters[t] > 0:  # on demand: the reduce-scatter, then the next gather, hold the rank
                rj = add(rank, DP, scatters[t], "fsdp reduce-scatter", actions[t][-1][2], actions[t][-1][1])
                eng.after(rj, job[t])
                scatter_jobs[rank].append(rj)
                if k + 1 < len(tasks):
                    eng.after(job[tasks[k + 1]], rj)
            if k + 1 < len(tasks):
                fsdp_gather(rank, tasks[k + 1], t)
            if costs.overlap_grad_reduce:
                for kind, c, _ in actions[t]:
                    reduce_s = row[c].dp_grad_reduce_s
                    if kind in (W, BW) and plan.last_weight[rank][c] == t and reduce_s > 0:
                        for delay in bucket_delays_s(dur[t], buckets):
                            bj = add(rank, DP, reduce_s / buckets, "grad reduce bucket", chunk=c)
                            eng.after(bj, job[t], at_start=True, delay_s=delay)
                            grad_jobs[rank].append(bj)
            if scatters[t] > 0 and not demand[t]:  # unit by unit: all but the last from 1/u in, the last after
                mb, chunk, u = actions[t][-1][2], actions[t][-1][1], units[t]
                if u > 1:
                    rj = add(rank, DP, scatters[t] - scatters[t] / u, "fsdp reduce-scatter", mb, chunk)
                    eng.after(rj, job[t], at_start=True, delay_s=dur[t] / u)
                    scatter_jobs[rank].append(rj)
                rj = add(rank, DP, scatters[t] / u if u > 1 else scatters[t], "fsdp reduce-scatter", mb, chunk)
                eng.after(rj, job[t])
                scatter_jobs[rank].append(rj)
        if not costs.overlap_grad_reduce and len(tasks):
            for _, c in sorted((t, c) for c, t in enumerate(plan.last_weight[rank]) if t):
                if row[c].dp_grad_reduce_s > 0:
                    gj = add(rank, DP, row[c].dp_grad_reduce_s, "grad reduce", chunk=c)
                    eng.after(gj, job[tasks[-1]])
                    grad_jobs[rank].append(gj)

    starts, ends = eng.run()
    start = [0.0] * (n + 1)
    end = [0.0] * (n + 1)
    for t in range(1, n + 1):
        start[t] = starts[job[t]]
        end[t] = ends[job[t]]
    slots = [0.0] * plan.n_slots
    slots[1 : n + 1] = end[1:]
    for slot, j in send_job.items():
        slots[slot] = ends[j]
    rank_done, tail_kind = [], []
    for rank, tasks in enumerate(rank_tasks):
        last = end[tasks[-1]] if len(tasks) else 0.0
        grads = max([last] + [ends[j] for j in grad_jobs[rank]])
        scatters = max([last] + [ends[j] for j in scatter_jobs[rank]])
        rank_done.append(max(grads, scatters))
        tail_kind.append("fsdp" if scatters > grads else "dp")
    gates = {t: (ends[j], kind) for t, (j, kind) in gate_job.items()}
    timeline = Timeline(start, end, slots, rank_done, gates, tail_kind=tail_kind)
    if record:
        timeline.events = [
            Event(rank, stream, name, starts[j], ends[j] - starts[j], mb, chunk)
            for j, (rank, stream, name, mb, chunk) in enumerate(labels)
        ]
        timeline.events += hidden_comm_events(plan, tables, actions, start, end)
    return timeline


def hidden_comm_events(
    plan: Plan, tables: DurationTables, actions: list, start: list[float], end: list[float]
) -> list[Event]:
    """Intra-layer communication that overlapped a task, drawn inside that task's window (one after the
    other, clipped to the window) on the rank's "tp/cp/ep comm" stream."""
    events = []
    keys = plan.cost_key
    for t in range(1, plan.n_tasks + 1):
        at = start[t]
        for kind in tables.exposed_s:
            hidden = float(tables.hidden_s[kind][keys[t]])
            if hidden <= 0 or at >= end[t]:
                continue
            stop = min(end[t], at + hidden)
            _, chunk, mb = actions[t][0]
            events.append(Event(int(plan.task_rank[t]), "tp/cp/ep comm", kind, at, stop - at, mb, chunk))
            at = stop
    return events
