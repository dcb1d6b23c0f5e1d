"""One training step of a geo placement on the core's heapq event engine, with WAN links as streams.

Every pipeline stage (a TP group of GPUs) has a compute stream; every WAN link direction is a stream of its
own (sends inside a datacenter are plain delays: its fabric is never the bottleneck for one activation).
The compute streams play the core's schedule programs (`paraplan.sim.schedules`); the activation of micro-batch i
crosses from stage s to s+1 after F(s, i), its gradient back after B(s+1, i).

WAN sharing (Atlas, Palak et al. 2024):
- spatial: each of the N pipelines owns 1/N of the flows and of the link: a stream per pipeline at 1/N rate;
  the pipelines are then independent, so one representative is simulated and stands for all N;
- temporal: one stream per link direction at the full rate; the transfers of all pipelines take turns in the
  order the schedule produces them (micro-batch, then pipeline), which staggers the pipelines so that one
  computes while another sends. Every pipeline is simulated.
A transfer occupies its stream for its serialisation time; the receiver waits one more one-way delay.

Gradients: PP placements reduce each stage's gradients inside its datacenter (reduce-scatter, optimizer,
all-gather); DP across datacenters adds a WAN ring all-reduce per stage between the two intra-datacenter
halves (hierarchical), started as soon as that stage's backward is done everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from paraplan.geo.plan import GeoPlan, PipelineGroup
from paraplan.geo.topology import GeoSystem
from paraplan.geo.wan import WanLink, rate_gbps, ring_allreduce_s, serialization_s
from paraplan.sim.breakdown import DocumentedPart
from paraplan.sim.des import EventEngine
from paraplan.sim.program import BW, KIND_NAMES, B, F, W
from paraplan.sim.schedules import rank_programs

Interval = tuple[float, float]


class GeoBreakdownPart(DocumentedPart):
    """One named part of a geo step (`GeoSimResult.breakdown_s`), on the stage whose optimizer ends last. A geo step
    is its own event simulation, parted coarser than a projection's (`paraplan.result.BreakdownPart`): its
    forward and backward hold their communication, and its waits mix the bubble with the WAN."""

    FORWARD = (
        "forward",
        "The stage's forward passes of every micro-batch (compute and the communication inside the layers).",
    )
    BACKWARD = (
        "backward",
        "Its backward passes (input and weight gradients).",
    )
    PIPELINE_BUBBLE_AND_WAN_WAIT = (
        "pipeline_bubble_and_wan_wait",
        "From the step's start to its last backward, the time it was not computing: the schedule's fill "
        "and drain and the waits for activations and gradients over the WAN. The rest of that span, so "
        "the parts sum.",
    )
    GRAD_SYNC_EXPOSED = (
        "grad_sync_exposed",
        "From its last backward to its optimizer's start: the gradient reduction (WAN all-reduce included) left.",
    )
    OPTIMIZER = (
        "optimizer",
        "The optimizer step.",
    )
    PARAM_GATHER_AND_TAIL = (
        "param_gather_and_tail",
        "From its optimizer's end to the step's end: the parameter all-gather and waiting for the other stages.",
    )
    FRAMEWORK_OVERHEAD = (
        "framework_overhead",
        "The framework's fixed per-step cost (`Calibration.step_overhead_s`).",
    )


@dataclass(frozen=True, slots=True)
class Slot:
    """One simulated pipeline stage: `gpus` GPUs (a TP group) in datacenter `dc`. `weight` identical
    stages (pipelines not simulated because they are independent and equal) share its timeline."""

    index: int
    group: int
    pipeline: int
    stage: int
    dc: str
    gpus: int
    weight: int

    @property
    def name(self) -> str:
        return f"pipeline {self.group}.{self.pipeline} · stage {self.stage} · {self.dc}"


@dataclass(frozen=True, slots=True)
class GeoEvent:
    process: str
    stream: str
    name: str
    start_s: float
    dur_s: float
    microbatch: int = -1

    @property
    def end_s(self) -> float:
        return self.start_s + self.dur_s


@dataclass(frozen=True)
class GeoSimResult:
    plan: GeoPlan
    step_time_s: float
    slots: tuple[Slot, ...]
    busy: tuple[tuple[Interval, ...], ...]
    """Per slot: training compute intervals (F, B, W, optimizer), in time order."""
    reserved: tuple[tuple[Interval, ...], ...]
    """Per slot: intervals its GPUs run the datacenter-internal gradient collectives (no prefill there)."""
    compute_starts: tuple[tuple[float, ...], ...]
    """Per slot: start of every training compute job in stream order (the no-slowdown check compares them)."""
    link_busy_s: dict[str, float]
    """Per WAN link direction ("a->b"): bytes of one step / the rate the plan's flows reach: the seconds the
    link is busy per step (busy / step time = its utilisation)."""
    link_bytes: dict[str, float]
    breakdown_s: dict[str, float]
    """The critical stage's step in named parts (`GeoBreakdownPart`) that sum to step_time_s."""
    events: tuple[GeoEvent, ...] = ()
    extra_intervals: tuple[tuple[Interval, ...], ...] = field(default_factory=tuple)
    """Per slot: where inserted jobs (prefill) actually ran, when there were any."""

    @property
    def tokens_per_s(self) -> float:
        return self.plan.tokens_per_step / self.step_time_s

    def busy_s(self, slot: int) -> float:
        return sum(b - a for a, b in self.busy[slot])


