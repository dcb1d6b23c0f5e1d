"""A placement of one training job over datacenters: which stages run where, how many DP pipelines,
and how the WAN is used (TCP flows, spatial or temporal sharing, what crosses it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from paraplan.geo.stages import StageCost
from paraplan.geo.wan import Sharing

PlacementKind = Literal["dp-across", "pp-across", "atlas"]
PLACEMENT_TITLES: dict[str, str] = {
    "dp-across": "DP across datacenters",
    "pp-across": "PP across datacenters",
    "atlas": "Atlas (PP across, DP inside, multi-flow, temporal)",
}


@dataclass(frozen=True, slots=True)
class PipelineGroup:
    """`count` identical pipelines (DP replicas) with these stages, in model order."""

    stages: tuple[StageCost, ...]
    count: int
    grad_reduce_s: tuple[float, ...]
    """Per stage: gradient reduce-scatter (or all-reduce) over the replicas inside the stage's datacenter."""
    param_gather_s: tuple[float, ...]
    """Per stage: distributed-optimizer parameter all-gather inside the datacenter (0 without)."""
    optimizer_s: tuple[float, ...]

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def dcs(self) -> tuple[str, ...]:
        return tuple(s.dc for s in self.stages)

    @property
    def crosses_wan(self) -> bool:
        return len(set(self.dcs)) > 1


@dataclass(frozen=True, slots=True)
class GeoPlan:
    placement: PlacementKind
    tp: int
    microbatches: int
    """Micro-batches per pipeline per step."""
    schedule: str
    groups: tuple[PipelineGroup, ...]
    """PP across / Atlas: one group whose pipelines span the datacenters. DP across: one group per
    datacenter, each pipeline inside it."""
    flows: int
    """Parallel TCP flows per WAN link direction."""
    sharing: Sharing
    dc_order: tuple[str, ...]
    """Datacenters in pipeline order (PP) or ring order (DP across)."""
    cross_dc_grad_bytes: tuple[float, ...] = ()
    """DP across: bytes of each stage's gradient all-reduced over the WAN ring once a step."""
    tokens_per_step: int = 0
    step_overhead_s: float = 0.0

    @property
    def pp(self) -> int:
        return self.groups[0].pp

    @property
    def pipelines(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def gpus_per_dc(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for g in self.groups:
            for s in g.stages:
                out[s.dc] = out.get(s.dc, 0) + self.tp * g.count
        return out

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus_per_dc.values())

    @property
    def stages_per_dc(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.groups[0].stages:
            out[s.dc] = out.get(s.dc, 0) + 1
        return out

    def describe(self) -> str:
        if self.placement == "dp-across":
            reps = ", ".join(f"{g.stages[0].dc}: {g.count}" for g in self.groups)
            return f"tp={self.tp} pp={self.pp} replicas({reps}) m={self.microbatches}"
        per_dc = ", ".join(f"{dc}: {n}" for dc, n in self.stages_per_dc.items())
        return f"tp={self.tp} stages({per_dc}) pipelines={self.pipelines} m={self.microbatches}"
