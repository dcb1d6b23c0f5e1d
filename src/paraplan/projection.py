"""The one entry point: validated specs in, step time, breakdown, FLOPs and memory out.

Pure and deterministic: the same specs give the same result. Block costs (a layer kind under one shard) and
stage sums are cached by value (the block context: system, calibration, placed groups, overlap settings and
the fitted profile, `ProjectionOptions.profile`), so the tuner never recomputes a repeated sub-problem.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from paraplan.cost.block import (
    MATMUL_KINDS,
    BlockContext,
    BlockCost,
    BlockPhases,
    MeasuredBlock,
    OpTimer,
    PlacedGroups,
    backward_phases,
    block_cost,
    block_phases,
    repeated_s,
    runahead_s,
    with_measured_compute,
)
from paraplan.cost.calibration import Calibration, at_scale, calibration_for
from paraplan.cost.collectives import SourceKey, add_records, collective_sources, record, timed_collective
from paraplan.cost.comm import GroupPlacement, place_group
from paraplan.cost.compute import weight_quantize_s, weight_transposes_s
from paraplan.cost.fsdp_copies import NO_COPIES, float8_scale_precompute_s, float8_shard_casts_s, fsdp2_copies
from paraplan.cost.offload import optimizer_step_s
from paraplan.cost.primary_weights import quantized_weights_step_s
from paraplan.cost.quantize import LOW_PRECISIONS, WEIGHT_CAST_ONCE_PER_STEP_FRAMEWORKS
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.backward import is_weightless_gemm
from paraplan.graph.ops import CommAxis, CommKind, Op
from paraplan.graph.partition import PipelineSplit, VirtualStage, chunks_per_rank, pipeline_split, split_stages
from paraplan.memory.activations import FULL_INNER, OFFLOAD, LayerModes, layer_modes
from paraplan.memory.blocks import BlockMemory, block_memory
from paraplan.memory.model import (
    MemoryResult,
    StageFootprint,
    expert_dp,
    pipeline_memory,
    quantized_copy_bytes_per_weight,
)
from paraplan.readset import ReadSet, ReadSetMemo
from paraplan.result import Projection
from paraplan.sim.costs import DEFAULT_DP_BUCKETS_PER_CHUNK, ChunkCost, PipelineCosts
from paraplan.sim.engine import schedule_plan
from paraplan.sim.pipeline import ChunkExtras, play_pipeline
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check

_BLOCK_CACHE_SIZE = 4096


def group_placements(train: TrainingSpec, system: SystemSpec) -> PlacedGroups:
    """Megatron-core rank order: tp, cp, dp, pp (dense); etp, ep, edp, pp (experts)."""
    return _placements(train.tp, train.cp, train.dp, train.pp, train.ep, train.etp, system.gpus_per_node)


@lru_cache(maxsize=1024)
def _placements(tp: int, cp: int, dp: int, pp: int, ep: int, etp: int, gpn: int) -> PlacedGroups:
    return PlacedGroups(
        {
            CommAxis.TP: place_group(tp, 1, gpn),
            CommAxis.CP: place_group(cp, tp, gpn),
            CommAxis.DP: place_group(dp * cp, tp, gpn),
            CommAxis.PP: place_group(pp, tp * cp * dp, gpn),
            CommAxis.ETP: place_group(etp, 1, gpn),
            CommAxis.EP: place_group(ep, etp, gpn),
        }
    )


def _layer_input_bytes(model: ModelSpec, shard: L.Shard) -> float:
    """A decoder layer's input on one GPU (1/tp of it under sequence parallelism): the checkpoint full recompute
    keeps, and what a pipeline stage sends to the next."""
    return shard.act_bytes * shard.tokens * model.hidden_size / shard.sp_div


@dataclass(frozen=True, slots=True)
class BlockOps:
    """One block kind's operators under one shard: its forward and backward phases (read them only)."""

    forward: tuple[Op, ...]
    backward_input: tuple[Op, ...]
    backward_weight: tuple[Op, ...]


@lru_cache(maxsize=_BLOCK_CACHE_SIZE)
def block_ops_of(kind: str, model: ModelSpec, shard: L.Shard) -> BlockOps:
    """The operators of one block kind, built once per (kind, model, shard): the block's memory and its costs under
    every context (the slowest chip's and the typical one's, each recompute mode) share them."""
    forward = tuple(K.layer_kind(kind).ops(model, shard))
    b_ops, w_ops = backward_phases(forward)
    return BlockOps(forward, tuple(b_ops), tuple(w_ops))


@lru_cache(maxsize=_BLOCK_CACHE_SIZE)
def block_memory_of(kind: str, model: ModelSpec, shard: L.Shard, recompute: str) -> BlockMemory:
    """Parameters and saved bytes of one block kind (`memory.blocks.block_memory` of its operators)."""
    layer_kind = K.layer_kind(kind)
    ops = block_ops_of(kind, model, shard).forward
    # torchtitan's compile flag is its kernel fusion (`formats.torchtitan`): the compiled block's saved set
    memory = block_memory(ops, recompute, _layer_input_bytes(model, shard), shard.act_bytes, compiled=shard.fused)
    table_params = layer_kind.params_of(model, shard)
    if table_params is not None:  # weights without a GEMM (the embedding's lookup table, V/tp x h on this rank)
        memory = replace(memory, dense_params=table_params)
    return memory


@lru_cache(maxsize=_BLOCK_CACHE_SIZE)
def _low_precision_weight_elements(kind: str, model: ModelSpec, shard: L.Shard) -> tuple[float, float]:
    """(dense, expert) weight elements on this GPU of one block's low-precision GEMMs (a forward GEMM with a weight,
    k x n each)."""
    dense = expert = 0
    for op in block_ops_of(kind, model, shard).forward:
        if op.gemm is not None and op.precision in LOW_PRECISIONS and not is_weightless_gemm(op):
            if op.expert:
                expert += op.gemm.k * op.gemm.n * op.gemm.count
            else:
                dense += op.gemm.k * op.gemm.n * op.gemm.count
    return float(dense), float(expert)


def quantized_weight_elements(kind: str, model: ModelSpec, shard: L.Shard) -> float:
    """Weight elements on this GPU of one block's low-precision GEMMs: what the recipe's weight casts read
    (`cost.compute.weight_quantize_s`)."""
    dense, expert = _low_precision_weight_elements(kind, model, shard)
    return dense + expert


def float8_weight_elements(kind: str, model: ModelSpec, shard: L.Shard) -> float:
    """Of `quantized_weight_elements`, the dense ones (no expert's): torchao's `Float8Linear` swaps `nn.Linear`
    modules, not MoE experts' grouped weights, whose FSDP2 all-gather stays 16-bit (`memory.model.StageFootprint.
    float8_params`)."""
    return _low_precision_weight_elements(kind, model, shard)[0]


