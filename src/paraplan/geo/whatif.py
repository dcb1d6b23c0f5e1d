"""What-if tables around a plan: which datacenters to use, how many TCP flows, spatial vs temporal sharing."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from paraplan.geo.geosim import simulate_geo
from paraplan.geo.placements import PlacementOutcome, choose, pp_candidates, pp_plan
from paraplan.geo.plan import GeoPlan
from paraplan.geo.stages import TrainSetup
from paraplan.geo.topology import GeoSystem

SELECTION_MAX_DATACENTERS = 6  # 63 subsets; beyond that only the full set is planned


@dataclass(frozen=True)
class SelectionRow:
    datacenters: tuple[str, ...]
    gpus_available: int
    outcome: PlacementOutcome

    @property
    def step_time_s(self) -> float:
        return self.outcome.best.step_time_s if self.outcome.best else float("inf")


def select_datacenters(
    setup: TrainSetup, geo: GeoSystem, tps: Sequence[int], pipelines: Sequence[int], flows: int, top: int
) -> tuple[SelectionRow, ...]:
    """The Atlas plan on every connected subset of datacenters (all orders along the links), fastest first."""
    names = geo.names
    sizes = range(1, len(names) + 1) if len(names) <= SELECTION_MAX_DATACENTERS else [len(names)]
    rows = []
    for k in sizes:
        for combo in itertools.combinations(names, k):
            if not geo.connected(combo):
                continue
            sub = geo.subset(combo)
            plans = pp_candidates(setup, sub, tps, pipelines, flows, "temporal", "atlas", sub.chains(combo))
            rows.append(SelectionRow(combo, sub.num_gpus, choose("atlas", plans, setup, sub, top)))
    return tuple(sorted(rows, key=lambda r: (r.step_time_s, -len(r.datacenters))))


@dataclass(frozen=True)
class FlowRow:
    flows: int
    aggregate_gbps: dict[str, float]
    """Per link: what the flows reach together."""
    step_time_s: float
    link_saturated: bool


def flow_sweep(plan: GeoPlan, geo: GeoSystem, flows: Sequence[int]) -> tuple[FlowRow, ...]:
    """The same plan with a different number of TCP flows per link direction."""
    used = [geo.link(a, b) for a, b in itertools.pairwise(plan.dc_order)]
    links = [lk for lk in used if lk is not None]
    rows = []
    for k in sorted(set(flows)):
        sim = simulate_geo(replace(plan, flows=k), geo)
        agg = {f"{lk.a}-{lk.b}": lk.aggregate_gbps(k) for lk in links}
        saturated = all(lk.aggregate_gbps(k) >= lk.bandwidth_gbps - 1e-9 for lk in links)
        rows.append(FlowRow(k, agg, sim.step_time_s, saturated))
    return tuple(rows)


@dataclass(frozen=True)
class SharingRow:
    pipelines: int
    gpus: int
    spatial_step_s: float
    temporal_step_s: float

    @property
    def gain(self) -> float:
        """How much faster temporal sharing is: spatial step / temporal step."""
        return self.spatial_step_s / self.temporal_step_s


def sharing_sweep(
    setup: TrainSetup, geo: GeoSystem, plan: GeoPlan, counts: Sequence[int] | None = None
) -> tuple[SharingRow, ...]:
    """Spatial vs temporal sharing for `counts` DP pipelines of the plan's layout (stages per datacenter, TP,
    micro-batches per pipeline and flows kept), so the WAN sees `count` pipelines' transfers."""
    if counts is None:
        counts = sorted({2**i for i in range(plan.pipelines.bit_length()) if 2**i <= plan.pipelines} | {plan.pipelines})
    per_dc = plan.stages_per_dc
    stages = [per_dc[dc] for dc in plan.dc_order]
    rows = []
    for n in counts:
        steps = {}
        gpus = 0
        for sharing in ("spatial", "temporal"):
            candidate = pp_plan(
                setup,
                geo,
                plan.dc_order,
                plan.tp,
                n,
                plan.flows,
                sharing,  # type: ignore[arg-type]
                "atlas",
                stages_per_dc=stages,
                microbatches=plan.microbatches,
            )
            if candidate is None:
                break
            steps[sharing] = simulate_geo(candidate, geo).step_time_s
            gpus = candidate.num_gpus
        if len(steps) == 2:
            rows.append(SharingRow(n, gpus, steps["spatial"], steps["temporal"]))
    return tuple(rows)