class _Jobs:
    """EventEngine plus labels, with resources named on first use."""

    def __init__(self, n_resources: int, record: bool) -> None:
        self.eng = EventEngine(n_resources)
        self.ids: dict[str, int] = {}
        self.record = record
        self.labels: list[tuple[str, str, str, int]] = []

    def res(self, name: str) -> int:
        if name not in self.ids:
            self.ids[name] = len(self.ids)
        return self.ids[name]

    def add(self, resource: str | None, dur_s: float, process: str, stream: str, name: str, mb: int = -1) -> int:
        if self.record:
            self.labels.append((process, stream, name, mb))
        return self.eng.add(-1 if resource is None else self.res(resource), dur_s)


def _link_key(a: str, b: str) -> str:
    return f"{a}->{b}"


def _wan_link(geo: GeoSystem, a: str, b: str) -> WanLink:
    link = geo.link(a, b)
    if link is None:
        raise ValueError(f"no WAN link between '{a}' and '{b}'")
    return link


def _simulated_pipelines(plan: GeoPlan, group: PipelineGroup) -> int:
    return group.count if plan.sharing == "temporal" and group.crosses_wan else 1


def simulate_geo(
    plan: GeoPlan,
    geo: GeoSystem,
    *,
    record_events: bool = False,
    baseline: GeoSimResult | None = None,
    extra: Mapping[int, Sequence[Interval]] | None = None,
) -> GeoSimResult:
    """Play one step. `extra`: per slot, jobs (earliest start, duration) to insert into its compute stream
    where `baseline` (the same plan simulated without them) had them idle: BubbleTea's prefills."""
    P, m = plan.pp, plan.microbatches
    programs = rank_programs(plan.schedule, P, 1, m)
    slots: list[Slot] = []
    grid: dict[tuple[int, int, int], Slot] = {}
    for gi, group in enumerate(plan.groups):
        n_sim = _simulated_pipelines(plan, group)
        for p in range(n_sim):
            for s, stage in enumerate(group.stages):
                slot = Slot(len(slots), gi, p, s, stage.dc, plan.tp, group.count // n_sim)
                slots.append(slot)
                grid[(gi, p, s)] = slot
    n_res = 4 * len(slots) + 4 * len(geo.links) * (1 + max(g.count for g in plan.groups)) + 8
    jobs = _Jobs(n_res, record_events)
    extra = extra or {}

    # 1. compute streams: the schedule's program per stage, inserted jobs where the baseline was idle
    job_of: dict[tuple[int, str, int], int] = {}
    compute_jobs: list[list[int]] = [[] for _ in slots]
    extra_jobs: list[list[int]] = [[] for _ in slots]
    not_training: set[int] = set()
    last_w: list[int] = [0] * len(slots)
    opt_job: list[int] = [0] * len(slots)

    def insert_before(slot: Slot, todo: list[Interval], start_s: float) -> None:
        """Queue the inserted jobs that the baseline had idle before `start_s` (each gated by its start)."""
        while todo and todo[0][0] < start_s:
            at, dur = todo.pop(0)
            gate = jobs.add(None, at, slot.name, "gate", "gate")
            j = jobs.add(f"compute {slot.index}", dur, slot.name, "prefill", "prefill")
            jobs.eng.after(j, gate)
            extra_jobs[slot.index].append(j)
            not_training.update((gate, j))

    for slot in slots:
        stage = plan.groups[slot.group].stages[slot.stage]
        proc, res = slot.name, f"compute {slot.index}"
        todo = sorted(extra.get(slot.index, ()))
        base = baseline.compute_starts[slot.index] if baseline is not None and todo else ()
        for k, (kind, _, mb) in enumerate(programs[slot.stage].actions):
            if base:
                insert_before(slot, todo, base[k])
            dur = {
                F: stage.forward_s,
                B: stage.backward_input_s,
                W: stage.backward_weight_s,
                BW: stage.backward_input_s + stage.backward_weight_s,
            }[kind]
            j = jobs.add(res, dur, proc, "compute", f"{KIND_NAMES[kind]} mb{mb}", mb)
            compute_jobs[slot.index].append(j)
            job_of[(slot.index, "F" if kind == F else "W" if kind == W else "B", mb)] = j
            if kind in (W, BW):
                last_w[slot.index] = j
        if base:
            insert_before(slot, todo, base[-1])
        opt_job[slot.index] = jobs.add(
            res, plan.groups[slot.group].optimizer_s[slot.stage], proc, "compute", "optimizer"
        )
        compute_jobs[slot.index].append(opt_job[slot.index])
        if base:
            insert_before(slot, todo, float("inf"))

    # 2. activations forward and gradients backward between neighbour stages
    wan: list[tuple[str, tuple[int, int], float, float, int, int, float, str, str]] = []
    link_bytes: dict[str, float] = {}
    for slot in slots:
        group = plan.groups[slot.group]
        s, stage = slot.stage, group.stages[slot.stage]
        for kind, _, mb in programs[s].actions:
            if kind == F and s + 1 < P:
                peer, kind_name = grid[(slot.group, slot.pipeline, s + 1)], "F"
            elif kind in (B, BW) and s > 0:
                peer, kind_name = grid[(slot.group, slot.pipeline, s - 1)], "B"
            else:
                continue
            producer = job_of[(slot.index, kind_name, mb)]
            consumer = job_of[(peer.index, kind_name, mb)]
            what = "activation" if kind_name == "F" else "gradient"
            if peer.dc == slot.dc:  # inside a datacenter the fabric is never the bottleneck: a plain delay
                jobs.eng.after(consumer, producer, delay_s=stage.p2p_intra_s)
                continue
            link = _wan_link(geo, slot.dc, peer.dc)
            key = _link_key(slot.dc, peer.dc)
            nbytes = stage.boundary_bytes
            ser = serialization_s(nbytes, rate_gbps(link, plan.flows, plan.sharing, group.count))
            stream = key if plan.sharing == "temporal" else f"{key} #{slot.group}.{slot.pipeline}"
            wan.append((stream, (mb, slot.pipeline), ser, link.one_way_s, producer, consumer, nbytes, key, what))
            link_bytes[key] = link_bytes.get(key, 0.0) + nbytes * slot.weight
    wan.sort(key=lambda x: (x[0], x[1]))
    for stream, (mb, pipe), ser, delay, producer, consumer, _, key, what in wan:
        t = jobs.add(f"wan {stream}", ser, f"WAN {key}", stream, f"{what} p{pipe} mb{mb}", mb)
        jobs.eng.after(t, producer)
        jobs.eng.after(consumer, t, delay_s=delay)

    # 3. gradients: inside each datacenter, and over the WAN ring for DP across datacenters
    sync_jobs: list[list[int]] = [[] for _ in slots]
    ring_hops: list[tuple[str, str]] = []
    if plan.cross_dc_grad_bytes:
        order = plan.dc_order
        ring_hops = [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
        ring_links = [_wan_link(geo, a, b) for a, b in ring_hops]
    for s in reversed(range(P)):
        reduce_jobs = []
        members_all = []
        for gi, group in enumerate(plan.groups):
            members = [grid[(gi, p, s)] for p in range(_simulated_pipelines(plan, group))]
            members_all += members
            proc = members[0].name
            rs = jobs.add(f"dp {gi}.{s}", group.grad_reduce_s[s], proc, "dp", "grad reduce")
            for mem in members:
                jobs.eng.after(rs, last_w[mem.index])
                sync_jobs[mem.index].append(rs)
            reduce_jobs.append(rs)
        gates = reduce_jobs
        if plan.cross_dc_grad_bytes:
            nbytes = plan.cross_dc_grad_bytes[s]
            dur = ring_allreduce_s(nbytes, ring_links, plan.flows)
            gates = []
            for a, b in ring_hops:
                key = _link_key(a, b)
                t = jobs.add(f"wan {key}", dur, f"WAN {key}", key, f"grad all-reduce stage {s}")
                for rs in reduce_jobs:
                    jobs.eng.after(t, rs)
                gates.append(t)
                link_bytes[key] = link_bytes.get(key, 0.0) + 2 * (len(ring_hops) - 1) / len(ring_hops) * nbytes
        for mem in members_all:
            for g in gates:
                jobs.eng.after(opt_job[mem.index], g)
        for gi, group in enumerate(plan.groups):
            members = [x for x in members_all if x.group == gi]
            ag = jobs.add(f"dp {gi}.{s}", group.param_gather_s[s], members[0].name, "dp", "param all-gather")
            for mem in members:
                jobs.eng.after(ag, opt_job[mem.index])
                sync_jobs[mem.index].append(ag)

    starts, ends = jobs.eng.run()
    # the step ends with its last training job: inserted jobs must fit around it, not define it
    end_s = max(e for j, e in enumerate(ends) if j not in not_training)
    step = end_s + plan.step_overhead_s

    def spans(ids: list[int]) -> tuple[Interval, ...]:
        return tuple(sorted((starts[j], ends[j]) for j in ids if ends[j] > starts[j]))

    busy = tuple(spans(c) for c in compute_jobs)
    reserved = tuple(spans(c) for c in sync_jobs)
    link_busy = {}
    for key, nbytes in link_bytes.items():
        a, b = key.split("->")
        link_busy[key] = serialization_s(nbytes, _wan_link(geo, a, b).aggregate_gbps(plan.flows))
    # breakdown of the stage whose optimizer ends last
    crit = max(range(len(slots)), key=lambda i: ends[opt_job[i]])
    cslot = slots[crit]
    stage = plan.groups[cslot.group].stages[cslot.stage]
    forward = m * stage.forward_s
    backward = m * (stage.backward_input_s + stage.backward_weight_s)
    last_b = ends[last_w[crit]]
    optimizer = ends[opt_job[crit]] - starts[opt_job[crit]]
    Part = GeoBreakdownPart
    breakdown: dict[str, float] = {
        Part.FORWARD: forward,
        Part.BACKWARD: backward,
        Part.PIPELINE_BUBBLE_AND_WAN_WAIT: last_b - forward - backward,
        Part.GRAD_SYNC_EXPOSED: starts[opt_job[crit]] - last_b,
        Part.OPTIMIZER: optimizer,
        Part.PARAM_GATHER_AND_TAIL: end_s - ends[opt_job[crit]],
        Part.FRAMEWORK_OVERHEAD: plan.step_overhead_s,
    }
    events: tuple[GeoEvent, ...] = ()
    if record_events:
        events = tuple(
            GeoEvent(proc, stream, name, starts[j], ends[j] - starts[j], mb)
            for j, (proc, stream, name, mb) in enumerate(jobs.labels)
            if stream != "gate" and ends[j] > starts[j]
        )
    return GeoSimResult(
        plan=plan,
        step_time_s=step,
        slots=tuple(slots),
        busy=busy,
        reserved=reserved,
        compute_starts=tuple(tuple(starts[j] for j in c) for c in compute_jobs),
        link_busy_s=link_busy,
        link_bytes=dict(sorted(link_bytes.items())),
        breakdown_s=breakdown,
        events=events,
        extra_intervals=tuple(spans(e) for e in extra_jobs),
    )