def _weight_casts_s(total: _StageSums, train: TrainingSpec, system: SystemSpec, cal: Calibration) -> float:
    """A micro-batch's share of the stage's weight casts: megatron-core casts once per step and Transformer Engine
    keeps the casts for the step's other micro-batches (`cost.quantize.WEIGHT_CAST_ONCE_PER_STEP_FRAMEWORKS`);
    other frameworks cast in every forward. Under torchao's float8 all-gather the float8 linears' weights arrive cast
    (`TrainingSpec.fsdp_float8_all_gather`; `float8_shard_casts_s`): the others' casts remain. Quantised primary
    weights gathered by the distributed optimizer (`TrainingSpec.gathers_quantized_weights`) are not cast here (the
    optimizer casts its shard, `cost.primary_weights`): the first micro-batch remakes their column-wise copies."""
    quantized = total.quantized_weights
    if train.fsdp_float8_all_gather:
        quantized -= total.float8_params
    if quantized <= 0:  # no low-precision GEMM: no cast (`weight_quantize_s` is 0.0, and so its share)
        return 0.0
    if train.gathers_quantized_weights:
        once = weight_transposes_s(train.precision, quantized, system.gpu, cal)
    else:
        once = weight_quantize_s(train.precision, quantized, system.gpu, cal)
    if train.framework in WEIGHT_CAST_ONCE_PER_STEP_FRAMEWORKS:
        return once / train.num_microbatches
    return once


def _float8_weight_transposes_s(
    float8_params: float, train: TrainingSpec, system: SystemSpec, cal: Calibration
) -> float:
    """A micro-batch's copies of the gathered float8 weights into the layout of the input-gradient GEMM under
    torchao's float8 all-gather (`float8_params` of them, 0 without it): `preprocess_addmm` (torchao float8/
    float8_ops.py) makes the row-major weight column-major (`b_data.t().contiguous().t()`, one byte read and one
    written) where float8 GEMMs are TN only (`cost.quantize.needs_columnwise_copy`: Hopper); the forward GEMM takes
    the transposed weight as it is. Without float8 all-gather that copy is among `_weight_casts_s`' casts."""
    return weight_transposes_s(train.precision, float8_params, system.gpu, cal)


def _one_byte_gathered(total: _StageSums, train: TrainingSpec) -> tuple[float, float]:
    """The stage's (dense, expert) weights the data-parallel all-gather sends in one byte: torchao's float8 linears'
    under its float8 all-gather (dense only), every quantised primary weight under the distributed optimizer's
    `gathers_quantized_weights`; (0, 0) otherwise."""
    if train.gathers_quantized_weights:
        return total.float8_params, total.quantized_expert_params
    return (total.float8_params if train.fsdp_float8_all_gather else 0.0), 0.0


def _rank_one_byte_gathered(stages: Sequence[_StageSums], train: TrainingSpec) -> tuple[float, float]:
    """`_one_byte_gathered` of a rank's stages added up, under `gathers_quantized_weights` only ((0, 0) otherwise:
    torchao's float8 weights have their own sums, `rank_float8_params`)."""
    if not train.gathers_quantized_weights:
        return 0.0, 0.0
    return sum([s.float8_params for s in stages]), sum([s.quantized_expert_params for s in stages])


def _fsdp2_copies_s(
    params: float, train: TrainingSpec, system: SystemSpec, cal: Calibration, units: int, float8_params: float = 0.0
) -> tuple[float, float]:
    """(forward, backward) of one micro-batch: torch FSDP2's compute-stream copies (`cost.fsdp_copies`). Fully
    sharded, each micro-batch gathers before its forward and again before its backward, and reduce-scatters after
    it; with sharded gradients only (ZeRO-2) the parameters are gathered once a step and the gradients reduced
    every micro-batch (`_dp_times`)."""
    copies = fsdp2_copies(params, train, system.gpu, cal, units, float8_params)
    if copies is NO_COPIES:
        return 0.0, 0.0
    if train.shards_params:
        return copies.copy_out_s, copies.copy_out_s + copies.copy_in_s
    return copies.copy_out_s / train.num_microbatches, copies.copy_in_s


@lru_cache(maxsize=_BLOCK_CACHE_SIZE)
def _cached_block(kind: str, model: ModelSpec, shard: L.Shard, recompute: str, ctx: BlockContext) -> BlockCost:
    memory = block_memory_of(kind, model, shard, recompute)
    layer_kind = K.layer_kind(kind)
    ops = block_ops_of(kind, model, shard)
    ctx = ctx.for_block(layer_kind.is_decoder_layer)
    backward = (ops.backward_input, ops.backward_weight)
    phases = _block_phases(kind, model, shard, ctx)
    return block_cost(ops.forward, recompute, ctx, _layer_input_bytes(model, shard), memory, backward, phases)


@lru_cache(maxsize=_BLOCK_CACHE_SIZE)
def _block_phases(kind: str, model: ModelSpec, shard: L.Shard, ctx: BlockContext) -> BlockPhases:
    """A block's three phases timed once for all its recompute modes (`cost.block.block_phases`)."""
    ops = block_ops_of(kind, model, shard)
    return block_phases(ops.forward, ctx, (ops.backward_input, ops.backward_weight))


BLOCK_AXES = (CommAxis.TP, CommAxis.CP, CommAxis.EP, CommAxis.ETP)
"""The groups a block's operators communicate over (DP and PP act between blocks): the block contexts, and
so the cached block costs, do not depend on the others."""


def block_context(
    system: SystemSpec,
    train: TrainingSpec,
    cal: Calibration,
    profile: OpTimer | None = None,
    groups: Mapping[CommAxis, GroupPlacement] | None = None,
) -> BlockContext:
    """What a block's cost depends on besides its operators: the system, the calibration, the groups its
    collectives run over, the training spec's overlap settings and the fitted profile (`groups`: placed already).
    A value: block costs are cached by it."""
    groups = groups if groups is not None else group_placements(train, system)
    return BlockContext(
        system,
        cal,
        _block_groups(groups if isinstance(groups, PlacedGroups) else PlacedGroups(groups)),
        train.tp_comm_overlap,
        profile,
        train.tp_async_backward,
        train.cuda_graph_scope,
        True,
        train.moe_host_sync,
    )


@lru_cache(maxsize=1024)
def _block_groups(groups: PlacedGroups) -> PlacedGroups:
    return PlacedGroups({axis: groups[axis] for axis in BLOCK_AXES})


@dataclass(frozen=True, slots=True)
class ProjectionOptions:
    calibration: Calibration | None = None
    profile: OpTimer | None = None
    """The fitted profile that times the compute ops it covers (`cost.profiled.ProfileRef`, from `profile_for`: a
    frozen reference, hashed by its content's digest); None = the analytic model only."""
    record_events: bool = False
    breakdown: bool = True
    """False: step time, throughput and memory only, without the named parts of the step and the
    communication figures (what the tuner ranks by; the same numbers, less work)."""
    measured_blocks: Mapping[str, MeasuredBlock] | None = None
    """Hybrid projection: measured compute per layer kind (a registered `graph.kinds.LayerKind`'s name: "dense",
    "moe", "embedding", "head", "mtp"), at the target's shard shapes; communication, the schedule and everything
    else stay modelled."""


def _add(into: dict[str, float], other: dict[str, float], times: float = 1.0) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0.0) + v * times


Parts = tuple[tuple[str, str, int, bool], ...]
"""(block kind, recompute mode, count, bf16) of one model stage; `bf16`: decoder layers of a low-precision run whose
linears run in BF16 (`TrainingSpec.first_last_layers_bf16`)."""


