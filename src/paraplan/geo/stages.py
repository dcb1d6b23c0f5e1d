"""Per-stage costs on a datacenter's GPUs, from paraplan's own operator and cost model.

A geo pipeline is heterogeneous: each datacenter may have its own GPU type and network, so a stage's
forward (F), input-gradient (B) and weight-gradient (W) times are the projection's own stage costs
(`projection.stage_costs`), costed on the GPU of the datacenter that holds the stage. Layers are split
over the stages so that the slowest stage is as fast as possible. Memory per stage comes from
`project_specs` on the same layout, so the FITS verdict is the core's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from paraplan.cost.calibration import at_scale, calibration_for
from paraplan.cost.comm import GroupPlacement, collective_time_s
from paraplan.graph import layers as L
from paraplan.graph.ops import CommKind
from paraplan.graph.partition import VirtualStage
from paraplan.memory.model import GIB
from paraplan.projection import StageCosts, project_specs, stage_costs
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec

WAN_GRAD_BYTES = 2
"""Bytes per gradient element sent across the WAN by DP across datacenters: bf16 (half of Megatron's
default fp32 reduction; generous to that baseline)."""


@dataclass(frozen=True, slots=True)
class TrainSetup:
    """What is fixed for every placement: the model and the training settings (batch, recompute, precision,
    schedule, sharding, framework) as the core's `TrainingSpec`; each placement sets tp, pp and dp (`spec`).
    The short names below are read-only views of `train`."""

    model: ModelSpec
    train: TrainingSpec

    @property
    def seq(self) -> int:
        return self.train.seq_length

    @property
    def mbs(self) -> int:
        return self.train.micro_batch_size

    @property
    def gbs(self) -> int:
        return self.train.global_batch_size

    @property
    def recompute(self) -> str:
        return self.train.recompute_granularity

    @property
    def precision(self) -> str:
        return self.train.precision

    @property
    def schedule(self) -> str:
        return self.train.pipeline_schedule

    @property
    def framework(self) -> str:
        return self.train.framework

    @property
    def distributed_optimizer(self) -> bool:
        return self.train.use_distributed_optimizer

    @property
    def samples(self) -> int:
        """Micro-batches in one global batch."""
        return self.gbs // self.mbs

    @property
    def tokens_per_step(self) -> int:
        return self.gbs * self.seq

    def spec(self, tp: int, pp: int, dp: int, layout: tuple[int, ...] | None = None) -> TrainingSpec:
        """The training spec of one placement: sequence parallelism wherever tp > 1 (when the setup asks for it)."""
        return replace(
            self.train,
            tensor_model_parallel_size=tp,
            pipeline_model_parallel_size=pp,
            data_parallel_size=dp,
            sequence_parallel=self.train.sequence_parallel and tp > 1,
            pipeline_layout=layout,
        )


@lru_cache(maxsize=4096)
def _projected(
    setup: TrainSetup, system: SystemSpec, tp: int, span: VirtualStage, slowest: bool = True, dp: int = 1
) -> StageCosts:
    """The core's cost of one stage (`projection.stage_costs`) on one GPU of a datacenter, under TP `tp`, with
    `dp` replicas of it inside the datacenter."""
    return stage_costs(setup.model, system, setup.spec(tp, 1, dp), (span,), slowest=slowest)[0]


def _span(first: int, n: int, embedding: bool, head: bool) -> VirtualStage:
    return VirtualStage(0, first, n, embedding, head)


@dataclass(frozen=True, slots=True)
class StageCost:
    """One pipeline stage (one TP group of GPUs in one datacenter), per micro-batch."""

    dc: str
    first_layer: int
    num_layers: int
    forward_s: float
    backward_input_s: float
    backward_weight_s: float
    params_per_gpu: float
    boundary_bytes: float
    """Activation (or its gradient) crossing to the next stage, all TP ranks together."""
    p2p_intra_s: float
    """Sending that activation to a stage in the same datacenter."""

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_input_s + self.backward_weight_s


def stage_cost(
    setup: TrainSetup,
    system: SystemSpec,
    dc: str,
    tp: int,
    first: int,
    n: int,
    *,
    embedding: bool,
    head: bool,
    slowest: bool = True,
) -> StageCost:
    """Decoder layers [first, first + n) (with the embedding, the head) on the GPUs of datacenter `dc`. slowest:
    compute at the pace of the slowest of the datacenter's GPUs (`at_scale`), else at the typical speed."""
    costs = _projected(setup, system, tp, _span(first, n, embedding, head), slowest)
    cal = calibration_for(system.gpu.name, setup.framework)
    p2p = collective_time_s(
        CommKind.SEND_RECV,
        costs.boundary_bytes,
        GroupPlacement(2, 1, 2),
        system,
        at_scale(cal, system.num_gpus) if slowest else cal,
    )
    return StageCost(
        dc=dc,
        first_layer=first,
        num_layers=n,
        forward_s=costs.forward_s,
        backward_input_s=costs.backward_input_s,
        backward_weight_s=costs.backward_weight_s,
        params_per_gpu=costs.dense_params + costs.expert_params,
        boundary_bytes=L.activation_bytes(setup.precision) * setup.mbs * setup.seq * setup.model.hidden_size,
        p2p_intra_s=p2p,
    )


