"""Per-stage costs on a datacenter's GPUs, from paraplan's own operator and cost model.

A geo pipeline is heterogeneous: each datacenter may have its own GPU type and network, so a stage's
forward (F), input-gradient (B) and weight-gradient (W) times come from the core's `block_cost` over the
operators of `graph.layers`, costed on the GPU of the datacenter that holds the stage. Layers are split
over the stages so that the slowest stage is as fast as possible. Memory per stage comes from
`project_specs` on the same layout, so the FITS verdict is the core's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from paraplan.cost.block import BlockCost, block_cost, repeated_s
from paraplan.cost.calibration import Calibration, at_scale, calibration_for
from paraplan.cost.comm import GroupPlacement, collective_time_s, place_group
from paraplan.graph import layers as L
from paraplan.graph.ops import CommKind
from paraplan.memory.model import GIB
from paraplan.projection import block_context, project_specs
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


@dataclass(frozen=True, slots=True)
class LayerCosts:
    """One micro-batch through each block kind on one GPU of a datacenter, under TP `tp`."""

    dense: BlockCost
    moe: BlockCost | None
    embedding: BlockCost
    head: BlockCost
    calibration: Calibration
    layer_input_bytes: float
    """Boundary activation one GPU holds (1/tp of it under sequence parallelism)."""

    def layer(self, moe: bool) -> BlockCost:
        return self.moe if moe and self.moe is not None else self.dense


@lru_cache(maxsize=512)
def layer_costs(setup: TrainSetup, system: SystemSpec, tp: int, slowest: bool = True) -> LayerCosts:
    """slowest: compute at the pace of the slowest of the datacenter's GPUs (`at_scale`), else at the typical
    speed (the stages of a pipeline but its slowest: `pipeline_stages`)."""
    model = setup.model
    train = setup.spec(tp, 1, 1)
    cal = calibration_for(system.gpu.name, setup.framework)
    slowed = at_scale(cal, system.num_gpus)
    if not slowest and slowed is cal:  # no spread: the same costs
        return layer_costs(setup, system, tp)
    if slowest:
        cal = slowed
    shard = L.Shard.of(train)
    ctx = block_context(system, train, cal)
    layer_input = L.ACT_BYTES * shard.tokens * model.hidden_size / shard.sp_div
    vocab = L.padded_vocab(model, tp)

    def cost(ops: list, recompute: str) -> BlockCost:
        return block_cost(ops, recompute, ctx, layer_input)

    dense = cost(L.decoder_layer_ops(model, shard, moe=False), setup.recompute)
    moe = cost(L.decoder_layer_ops(model, shard, moe=True), setup.recompute) if model.is_moe else None
    return LayerCosts(
        dense=dense,
        moe=moe,
        embedding=cost(L.embedding_ops(model, shard), "none"),
        head=cost(L.head_ops(model, shard, vocab), "none"),
        calibration=cal,
        layer_input_bytes=layer_input,
    )


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


def _stage_parts(setup: TrainSetup, first: int, n: int) -> tuple[int, int]:
    """(dense layers, MoE layers) among decoder layers [first, first + n)."""
    moe = sum(setup.model.is_moe_layer(i) for i in range(first, first + n))
    return n - moe, moe


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
    costs = layer_costs(setup, system, tp, slowest)
    dense_n, moe_n = _stage_parts(setup, first, n)
    parts: list[tuple[BlockCost, int]] = [(costs.dense, dense_n)]
    if moe_n:
        parts.append((costs.layer(True), moe_n))
    if embedding:
        parts.append((costs.embedding, 1))
    if head:
        parts.append((costs.head, 1))
    runs = [repeated_s(c, k) for c, k in parts]  # the layers of a stage share one launch queue
    f = sum(run[0] for run in runs) + costs.calibration.microbatch_overhead_s
    b = sum(run[1] for run in runs)
    w = sum(run[2] for run in runs)
    params = sum((c.dense_params + c.expert_params) * k for c, k in parts)
    p2p = collective_time_s(
        CommKind.SEND_RECV, costs.layer_input_bytes, GroupPlacement(2, 1, 2), system, costs.calibration
    )
    return StageCost(
        dc=dc,
        first_layer=first,
        num_layers=n,
        forward_s=f,
        backward_input_s=b,
        backward_weight_s=w,
        params_per_gpu=params,
        boundary_bytes=L.ACT_BYTES * setup.mbs * setup.seq * setup.model.hidden_size,
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
            costs = layer_costs(setup, system, tp)
            per_layer.append(costs.dense.forward_s + costs.dense.backward_input_s + costs.dense.backward_weight_s)
            e = 0.0
            if i == 0:
                e += costs.embedding.forward_s + costs.embedding.backward_input_s + costs.embedding.backward_weight_s
            if i == last:
                e += costs.head.forward_s + costs.head.backward_input_s + costs.head.backward_weight_s
            extra.append(e)
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


def dp_sync_s(setup: TrainSetup, system: SystemSpec, tp: int, params_per_gpu: float, dp: int) -> tuple[float, float]:
    """(gradient reduction, parameter all-gather) of one stage over `dp` replicas inside one datacenter:
    reduce-scatter + all-gather with the distributed optimizer, an all-reduce without."""
    if dp <= 1:
        return 0.0, 0.0
    cal = calibration_for(system.gpu.name, setup.framework)
    group = place_group(dp, tp, system.gpus_per_node)
    grad_bytes = 4  # Megatron reduces fp32 main grads by default
    if setup.distributed_optimizer:
        rs = collective_time_s(CommKind.REDUCE_SCATTER, params_per_gpu * grad_bytes, group, system, cal)
        ag = collective_time_s(CommKind.ALL_GATHER, params_per_gpu * 2, group, system, cal)
        return rs, ag
    return collective_time_s(CommKind.ALL_REDUCE, params_per_gpu * grad_bytes, group, system, cal), 0.0


def optimizer_s(setup: TrainSetup, system: SystemSpec, params_per_gpu: float, dp: int) -> float:
    """Fused Adam over the parameters this GPU updates (memory-bound)."""
    cal = calibration_for(system.gpu.name, setup.framework)
    params = params_per_gpu / dp if setup.distributed_optimizer else params_per_gpu
    return params * cal.optimizer_bytes_per_param / (system.gpu.hbm_bytes_per_s * cal.memory_efficiency)


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