def is_bf16_layer(layer: int, num_layers: int, bf16_edge_layers: tuple[int, int]) -> bool:
    """Whether decoder layer `layer` (0-based, over the whole model) runs its linears in BF16: one of the first
    or last layers `TrainingSpec.bf16_edge_layers` names (megatron-core fp8_utils `is_first_last_bf16_layer`,
    on the global layer number, so the pipeline rank does not enter)."""
    start, end = bf16_edge_layers
    return layer < start or layer >= num_layers - end


def part_shard(shard: L.Shard, bf16: bool) -> L.Shard:
    """The shard a stage part's operators are built under: its GEMMs in BF16 for a BF16 layer of a low-precision
    run (which also keep their inputs in 16 bits, `graph.layers.Shard.saved_input_bytes`)."""
    return replace(shard, precision="bf16") if bf16 and shard.precision != "bf16" else shard


@lru_cache(maxsize=4096)
def _stage_parts(
    model: ModelSpec,
    first_layer: int,
    num_layers: int,
    has_embedding: bool,
    has_head: bool,
    mode: str,
    recompute_layers: int | None,
    per_layer: LayerModes | None = None,
    bf16_edge_layers: tuple[int, int] = (0, 0),
) -> Parts:
    """The blocks of one model stage: decoder layers first in order of appearance, then the stage's edge blocks
    in registration order (`graph.kinds`). `per_layer`: the production knobs' layer modes (`layer_modes`);
    `bf16_edge_layers`: `TrainingSpec.bf16_edge_layers`."""
    layer_counts: dict[tuple[str, str, bool], int] = {}
    kind_names = K.decoder_kind_names(model)
    for i in range(num_layers):
        recompute = "none" if mode == "full" and recompute_layers is not None and i >= recompute_layers else mode
        if per_layer is not None:
            recompute = per_layer.mode_of(recompute, first_layer + i, i)
        bf16 = is_bf16_layer(first_layer + i, model.num_layers, bf16_edge_layers)
        key = (kind_names[first_layer + i], recompute, bf16)
        layer_counts[key] = layer_counts.get(key, 0) + 1
    parts = [(kind, m, n, bf16) for (kind, m, bf16), n in layer_counts.items()]
    edges = (K.edge_kinds(K.Placement.FIRST) if has_embedding else ()) + (
        K.edge_kinds(K.Placement.LAST) if has_head else ()
    )
    for edge in edges:  # the embedding, the head and the MTP modules, after the layers
        count = edge.count(model) if edge.count is not None else 0
        if count:
            parts.append((edge.name, "none", count, False))
    return tuple(parts)


@lru_cache(maxsize=4096)
def _layout_parts(
    model: ModelSpec,
    split: PipelineSplit,
    mode: str,
    recompute_layers: int | None,
    per_layer: LayerModes | None = None,
    bf16_edge_layers: tuple[int, int] = (0, 0),
) -> tuple[tuple[Parts, ...], tuple[tuple[Parts, int], ...]]:
    """The blocks of every model stage, in model order; and each distinct stage with how many stages it is."""
    kind_names = K.decoder_kind_names(model)
    same: dict[tuple, Parts] = {}  # stages alike but for where they start (without per-layer modes, all they hang on)
    stage_parts = []
    for s in split_stages(model, split):
        layers = range(s.first_layer, s.first_layer + s.num_layers)
        bf16 = (  # none without BF16 edge layers (the kinds' slice holds the stage's length)
            tuple(is_bf16_layer(i, model.num_layers, bf16_edge_layers) for i in layers) if any(bf16_edge_layers) else ()
        )
        key = (kind_names[s.first_layer : s.first_layer + s.num_layers], bf16, s.has_embedding, s.has_head)
        parts = same.get(key) if per_layer is None else None
        if parts is None:
            parts = _stage_parts(
                model, s.first_layer, s.num_layers, s.has_embedding, s.has_head, mode, recompute_layers, per_layer,
                bf16_edge_layers,
            )  # fmt: skip
            same[key] = parts
        stage_parts.append(parts)
    return tuple(stage_parts), tuple(Counter(stage_parts).items())