def split_layers(per_layer_s: list[float], extra_s: list[float], num_layers: int) -> tuple[int, ...] | None:
    """Decoder layers per stage minimising the slowest stage: stage i costs extra_s[i] + n_i * per_layer_s[i]
    (heterogeneous GPUs, embedding on the first stage, LM head on the last). None if there are more stages
    than layers."""
    p = len(per_layer_s)
    if p > num_layers:
        return None

    def capacity(limit: float) -> list[int]:
        return [max(1, math.floor((limit - e) / t + 1e-9)) for t, e in zip(per_layer_s, extra_s, strict=True)]

    lo = 0.0
    hi = max(e + num_layers * t for t, e in zip(per_layer_s, extra_s, strict=True))
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(capacity(mid)) >= num_layers:
            hi = mid
        else:
            lo = mid
    counts = capacity(hi)
    # trim the surplus from the stages that would be slowest, keeping at least one layer each
    while sum(counts) > num_layers:
        i = max(
            (j for j in range(p) if counts[j] > 1), key=lambda j: extra_s[j] + counts[j] * per_layer_s[j], default=None
        )
        if i is None:
            return None
        counts[i] -= 1
    return tuple(counts)


def pipeline_stages(
    setup: TrainSetup, systems: list[tuple[str, SystemSpec]], tp: int, layout: tuple[int, ...] | None = None
) -> tuple[StageCost, ...] | None:
    """Stages of one pipeline in model order, one per (datacenter, system) entry: with `layout` decoder layers
    each, or balanced so the slowest stage is as fast as possible."""
    last = len(systems) - 1
    if layout is None:
        per_layer, extra = [], []
        for i, (_, system) in enumerate(systems):
            # a decoder layer after another in the stage's launch queue; the first stage's and the last's blocks
            one = _projected(setup, system, tp, _span(0, 1, False, False))
            two = _projected(setup, system, tp, _span(0, 2, False, False))
            per_layer.append(two.busy_s - one.busy_s)
            extra.append(_projected(setup, system, tp, _span(0, 0, i == 0, i == last)).busy_s)
        layout = split_layers(per_layer, extra, setup.model.num_layers)
        if layout is None:
            return None
    # Only the steady state runs at the pace of the slowest stage (the one with the slowest chip); the fill and drain
    # pass through the other stages at the typical speed (as `projection.project_specs` has it).
    slow, first = [], 0
    for i, ((dc, system), n) in enumerate(zip(systems, layout, strict=True)):
        slow.append(stage_cost(setup, system, dc, tp, first, n, embedding=i == 0, head=i == last))
        first += n
    busiest = max(range(len(slow)), key=lambda i: slow[i].total_s)
    return tuple(
        s
        if i == busiest
        else stage_cost(
            setup, system, s.dc, tp, s.first_layer, s.num_layers, embedding=i == 0, head=i == last, slowest=False
        )
        for i, (s, (_, system)) in enumerate(zip(slow, systems, strict=True))
    )


def stage_sync(
    setup: TrainSetup, system: SystemSpec, tp: int, stages: tuple[StageCost, ...], index: int, dp: int
) -> tuple[float, float, float]:
    """(gradient reduction, parameter all-gather, optimizer step) once a step of stage `index` of a pipeline over
    `dp` replicas inside one datacenter, as the projection has them (`projection.stage_costs`)."""
    st = stages[index]
    span = _span(st.first_layer, st.num_layers, index == 0, index == len(stages) - 1)
    costs = _projected(setup, system, tp, span, dp=dp)
    return costs.dp_grad_reduce_s, costs.dp_param_gather_s, costs.optimizer_s


@dataclass(frozen=True, slots=True)
class StageMemory:
    dc: str
    stage: int
    peak_bytes: float
    usable_bytes: float

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.usable_bytes

    @property
    def free_bytes(self) -> float:
        return max(0.0, self.usable_bytes - self.peak_bytes)


def stage_memory(
    setup: TrainSetup, stages: tuple[StageCost, ...], systems: dict[str, SystemSpec], tp: int, dp: int
) -> tuple[StageMemory, ...]:
    """Peak bytes per GPU of every stage, from the core's memory model (`project_specs` on this layout)."""
    layout = tuple(s.num_layers for s in stages)
    first = systems[stages[0].dc]
    system = replace(first, num_gpus=tp * len(stages) * dp)
    proj = project_specs(setup.model, system, setup.spec(tp, len(stages), dp, layout))
    out = []
    for i, stage in enumerate(stages):
        dc_system = systems[stage.dc]
        usable = proj.memory.usable_bytes * dc_system.gpu.hbm_bytes / system.gpu.hbm_bytes
        out.append(StageMemory(stage.dc, i, proj.memory.ranks[i].total_bytes, usable))
    return tuple(out)


def memory_problem(mem: tuple[StageMemory, ...], what: str) -> str | None:
    """One line naming the worst stage that does not fit, or None."""
    worst = max(mem, key=lambda m: m.peak_bytes / m.usable_bytes)
    if worst.fits:
        return None
    return (
        f"{what}: stage {worst.stage} in datacenter '{worst.dc}' needs {worst.peak_bytes / GIB:.1f} GiB per GPU, "
        f"more than the {worst.usable_bytes / GIB:.1f} GiB usable"
    )
