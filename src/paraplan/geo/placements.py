"""The three placements and the search over their parameters.

(a) DP across datacenters: every datacenter trains whole replicas of the model (TP and PP inside it); the
    gradients cross the WAN once a step (hierarchical all-reduce: reduce-scatter inside, ring across,
    all-gather inside).
(b) PP across datacenters: one pipeline spans the datacenters (contiguous stages in each), TP inside each
    stage, DP replicas of the pipeline side by side; only boundary activations and their gradients cross
    the WAN, each pipeline's transfers sharing the link spatially over the baseline's flows.
(c) Atlas (Palak et al. 2024): the layout of (b) — PP across datacenters, DP pipelines inside them — with
    many TCP flows per link and temporal bandwidth sharing, the pipelines' cross-datacenter transfers
    taking turns on the whole link in schedule order; it also picks which datacenters to use.

For each placement the search enumerates TP size, pipeline count (or PP size), and datacenter order; ranks
them with the closed-form estimate; keeps those that fit in memory (core memory model); and simulates the
best few on the event engine. The simulated step time decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from paraplan.geo.estimate import estimate_step_s
from paraplan.geo.geosim import GeoSimResult, simulate_geo
from paraplan.geo.plan import GeoPlan, PipelineGroup, PlacementKind
from paraplan.geo.stages import (
    WAN_GRAD_BYTES,
    StageMemory,
    TrainSetup,
    memory_problem,
    pipeline_stages,
    stage_memory,
    stage_sync,
)
from paraplan.geo.topology import GeoSystem
from paraplan.geo.wan import Sharing
from paraplan.specs.schedule import schedule as schedule_named

TP_DEFAULT = (1, 2, 4, 8)
MEMORY_CHECKS = 48  # candidates checked for memory, in estimate order, before giving up


def tp_options(setup: TrainSetup, geo: GeoSystem, wanted: Sequence[int] | None) -> list[int]:
    model = setup.model
    node = min(dc.system.gpus_per_node for dc in geo.datacenters)
    out = []
    for tp in wanted or TP_DEFAULT:
        if tp > node or model.num_attention_heads % tp or (not model.is_mla and model.kv_groups % tp):
            continue
        out.append(tp)
    return out


def pipeline_options(setup: TrainSetup, wanted: Sequence[int] | None) -> list[int]:
    divisors = [n for n in range(1, setup.samples + 1) if setup.samples % n == 0]
    return [n for n in divisors if wanted is None or n in wanted]


def _group(setup: TrainSetup, geo: GeoSystem, stages: tuple, tp: int, count: int) -> PipelineGroup:
    reduce, gather, opt = [], [], []
    for i, st in enumerate(stages):
        r, a, o = stage_sync(setup, geo.dc(st.dc).system, tp, stages, i, count)
        reduce.append(r)
        gather.append(a)
        opt.append(o)
    return PipelineGroup(stages, count, tuple(reduce), tuple(gather), tuple(opt))


def _overhead_s(setup: TrainSetup, geo: GeoSystem) -> float:
    from paraplan.cost.calibration import calibration_for

    return calibration_for(geo.datacenters[0].system.gpu.name, setup.framework).step_overhead_s


def pp_plan(
    setup: TrainSetup,
    geo: GeoSystem,
    order: Sequence[str],
    tp: int,
    pipelines: int,
    flows: int,
    sharing: Sharing,
    kind: PlacementKind,
    *,
    stages_per_dc: Sequence[int] | None = None,
    microbatches: int | None = None,
) -> GeoPlan | None:
    """`pipelines` pipelines spanning `order`; each datacenter gives as many stages as its GPUs allow
    (or `stages_per_dc`), and each pipeline runs its share of the global batch (or `microbatches`)."""
    if stages_per_dc is None:
        stages_per_dc = [geo.dc(name).gpus // (tp * pipelines) for name in order]
    if min(stages_per_dc) < 1:
        return None
    m = microbatches or setup.samples // pipelines
    total = sum(stages_per_dc)
    if not schedule_named(setup.schedule).all_forwards_first and m < total:
        return None
    systems = [(name, geo.dc(name).system) for name, k in zip(order, stages_per_dc, strict=True) for _ in range(k)]
    stages = pipeline_stages(setup, systems, tp)
    if stages is None:
        return None
    return GeoPlan(
        placement=kind,
        tp=tp,
        microbatches=m,
        schedule=setup.schedule,
        groups=(_group(setup, geo, stages, tp, pipelines),),
        flows=flows,
        sharing=sharing,
        dc_order=tuple(order),
        tokens_per_step=pipelines * m * setup.mbs * setup.seq,
        step_overhead_s=_overhead_s(setup, geo),
    )


def _replicas(geo: GeoSystem, per_replica: int, samples: int) -> list[int] | None:
    """Replicas per datacenter, as many as fit, trimmed (largest first) until they divide the batch."""
    reps = [dc.gpus // per_replica for dc in geo.datacenters]
    if min(reps) < 1:
        return None
    while samples % sum(reps):
        i = max(range(len(reps)), key=lambda j: reps[j])
        if reps[i] <= 1:
            return None
        reps[i] -= 1
    return reps


def dp_plan(setup: TrainSetup, geo: GeoSystem, ring: Sequence[str], tp: int, pp: int, flows: int) -> GeoPlan | None:
    """Whole replicas in every datacenter of `ring`, gradients all-reduced around it over the WAN."""
    sub = geo.subset(ring)
    reps = _replicas(sub, tp * pp, setup.samples)
    if reps is None or pp > setup.model.num_layers:
        return None
    m = setup.samples // sum(reps)
    if not schedule_named(setup.schedule).all_forwards_first and m < pp:
        return None
    groups = []
    first = sub.datacenters[0]
    reference = pipeline_stages(setup, [(first.name, first.system)] * pp, tp)
    if reference is None:
        return None
    layout = tuple(st.num_layers for st in reference)  # every replica splits the model alike (stage-wise reduce)
    for dc, count in zip(sub.datacenters, reps, strict=True):
        stages = pipeline_stages(setup, [(dc.name, dc.system)] * pp, tp, layout)
        assert stages is not None
        groups.append(_group(setup, geo, stages, tp, count))
    grad_bytes = tuple(st.params_per_gpu * tp * WAN_GRAD_BYTES for st in reference)
    return GeoPlan(
        placement="dp-across",
        tp=tp,
        microbatches=m,
        schedule=setup.schedule,
        groups=tuple(groups),
        flows=flows,
        sharing="temporal",
        dc_order=tuple(ring),
        cross_dc_grad_bytes=grad_bytes,
        tokens_per_step=setup.tokens_per_step,
        step_overhead_s=_overhead_s(setup, geo),
    )


def plan_memory(plan: GeoPlan, setup: TrainSetup, geo: GeoSystem) -> tuple[StageMemory, ...]:
    """Peak memory of every stage of every group, from the core's memory model."""
    systems = {dc.name: dc.system for dc in geo.datacenters}
    out: list[StageMemory] = []
    for g in plan.groups:
        # this group's part of the batch
        share = replace(setup, train=replace(setup.train, global_batch_size=plan.microbatches * setup.mbs * g.count))
        out += stage_memory(share, g.stages, systems, plan.tp, g.count)
    return tuple(out)