@lru_cache(maxsize=4 * _BLOCK_CACHE_SIZE)
def stage_footprint(parts: Parts, model: ModelSpec, shard: L.Shard) -> StageFootprint:
    """Parameters and saved bytes of one model stage: its blocks' (`block_memory_of`) added up."""
    dense = expert = saved = max_layer = max_full_saved = loss_logits = edge = max_transient = quantized = 0.0
    float8 = max_layer_float8 = 0.0  # low-precision dense weights (`float8_weight_elements`)
    low_precision = shard.precision in LOW_PRECISIONS
    run_heads = run_inner = 0  # Megatron's uniform method: the layers that keep a run's input, and the others
    present = {kind for kind, _, _, _ in parts} if model.tied_embeddings else set()  # read with tied embeddings only
    for kind, mode, count, bf16 in parts:
        layer_kind = K.layer_kind(kind)
        memory = block_memory_of(kind, model, part_shard(shard, bf16), mode)
        if not (model.tied_embeddings and layer_kind.tied_to in present):  # one shared table when both share a rank
            dense += memory.dense_params * count
            if not layer_kind.is_decoder_layer:
                edge += memory.dense_params * count
        expert += memory.expert_params * count
        saved += memory.saved_bytes * count
        block_float8 = 0.0
        if low_precision:  # TE's linears (`quantized_weight_elements`), torchao's (`float8_weight_elements`)
            block_float8, block_expert = _low_precision_weight_elements(kind, model, part_shard(shard, bf16))
            quantized += (block_float8 + block_expert) * count
        float8 += block_float8 * count
        if layer_kind.is_decoder_layer:
            if memory.dense_params + memory.expert_params > max_layer:
                max_layer_float8 = block_float8
            max_layer = max(max_layer, memory.dense_params + memory.expert_params)
            max_transient = max(max_transient, memory.backward_transient_bytes)
            if mode in ("full", FULL_INNER, OFFLOAD):  # recomputed, or reloaded from host memory, one at a time
                max_full_saved = max(max_full_saved, memory.full_saved_bytes)
                run_heads += count if mode == "full" else 0
                run_inner += count if mode == FULL_INNER else 0
            elif mode == "op":  # per-op SAC: what its recompute holds during the layer's backward
                max_full_saved = max(max_full_saved, memory.op_recompute_bytes)
        loss_logits = max(loss_logits, memory.loss_logits)  # the vocab-parallel logits (`memory.loss`)
    if run_inner:  # a uniform run is recomputed whole before its backward: all its layers' activations at once
        max_full_saved *= -(-(run_heads + run_inner) // max(1, run_heads))
    return StageFootprint(
        dense, expert, saved, max_layer, max_full_saved, loss_logits, edge, max_transient, float8, max_layer_float8,
        quantized,
    )  # fmt: skip


def stage_footprints(
    stage_parts: Sequence[Parts], model: ModelSpec, shard: L.Shard, known: dict[Parts, StageFootprint] | None = None
) -> list[StageFootprint]:
    """`stage_footprint` of each stage, looked up once per distinct stage (the cache key hashes the whole
    ModelSpec, a few microseconds; a pipeline of 16 x 8 chunks has a handful of distinct stages). `known`: the
    footprints already looked up for this model and shard, by stage (filled in here)."""
    by_parts: dict[Parts, StageFootprint] = {} if known is None else known
    for parts in stage_parts:
        if parts not in by_parts:
            by_parts[parts] = stage_footprint(parts, model, shard)
    return [by_parts[parts] for parts in stage_parts]


@dataclass(slots=True)
class _StageSums:
    """One micro-batch through one model stage: its blocks' costs added up."""

    num_layers: int = 0
    f: float = 0.0
    b: float = 0.0
    w: float = 0.0
    recompute: float = 0.0
    saved: float = 0.0
    comm_total: dict[str, float] = field(default_factory=dict)
    comm_exposed: dict[str, float] = field(default_factory=dict)
    dense_params: float = 0.0
    expert_params: float = 0.0
    flops: float = 0.0
    recompute_flops: float = 0.0
    profiled: float = 0.0
    host: float = 0.0
    measured: float = 0.0
    forward_exposed: float = 0.0
    refetch_params: float = 0.0
    interference: float = 0.0
    comm_sources: dict[SourceKey, float] = field(default_factory=dict)
    quantized_weights: float = 0.0
    """Weight elements of the stage's low-precision GEMMs, cast for them apart from the ops (`_weight_casts_s`)."""
    float8_params: float = 0.0
    """Of `dense_params`, the float8 linears' weights (`StageFootprint.float8_params`)."""
    quantized_expert_params: float = 0.0
    """Of `expert_params`, the weights of low-precision GEMMs (`StageFootprint.quantized_weights` less
    `float8_params`): with `float8_params`, the quantised primary weights `TrainingSpec.gathers_quantized_weights`
    gathers in one byte."""


@lru_cache(maxsize=4 * _BLOCK_CACHE_SIZE)  # a tuner run meets a few thousand stages; each entry is small
def _cached_stage_sums(parts: Parts, model: ModelSpec, shard: L.Shard, ctx: BlockContext) -> _StageSums:
    return _stage_sums(parts, model, shard, ctx, None)


def _stage_sums(
    parts: Parts, model: ModelSpec, shard: L.Shard, ctx: BlockContext, measured: Mapping[str, MeasuredBlock] | None
) -> _StageSums:
    """The sums of one stage's blocks (shared by the projections that ask for the same: read them only)."""
    footprint = stage_footprint(parts, model, shard)
    total = _StageSums(
        saved=footprint.saved_bytes,
        dense_params=footprint.dense_params,
        expert_params=footprint.expert_params,
        float8_params=footprint.float8_params,
        quantized_expert_params=footprint.quantized_weights - footprint.float8_params,
    )
    for kind, mode, count, bf16 in parts:
        if measured and kind in measured:
            part = _part_sums(kind, mode, count, bf16, model, shard, ctx, measured[kind])
        else:
            part = _cached_part_sums(kind, mode, count, bf16, model, shard, ctx)
        total.quantized_weights += part.quantized_weights
        total.measured += part.measured
        total.f += part.f
        total.b += part.b
        total.w += part.w
        total.recompute += part.recompute
        for into, added in (
            (total.comm_total, part.comm_total), (total.comm_exposed, part.comm_exposed),
            (total.comm_sources, part.comm_sources),
        ):  # fmt: skip
            for key, value in added:
                into[key] = into.get(key, 0.0) + value
        total.refetch_params += part.refetch_params
        total.flops += part.flops
        total.recompute_flops += part.recompute_flops
        total.profiled += part.profiled
        total.host += part.host
        total.forward_exposed += part.forward_exposed
        total.interference += part.interference
        total.num_layers += part.num_layers
    return total


@dataclass(frozen=True, slots=True)
class _PartSums:
    """What `count` blocks of one stage part add to the stage's `_StageSums`, each addend as `_stage_sums` adds it (the
    dictionaries' as (key, value) in order: the stage adds them up in the same order, to the same floats)."""

    f: float
    b: float
    w: float
    recompute: float
    comm_total: tuple[tuple[str, float], ...]
    comm_exposed: tuple[tuple[str, float], ...]
    comm_sources: tuple[tuple[SourceKey, float], ...]
    refetch_params: float
    flops: float
    recompute_flops: float
    profiled: float
    host: float
    forward_exposed: float
    interference: float
    quantized_weights: float
    measured: float
    num_layers: int


@lru_cache(maxsize=4 * _BLOCK_CACHE_SIZE)
def _cached_part_sums(
    kind: str, mode: str, count: int, bf16: bool, model: ModelSpec, shard: L.Shard, ctx: BlockContext
) -> _PartSums:
    return _part_sums(kind, mode, count, bf16, model, shard, ctx, None)


def _part_sums(
    kind: str,
    mode: str,
    count: int,
    bf16: bool,
    model: ModelSpec,
    shard: L.Shard,
    ctx: BlockContext,
    measured: MeasuredBlock | None,
) -> _PartSums:
    """`count` blocks of one kind and recompute mode in a stage (`measured`: the kind's measured compute)."""
    cost = _cached_block(kind, model, part_shard(shard, bf16), mode, ctx)
    quantized = measured_s = 0.0
    if measured is None:
        quantized = quantized_weight_elements(kind, model, part_shard(shard, bf16)) * count
    else:
        cost = with_measured_compute(cost, measured)
        measured_s = (cost.forward_s + cost.backward_input_s + cost.backward_weight_s) * count
    f, b, w, redo = repeated_s(cost, count)  # the layers of a stage share one launch queue
    return _PartSums(
        f=f,
        b=b,
        w=w,
        # the recompute's own work: its exposed communication (the recomputed forward's all-to-all, its TP
        # collectives) is in comm_exposed with the rest of the layer's, and counting it here too made the
        # breakdown take it twice (MoE under full recompute: zero forward and backward compute, issue 34)
        recompute=redo - (cost.recompute_s - cost.recompute_compute_s) * count,
        comm_total=tuple((k, v * count) for k, v in cost.comm_total_s.items()),
        comm_exposed=tuple((k, v * count) for k, v in cost.comm_exposed_s.items()),
        comm_sources=tuple((k, v * count) for k, v in cost.comm_sources.items()),
        refetch_params=cost.refetch_params * count,
        flops=cost.forward_flops * count,
        recompute_flops=cost.recompute_flops * count,
        profiled=cost.profiled_s * count,
        host=cost.host_bound_s * count - runahead_s(cost, count),
        forward_exposed=cost.forward_comm_exposed_s * count,
        interference=sum(cost.interference_s) * count,
        quantized_weights=quantized,
        measured=measured_s,
        num_layers=count if K.layer_kind(kind).is_decoder_layer else 0,
    )


def _stage_sums_of(
    parts: Parts, model: ModelSpec, shard: L.Shard, ctx: BlockContext, measured: Mapping[str, MeasuredBlock] | None
) -> _StageSums:
    if measured:
        return _stage_sums(parts, model, shard, ctx, measured)
    return _cached_stage_sums(parts, model, shard, ctx)


def _busy_s(chunk: ChunkCost) -> float:
    return chunk.forward_s + chunk.backward_input_s + chunk.backward_weight_s


def _microbatch_overhead_s(train: TrainingSpec, cal: Calibration) -> float:
    """The framework's Python per micro-batch; a full-iteration CUDA graph replays the whole micro-batch loop
    (megatron-core `--cuda-graph-scope full_iteration`: one graph per step, the optimizer aside)."""
    return 0.0 if train.cuda_graph_scope == "full_iteration" else cal.microbatch_overhead_s


def _chunk_cost(
    total: _StageSums,
    train: TrainingSpec,
    system: SystemSpec,
    cal: Calibration,
    groups: Mapping[CommAxis, GroupPlacement],
    chunks: int,
    like: tuple[ChunkCost, ChunkExtras] | None = None,
    timer: OpTimer | None = None,
) -> tuple[ChunkCost, ChunkExtras, float, float]:
    """(what the simulator needs, what the breakdown reports, dense and expert parameters) of one stage. `like`: the
    same stage's chunk under another calibration, whose data-parallel collectives (not clock-bound) it reuses.
    `timer`: the fitted profile, for the collectives it measured (`cost.collectives`)."""
    units = max(1, total.num_layers) * (FSDP_TENSORS_PER_LAYER.get(train.framework, 1) if train.shards_params else 1)
    # where the collectives' times came from, with a profile only (without one all are modelled): per micro-batch,
    # the data-parallel ones per step (each label alike)
    sources = dict(total.comm_sources) if timer is not None else None
    float8 = total.float8_params if train.fsdp_float8_all_gather else 0.0  # gathered in one byte (0 without)
    if like is None:
        one_byte = _one_byte_gathered(total, train)
        # `_dp_times` once per distinct read-set; `sources` gets the same additions in the same order (the same floats)
        times, added = _dp_times_memo(
            total.dense_params, total.expert_params, train, system, cal, groups, units, timer, *one_byte, sources
        )
        dp_grad, dp_gather, fsdp_gather, fsdp_rs = times
        if float8:  # torchao casts the float8 weights' shards before each all-gather, on FSDP2's copy-in stream
            fsdp_gather += float8_shard_casts_s(float8, train, system.gpu, cal)
        for source_key, seconds in added:  # nothing without `sources`
            sources[source_key] = sources.get(source_key, 0.0) + seconds  # type: ignore[index]
    else:
        like_chunk, like_extra = like
        dp_grad, dp_gather = like_chunk.dp_grad_reduce_s, like_chunk.dp_param_gather_s
        fsdp_gather, fsdp_rs = like_chunk.fsdp_gather_s, like_chunk.fsdp_reduce_scatter_s
        if sources is not None:
            sources.update({k: s for k, s in like_extra.comm_sources.items() if k[0] in DATA_PARALLEL_LABELS})
    params = total.dense_params + total.expert_params
    # ZeRO-3 under recompute: the backward gathers again the share of the weights the recomputed forward released
    refetch = fsdp_gather * total.refetch_params / params if train.refetches_recomputed_params and params else 0.0
    # prefetched FSDP collectives slow the compute they run beside (`Calibration.overlap_interference`)
    slow_f = slow_b = 0.0
    if not train.gathers_on_demand:
        slow_f = cal.overlap_interference * min(fsdp_gather, total.f)
        slow_b = cal.overlap_interference * min(fsdp_gather + refetch + fsdp_rs, total.b + total.w)
    copy_f, copy_b = _fsdp2_copies_s(params, train, system, cal, units, float8)
    chunk = ChunkCost(
        forward_s=total.f
        + slow_f
        + copy_f
        + _microbatch_overhead_s(train, cal) / chunks
        + _weight_casts_s(total, train, system, cal),
        backward_input_s=total.b + slow_b + copy_b + _float8_weight_transposes_s(float8, train, system, cal),
        backward_weight_s=total.w,
        comm_total_s=total.comm_total,
        comm_exposed_s=total.comm_exposed,
        activation_bytes=total.saved,
        dp_grad_reduce_s=dp_grad,
        dp_param_gather_s=dp_gather,
        fsdp_gather_s=fsdp_gather,
        fsdp_reduce_scatter_s=fsdp_rs,
        fsdp_refetch_s=refetch,
        recompute_s=total.recompute,
        fsdp_units=units,
        fsdp_on_demand=train.gathers_on_demand,
    )
    extra = ChunkExtras(
        host_bound_s=total.host,
        profiled_s=total.profiled,
        measured_s=total.measured,
        forward_comm_exposed_s=total.forward_exposed,
        interference_s=total.interference + slow_f + slow_b,
        comm_sources=sources or {},
    )
    return chunk, extra, total.dense_params, total.expert_params


@dataclass(frozen=True, slots=True)
class StageCosts:
    """One micro-batch through one model stage on one GPU, as `project_specs` costs it before the schedule plays
    it (the chunk the simulator gets, and the parameters the memory model and the data-parallel sync count)."""

    first_layer: int
    num_layers: int
    forward_s: float
    backward_input_s: float
    backward_weight_s: float
    dense_params: float
    expert_params: float
    activation_bytes: float
    """Saved for backward per micro-batch in flight."""
    boundary_bytes: float
    """The activation this stage sends to the next (or its gradient back): what one GPU holds of it."""
    dp_grad_reduce_s: float
    """Once a step: the gradients' reduction over the spec's data-parallel replicas (reduce-scatter with a
    sharded optimizer, else all-reduce)."""
    dp_param_gather_s: float
    """Once a step: the sharded optimizer's parameter all-gather (0 without)."""
    optimizer_s: float
    """Once a step: the optimizer step over the parameters this GPU updates."""

    @property
    def busy_s(self) -> float:
        return self.forward_s + self.backward_input_s + self.backward_weight_s


def stage_costs(
    model: ModelSpec,
    system: SystemSpec,
    train: TrainingSpec,
    stages: tuple[VirtualStage, ...] | None = None,
    options: ProjectionOptions | None = None,
    *,
    slowest: bool = True,
) -> tuple[StageCosts, ...]:
    """Per model stage, one micro-batch's forward, backward-input and backward-weight seconds (`stages`: spans of
    decoder layers with or without the embedding and the head; default the spec's pipeline split). `slowest`:
    compute at the pace of the slowest of `system.num_gpus` chips (`at_scale`), else at their typical speed.
    `train` must be valid (`specs.validate.check`); its data parallelism sizes the once-a-step figures."""
    options = options or ProjectionOptions()
    base_cal = options.calibration or calibration_for(system.gpu.name, train.framework)
    cal = at_scale(base_cal, system.num_gpus) if slowest else base_cal
    shard = L.Shard.of(train)
    groups = group_placements(train, system)
    ctx = block_context(system, train, cal, options.profile, groups)
    chunks = chunks_per_rank(train)
    boundary_bytes = shard.act_bytes * shard.tokens * model.hidden_size / shard.sp_div
    mode, recompute_layers, per_layer = layer_modes(train)
    out = []
    for stage in stages if stages is not None else split_stages(model, pipeline_split(train)):
        parts = _stage_parts(
            model,
            stage.first_layer,
            stage.num_layers,
            stage.has_embedding,
            stage.has_head,
            mode,
            recompute_layers,
            per_layer,
            train.bf16_edge_layers,
        )
        total = _stage_sums_of(parts, model, shard, ctx, options.measured_blocks)
        chunk, _, dense, expert = _chunk_cost(total, train, system, cal, groups, chunks, timer=options.profile)
        optimizer_s = _optimizer_time(
            dense, expert, train, expert_dp(train), system, cal, total.float8_params,
            _one_byte_gathered(total, train), groups,
        )  # fmt: skip
        out.append(
            StageCosts(
                first_layer=stage.first_layer,
                num_layers=stage.num_layers,
                forward_s=chunk.forward_s,
                backward_input_s=chunk.backward_input_s,
                backward_weight_s=chunk.backward_weight_s,
                dense_params=dense,
                expert_params=expert,
                activation_bytes=chunk.activation_bytes,
                boundary_bytes=boundary_bytes,
                dp_grad_reduce_s=chunk.dp_grad_reduce_s,
                dp_param_gather_s=chunk.dp_param_gather_s,
                optimizer_s=optimizer_s,
            )
        )
    return tuple(out)


def project_specs(
    model: ModelSpec,
    system: SystemSpec,
    train: TrainingSpec,
    options: ProjectionOptions | None = None,
    memory: MemoryResult | None = None,
) -> Projection:
    """Project one step. `memory`: this spec's memory per rank already computed by the same model (the tuner's
    pre-filter, `tune.memfilter.GroupMemory.memory`, equal to the byte: tests/tune/test_memfilter.py); None
    computes it here."""
    options = options or ProjectionOptions()
    train = check(model, system, train)
    base_cal = options.calibration or calibration_for(system.gpu.name, train.framework)
    cal = at_scale(base_cal, system.num_gpus)
    # A pipeline's fill and drain pass through each of its stages once, so they run at the chips' typical speed; only
    # the steady state runs at the pace of the slowest stage, the one with the job's slowest chip (with stage times
    # T_s: step = sum of T_s + (m - 1) x max T_s). That stage is costed with `cal`, the others with `base_cal`.
    typical_cal = base_cal if train.pp > 1 else cal
    shard = L.Shard.of(train)
    groups = group_placements(train, system)
    ctx = block_context(system, train, cal, options.profile, groups)
    chunks = chunks_per_rank(train)
    holder = train.schedule.chunk_model_stage(train.pp, train.vpp)
    layer_input_bytes = _layer_input_bytes(model, shard)

    sums: dict[Parts, _StageSums] = {}  # stages with the same layers cost the same
    stage_parts, distinct = _layout_parts(model, pipeline_split(train), *layer_modes(train), train.bf16_edge_layers)
    flops_model = flops_hw = 0.0
    for parts, times in distinct:
        total = sums[parts] = _stage_sums_of(parts, model, shard, ctx, options.measured_blocks)
        flops_model += 3 * total.flops * times
        flops_hw += (3 * total.flops + total.recompute_flops) * times
    chunk_costs = {
        parts: _chunk_cost(total, train, system, cal, groups, chunks, timer=options.profile)
        for parts, total in sums.items()
    }
    typical_costs = chunk_costs
    if typical_cal is not cal:  # more than one stage, and a spread: the other stages at the typical speed
        typical_ctx = ctx.with_cal(typical_cal)
        typical_costs = {
            parts: _chunk_cost(
                _stage_sums_of(parts, model, shard, typical_ctx, options.measured_blocks),
                train, system, typical_cal, groups, chunks, chunk_costs[parts][:2], options.profile,
            )
            for parts in sums
        }  # fmt: skip
    stage_costs = [chunk_costs[parts] for parts in stage_parts]
    typical_stage_costs = [typical_costs[parts] for parts in stage_parts]
    # rank r, local chunk c holds model stage holder[r][c] (DualPipe's second chunk is a copy)
    # (the sums below over lists: the same additions as over generators, in the same order, cheaper)
    busy = [_busy_s(cost[0]) for cost in stage_costs]
    slowest = max(range(len(holder)), key=lambda r: sum([busy[index] for index in holder[r]]))
    ranks_costs = [stage_costs if r == slowest else typical_stage_costs for r in range(len(holder))]
    grid = tuple(tuple([ranks_costs[r][index][0] for index in row]) for r, row in enumerate(holder))
    extras = tuple(tuple([ranks_costs[r][index][1] for index in row]) for r, row in enumerate(holder))
    rank_dense_params = [sum([stage_costs[i][2] for i in row]) for row in holder]
    rank_expert_params = [sum([stage_costs[i][3] for i in row]) for row in holder]
    p2p_sources: dict[SourceKey, float] = {}
    p2p_s = (
        _p2p_time(layer_input_bytes, train, shard, system, cal, groups, options.profile, p2p_sources)
        if train.pp > 1
        else 0.0
    )
    edp = expert_dp(train)
    rank_float8_params = [  # the float8 weights whose scales are precomputed after the step (0 each without)
        sum([sums[stage_parts[i]].float8_params for i in row]) if train.fsdp_float8_all_gather else 0.0
        for row in holder
    ]
    rank_quantized = [  # the quantised primary weights the distributed optimizer casts after its step (0, 0 without)
        _rank_one_byte_gathered([sums[stage_parts[i]] for i in row], train) for row in holder
    ]
    optimizer_by_params: dict[tuple[float, float, float, tuple[float, float]], float] = {}  # the same: timed once
    optimizer_s = []
    for params in zip(rank_dense_params, rank_expert_params, rank_float8_params, rank_quantized, strict=True):
        seconds = optimizer_by_params.get(params)
        if seconds is None:
            dense, expert, float8, quantized = params
            seconds = optimizer_by_params[params] = _optimizer_time(
                dense, expert, train, edp, system, cal, float8, quantized, groups
            )
        optimizer_s.append(seconds)
    pipeline = play_pipeline(
        PipelineCosts(
            schedule=train.pipeline_schedule,
            num_microbatches=train.num_microbatches,
            chunks=grid,
            p2p_s=p2p_s,
            optimizer_s=tuple(optimizer_s),
            overlap_grad_reduce=train.overlap_grad_reduce,
            overlap_param_gather=train.overlap_param_gather,
            ep_overlap=train.moe_ep_overlap or None,
            pair_interference=cal.overlap_interference,
            dp_buckets_per_chunk=_buckets_per_chunk(train, stage_costs),
        ),
        extras,
        cal.step_overhead_s,
        record_events=options.record_events,
        breakdown=options.breakdown,
    )
    collectives = None
    if options.profile is not None and options.breakdown:  # which collectives the profile measured
        records = dict(p2p_sources)
        for extra in extras[pipeline.critical_rank]:
            add_records(records, extra.comm_sources)
        collectives = collective_sources(records, pipeline.comm_total_s)
    if memory is None:
        footprints = stage_footprints(stage_parts, model, shard)
        plan = schedule_plan(train.pipeline_schedule, train.pp, chunks, train.num_microbatches, train.overlaps_ep)
        memory = pipeline_memory(
            model, shard, train, system.gpu.hbm_bytes, footprints, holder, pipeline.peak_activation_bytes,
            lambda: plan.memory_moments, quantized_copy_bytes=quantized_copy_bytes_per_weight(train, system.gpu),
        )  # fmt: skip
    tokens = train.gbs * train.seq
    step_flops_model = model_flops_per_sequence(model, train.seq, train.attention_backend) * train.gbs
    step_flops_hw = step_flops_model + (flops_hw - flops_model) * train.gbs / train.mbs * train.tp * train.cp
    return Projection.build(
        model=model,
        system=system,
        train=train,
        calibration=cal,
        pipeline=pipeline,
        memory=memory,
        tokens_per_step=tokens,
        model_flops_per_step=step_flops_model,
        hardware_flops_per_step=step_flops_hw,
        collectives=collectives,
    )


def _buckets_per_chunk(train: TrainingSpec, stage_costs: Sequence[tuple[ChunkCost, ChunkExtras, float, float]]) -> int:
    """The simulator's gradient buckets per chunk: the fixed default without a bucket size (the spec's or the
    framework's, `TrainingSpec.effective_ddp_bucket_size`), else the most any chunk
    has (its dense and expert gradients live in separate buffers, each bucketed: megatron-core
    distributed_data_parallel.py builds one param-and-grad buffer per kind)."""
    size = train.effective_ddp_bucket_size
    if size is None:
        return DEFAULT_DP_BUCKETS_PER_CHUNK
    distinct = {id(cost): cost for cost in stage_costs}.values()  # alike stages share their cost tuple
    counts = [dp_bucket_count(dense, size) + dp_bucket_count(expert, size) for _, _, dense, expert in distinct]
    return max(1, *counts)


@lru_cache(maxsize=256)
def model_flops_per_sequence(model: ModelSpec, seq: int, attention_backend: str = "flash") -> float:
    """Model FLOPs (forward + backward = 3x forward) of one sequence: every matmul of the unsharded model,
    attention over the full s x s square (Megatron's convention), LM head and MTP modules included."""
    shard = L.Shard(
        batch=1,
        seq=seq,
        seq_full=seq,
        tp=1,
        sp=False,
        cp=1,
        ep=1,
        etp=1,
        precision="bf16",
        flash=attention_backend == "flash",
    )
    layers = K.decoder_kind_names(model)
    per_kind = {name: _matmul_flops(K.layer_kind(name).ops(model, shard)) for name in dict.fromkeys(layers)}
    total = sum(per_kind[name] for name in layers)
    for edge in K.layer_kinds():  # the embedding (no matmul), the head, the MTP modules
        count = edge.count(model) if edge.count is not None else 0
        if count:
            total += count * _matmul_flops(edge.ops(model, shard))
    return 3.0 * total


def _matmul_flops(ops: list[Op]) -> float:
    return sum(op.flops for op in ops if op.kind in MATMUL_KINDS)


DATA_PARALLEL_LABELS = ("dp", "fsdp")
"""The communication labels of `_dp_times`' collectives."""

# Collectives per layer under FSDP/ZeRO-3: torch FSDP and Megatron FSDP gather one flat unit per layer;
# DeepSpeed ZeRO-3 (2021, as in Narayanan et al. SC21 Table 2) fetched each parameter tensor on its own
# (a GPT layer has 12: four weights, four biases, two norms' weight and bias).
FSDP_TENSORS_PER_LAYER = {"deepspeed": 12}


def dp_bucket_count(params: float, bucket_size: int | None) -> int:
    """Megatron DDP buckets of `params` parameters at `bucket_size` parameters each: ceil(params / size) (the
    param-and-grad buffer closes a bucket once it holds `bucket_size` parameters). None: the fixed
    `PipelineCosts.dp_buckets_per_chunk` default stands for the framework's own size."""
    if params <= 0:
        return 0
    if bucket_size is None:
        return DEFAULT_DP_BUCKETS_PER_CHUNK
    return max(1, math.ceil(params / bucket_size))


class _RecordLog:
    """Stands for a `sources` dict in `_dp_times`: logs each `cost.collectives.record` addition as it comes (`get`
    gives 0.0, so what `record` stores is the seconds themselves), to be replayed in the same order."""

    __slots__ = ("added",)

    def __init__(self) -> None:
        self.added: list[tuple[SourceKey, float]] = []

    def get(self, key: SourceKey, default: float) -> float:
        return 0.0

    def __setitem__(self, key: SourceKey, seconds: float) -> None:
        self.added.append((key, seconds))


def _dp_times_logged(*args: Any) -> tuple[tuple[float, float, float, float], tuple[tuple[SourceKey, float], ...]]:
    """`_dp_times(*args)` (all of `DP_TIMES_READS.params`, positionally), and what it recorded into `sources` (the
    last), in order: a log in its place (nothing without one)."""
    *rest, sources = args
    log = None if sources is None else _RecordLog()
    times = _dp_times(*rest, log)  # type: ignore[arg-type]
    return times, () if log is None else tuple(log.added)


DP_TIMES_READS = ReadSet(
    params=(
        "dense_params",
        "expert_params",
        "train",
        "system",
        "cal",
        "groups",
        "fsdp_units",
        "timer",
        "float8_params",
        "quantized_expert_params",
        "sources",
    ),
    reads={
        "train": (
            ("expert_dp", expert_dp),
            ("expert_group", lambda train: train.etp * train.ep),
            "grad_reduce_bytes",
            "param_gather_bytes",
            "fsdp_float8_all_gather",
            "gathers_quantized_weights",
            "effective_ddp_bucket_size",
            "shards_params",
            "shards_optimizer",
            "zero_stage",
        ),
        "groups": (("dp_group", lambda groups: groups[CommAxis.DP]),),
        "sources": (("recorded", lambda sources: sources is not None),),
    },
    held=("system", "cal", "timer"),
)
"""Every value `_dp_times` reads (tests/core/test_readset.py: complete, and each read needed): the structures of a
tuner search that differ in their schedule, micro-batch size or recompute share their data-parallel collectives."""

_dp_times_memo = ReadSetMemo(_dp_times_logged, DP_TIMES_READS)


def _dp_times(
    dense_params: float,
    expert_params: float,
    train: TrainingSpec,
    system: SystemSpec,
    cal: Calibration,
    groups: Mapping[CommAxis, GroupPlacement],
    fsdp_units: int = 1,
    timer: OpTimer | None = None,
    float8_params: float = 0.0,
    quantized_expert_params: float = 0.0,
    sources: dict[SourceKey, float] | None = None,
) -> tuple[float, float, float, float]:
    """(grad reduction once per step, param all-gather once per step, FSDP gather per mb, FSDP RS per mb).

    FSDP collectives run once per unit (`fsdp_units` per chunk), each over that unit's share. `timer`: the fitted
    profile (its measured collectives); `sources`: where each collective's time is recorded (`cost.collectives`),
    under "dp" per step and "fsdp" per micro-batch (gathers twice: forward and backward). `float8_params`: of
    `dense_params`, the float8 linears' weights, gathered in one byte under `TrainingSpec.fsdp_float8_all_gather`;
    with `quantized_expert_params` (of `expert_params`), the quantised primary weights the distributed optimizer
    gathers in one byte under `TrainingSpec.gathers_quantized_weights` (`_one_byte_gathered`).

    ZeRO-2 (partitioned gradients, replicated parameters) reduce-scatters every micro-batch's gradients as its
    backward makes them, per unit like FSDP's, and all-gathers the updated parameters once per step: DeepSpeed's
    `stage_1_and_2.py` reduces its gradient buckets in the backward hooks of every micro-step (its engine's
    `no_sync` refuses ZeRO-2/3), torch FSDP's SHARD_GRAD_OP reduce-scatters each backward without `no_sync`, as
    Megatron-FSDP's `optim_grads`; the memory model holds two units' full gradients for it
    (`memory.model.zero2_unsharded_grad_params`)."""
    dp_group = groups[CommAxis.DP]
    edp = expert_dp(train)
    edp_group = place_group(edp, train.etp * train.ep, system.gpus_per_node)
    grad_bytes, param_bytes = train.grad_reduce_bytes, train.param_gather_bytes
    per_mb, per_step = DATA_PARALLEL_LABELS[1], DATA_PARALLEL_LABELS[0]
    bucket_size = train.effective_ddp_bucket_size

    def coll(kind: CommKind, params: float, nbytes_per: float, group: GroupPlacement, label: str) -> float:
        if label == per_step and bucket_size is not None:
            return bucketed(kind, params, nbytes_per, group)
        seconds, source = timed_collective(kind, params * nbytes_per, group, system, cal, axis=CommAxis.DP, timer=timer)
        if sources is not None:
            twice = train.shards_params and kind is CommKind.ALL_GATHER  # FSDP gathers for forward and backward
            times = (2 if twice else 1) * fsdp_units
            record(sources, label, kind, source, seconds * (times if label == per_mb else 1))
        return seconds

    def bucketed(kind: CommKind, params: float, nbytes_per: float, group: GroupPlacement) -> float:
        """Megatron DDP's per-step collective in `ddp_bucket_size`-parameter buckets, one collective each
        (megatron-core distributed_data_parallel.py / param_and_grad_buffer.py): each pays the collective's latency."""
        n = dp_bucket_count(params, bucket_size)
        if n == 0:
            return 0.0
        seconds, source = timed_collective(
            kind, params / n * nbytes_per, group, system, cal, axis=CommAxis.DP, timer=timer
        )
        if sources is not None:
            record(sources, per_step, kind, source, seconds * n)
        return seconds * n

    def per_unit(kind: CommKind, nbytes_per: float, dense_bytes_per: float | None = None) -> float:
        """One micro-batch's collectives over the chunk's `fsdp_units` units (under the per-micro-batch label);
        `dense_bytes_per`: the dense parameters' bytes each where they differ from the experts'."""
        u = fsdp_units
        return u * (
            coll(kind, dense_params / u, nbytes_per if dense_bytes_per is None else dense_bytes_per, dp_group, per_mb)
            + coll(kind, expert_params / u, nbytes_per, edp_group, per_mb)
        )

    if train.shards_params:
        dense_gather = None  # torchao's float8 all-gather: the float8 linears' weights in one byte, the rest 16-bit
        if train.fsdp_float8_all_gather and dense_params > 0:
            dense_gather = train.fsdp_gather_bytes(dense_params, float8_params) / dense_params
        gather = per_unit(CommKind.ALL_GATHER, param_bytes, dense_gather)
        # gradients reduce in the framework's reduce dtype (torch FSDP `reduce_dtype`, DeepSpeed's fp16 regime)
        return 0.0, 0.0, gather, per_unit(CommKind.REDUCE_SCATTER, grad_bytes)
    if train.shards_optimizer:
        dense_bytes: float = param_bytes
        expert_bytes: float = param_bytes
        if train.gathers_quantized_weights:  # megatron-core's fp8 params: a uint8 buffer of their own
            dense_bytes = train.one_byte_gather_bytes(dense_params, float8_params) / max(dense_params, 1.0)
            expert_bytes = train.one_byte_gather_bytes(expert_params, quantized_expert_params) / max(expert_params, 1.0)
        gather = coll(CommKind.ALL_GATHER, dense_params, dense_bytes, dp_group, per_step) + coll(
            CommKind.ALL_GATHER, expert_params, expert_bytes, edp_group, per_step
        )
        if train.zero_stage == 2:
            return 0.0, gather, 0.0, per_unit(CommKind.REDUCE_SCATTER, grad_bytes)
        grad = coll(CommKind.REDUCE_SCATTER, dense_params, grad_bytes, dp_group, per_step) + coll(
            CommKind.REDUCE_SCATTER, expert_params, grad_bytes, edp_group, per_step
        )
        return grad, gather, 0.0, 0.0
    grad = coll(CommKind.ALL_REDUCE, dense_params, grad_bytes, dp_group, per_step) + coll(
        CommKind.ALL_REDUCE, expert_params, grad_bytes, edp_group, per_step
    )
    return grad, 0.0, 0.0, 0.0


# Megatron-LM's `--scatter-gather-tensors-in-pipeline` (on by default before megatron-core; Narayanan et al.
# SC21 section 4.1), kept by Megatron-DeepSpeed: without sequence parallelism each TP rank sends 1/tp of the
# activation over its own NIC and the receiver all-gathers it inside the node.
SCATTER_GATHER_P2P_FRAMEWORKS = frozenset({"megatron-lm", "megatron-deepspeed"})


def _p2p_time(
    nbytes: float,
    train: TrainingSpec,
    shard: L.Shard,
    system: SystemSpec,
    cal: Calibration,
    groups: Mapping[CommAxis, GroupPlacement],
    timer: OpTimer | None = None,
    sources: dict[SourceKey, float] | None = None,
) -> float:
    """One pipeline send/receive of a stage boundary's activation (or its gradient); `timer` and `sources` as in
    `_dp_times` (recorded under "pp")."""

    def coll(kind: CommKind, size: float, axis: CommAxis) -> float:
        seconds, source = timed_collective(kind, size, groups[axis], system, cal, axis=axis, timer=timer)
        if sources is not None:
            record(sources, "pp", kind, source, seconds)
        return seconds

    if train.tp > 1 and not shard.sp and train.framework in SCATTER_GATHER_P2P_FRAMEWORKS:
        return coll(CommKind.SEND_RECV, nbytes / train.tp, CommAxis.PP) + coll(CommKind.ALL_GATHER, nbytes, CommAxis.TP)
    return coll(CommKind.SEND_RECV, nbytes, CommAxis.PP)


def _optimizer_time(
    dense_params: float,
    expert_params: float,
    train: TrainingSpec,
    edp: int,
    system: SystemSpec,
    cal: Calibration,
    float8_params: float = 0.0,
    quantized: tuple[float, float] = (0.0, 0.0),
    groups: Mapping[CommAxis, GroupPlacement] | None = None,
) -> float:
    """Fused Adam: memory-bound over the parameters this rank updates (`cost.offload.optimizer_step_s`: the
    precision-aware optimizer's dtypes and CPU offload); under torchao's float8 all-gather, then the scales of the
    `float8_params` float8 weights (`cost.fsdp_copies.float8_scale_precompute_s`); under the distributed optimizer's
    quantised primary weights, the cast of the rank's (dense, expert) `quantized` weights' shard and the amax
    all-reduces over `groups`' data-parallel groups (`cost.primary_weights`)."""
    dp = train.dp * train.cp
    if train.shards_optimizer or train.shards_params:
        params = dense_params / dp + expert_params / edp
    else:
        params = dense_params + expert_params
    step = optimizer_step_s(params, train, system.gpu, cal)
    if train.fsdp_float8_all_gather:
        return step + float8_scale_precompute_s(float8_params, train, system.gpu, cal)
    if train.gathers_quantized_weights and groups is not None:
        reduce_groups = (groups[CommAxis.DP], place_group(edp, train.etp * train.ep, system.gpus_per_node))
        return step + quantized_weights_step_s(quantized, train, edp, system, cal, reduce_groups)
    return step