@dataclass(frozen=True)
class Evaluated:
    plan: GeoPlan
    sim: GeoSimResult
    estimate_s: float
    memory: tuple[StageMemory, ...]

    @property
    def step_time_s(self) -> float:
        return self.sim.step_time_s


@dataclass(frozen=True)
class PlacementOutcome:
    kind: PlacementKind
    best: Evaluated | None
    problems: tuple[str, ...] = ()
    """Why there is no plan (no candidate, nothing fits), one line each."""
    considered: int = 0


def no_layout_reason(kind: PlacementKind, setup: TrainSetup, geo: GeoSystem) -> str:
    if kind == "dp-across":
        if len(geo.datacenters) < 2:
            return "needs two or more datacenters"
        if geo.ring(geo.names) is None:
            return f"needs WAN links that join {', '.join(geo.names)} in a ring (for the gradient all-reduce)"
        return "no TP x PP replica fits every datacenter's GPU count with micro-batches >= PP"
    if not any(True for _ in geo.chains(geo.names)):
        return f"needs WAN links that join {', '.join(geo.names)} in a chain"
    return f"no layout gives every datacenter a stage with micro-batches >= stages ({setup.samples} micro-batches)"


def choose(
    kind: PlacementKind, plans: Iterable[GeoPlan], setup: TrainSetup, geo: GeoSystem, top: int
) -> PlacementOutcome:
    """Rank by estimate, keep the first `top` that fit in memory, simulate them, return the fastest."""
    ranked = sorted(((estimate_step_s(p, geo), i, p) for i, p in enumerate(plans)), key=lambda x: x[:2])
    if not ranked:
        return PlacementOutcome(kind, None, (no_layout_reason(kind, setup, geo),), 0)
    fitting: list[tuple[float, GeoPlan, tuple[StageMemory, ...]]] = []
    closest: tuple[float, str] | None = None  # the layout that misses by the least
    for est, _, plan in ranked[:MEMORY_CHECKS]:
        mem = plan_memory(plan, setup, geo)
        problem = memory_problem(mem, f"closest layout {plan.describe()}")
        if problem is None:
            fitting.append((est, plan, mem))
            if len(fitting) >= top:
                break
            continue
        ratio = max(m.peak_bytes / m.usable_bytes for m in mem)
        if closest is None or ratio < closest[0]:
            closest = (ratio, problem)
    if not fitting:
        return PlacementOutcome(kind, None, (closest[1],) if closest else (), len(ranked))
    evaluated = [Evaluated(p, simulate_geo(p, geo), est, mem) for est, p, mem in fitting]
    best = min(evaluated, key=lambda e: e.step_time_s)
    return PlacementOutcome(kind, best, (), len(ranked))


def pp_candidates(
    setup: TrainSetup,
    geo: GeoSystem,
    tps: Sequence[int],
    pipelines: Sequence[int],
    flows: int,
    sharing: Sharing,
    kind: PlacementKind,
    orders: Iterable[Sequence[str]] | None = None,
) -> list[GeoPlan]:
    plans = []
    for order in orders if orders is not None else geo.chains(geo.names):
        for tp in tps:
            for n in pipelines:
                plan = pp_plan(setup, geo, order, tp, n, flows, sharing, kind)
                if plan is not None:
                    plans.append(plan)
    return plans


def dp_candidates(setup: TrainSetup, geo: GeoSystem, tps: Sequence[int], flows: int) -> list[GeoPlan]:
    ring = geo.ring(geo.names)
    if ring is None or len(ring) < 2:
        return []
    plans = []
    for tp in tps:
        pp = 1
        while pp <= setup.model.num_layers and tp * pp <= min(dc.gpus for dc in geo.datacenters):
            plan = dp_plan(setup, geo, ring, tp, pp, flows)
            if plan is not None:
                plans.append(plan)
            pp *= 2
    return plans
