"""Memory per GPU, by part, to the byte.

Weights, gradients and optimizer states under each sharding scheme (Rajbhandari et al. 2020, ZeRO;
Megatron-LM's distributed optimizer keeps fp32 main grads and shards the 12 bytes/param of fp32 master
weights and Adam moments over the data-parallel ranks), the quantised copies of the weights that Transformer
Engine keeps in megatron-core's FP8 and NVFP4 runs (`quantized_copy_bytes_per_weight`), activations from the
tensors each operator saves times the micro-batches in flight, the transients at the worst moment, and fixed
framework overheads.

Three nested quantities per GPU (`RankMemory`):
- allocated: the tensors live at the worst moment (`torch.cuda.max_memory_allocated`, what Megatron-LM logs
  as `mem-max-allocated-bytes`): the parts in `ALLOCATED_PARTS`;
- reserved: what PyTorch's caching allocator holds at its peak (`memory_stats()['reserved_bytes.all.peak']`,
  what torchtitan logs): allocated plus the blocks the allocator holds idle, its fragmentation and the freed
  16-bit logits under torchtitan and FSDP2's all-gather stream pool (`RESERVED_PARTS`, `cached_logits_bytes`,
  `memory.fsdp2.all_gather_pool_bytes`);
- on the device (`total_bytes`, what the FITS/OOM verdict compares with HBM): reserved plus what lives
  outside the allocator, the CUDA context, library workspaces and NCCL's buffers (`DEVICE_PARTS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from paraplan.cost.block import gathered_params
from paraplan.cost.compute import any_layout_fp8
from paraplan.cost.quantize import quantized_weight_bytes, recipe_of
from paraplan.fastinit import fastinit
from paraplan.graph import kinds as K
from paraplan.graph.layers import MEGATRON_CORE_FRAMEWORKS
from paraplan.memory import fsdp2
from paraplan.memory.blocks import weight_params
from paraplan.memory.loss import loss_extra_bytes_per_logit
from paraplan.memory.zero3 import kept_tail_params, live_params, zero3_state_bytes
from paraplan.specs.training import DEEPSPEED_FRAMEWORKS, FLOAT8_GATHER_BYTES, TrainingSpec

if TYPE_CHECKING:
    from paraplan.graph.layers import Shard
    from paraplan.specs.model import ModelSpec
    from paraplan.specs.system import GpuSpec

GIB = 2**30
WEIGHT_BYTES = 2  # bf16/fp16 model weights
MASTER_AND_ADAM_BYTES = 12  # fp32 master weights + Adam m and v
FP32_WEIGHT_BYTES = 4  # plain fp32 training: the weights are the master copy
ADAM_BYTES = 8  # fp32 Adam m and v
CUDA_CONTEXT_BYTES = 0.75 * GIB  # CUDA context, cuBLAS/cuDNN workspaces, NCCL (nvidia-smi on an idle job)
# The caching allocator's holes between live activations (freed blocks split out of segments that live tensors
# pin; blocks merge only with free neighbours of the same segment). Not its rounding: sizes round up to 512 B, and
# requests over 10 MiB to 2 MiB (c10/cuda/CUDACachingAllocator.cpp kMinBlockSize, kRoundLarge), under 1% on
# saved tensors of tens of MiB. An estimate without a measured source: the holes depend on the allocation order.
FRAGMENTATION = 0.05


def fragmentation_share(train: TrainingSpec) -> float:
    """The allocator's holes as a share of the activations: `FRAGMENTATION`, or none with expandable segments
    (`TrainingSpec.expandable_segments`: freed blocks of one growing segment merge whatever allocation they came
    from, so reserved is allocated plus the rounding above, under 1%)."""
    return 0.0 if train.expandable_segments else FRAGMENTATION


HEADROOM = 0.03  # margin kept free of the HBM capacity for the FITS verdict

ALLOCATED_PARTS = (
    "weights", "quantized_weight_copies", "gradients", "optimizer", "activations", "recompute_working_set",
    "backward_working_set", "loss_working_set",
    "unsharded_params_and_grads", "communication_buffers", "attention_score_buffer",
)  # fmt: skip
RESERVED_PARTS = ("allocator_fragmentation", "allocator_cached_logits", "allocator_all_gather_pool")
DEVICE_PARTS = ("cuda_context_and_nccl",)


# DeepEP's registered buffers (DeepEP csrc/config.hpp `get_nvl_buffer_size_hint`, `get_rdma_buffer_size_hint`, as
# megatron-core's fused_a2a.get_buffer sizes them): per channel (Megatron `--moe-deepep-num-sms` 20 -> 10 channels),
# per NVLink peer (at most 8) or per RDMA rank (one per 8 ranks), a receive queue of chunked tokens (288 NVLink
# tokens past one node, 256 within one; 128 RDMA tokens, doubled) holding the hidden state plus 128 top-k
# indices (8 B), weights (4 B) and scales (4 B).
DEEPEP_CHANNELS = 10
DEEPEP_NVL_PEERS = 8
DEEPEP_TOKEN_META_BYTES = 128 * (8 + 4 + 4)


def deepep_buffer_bytes(hidden_size: int, ep: int) -> float:
    """Bytes of DeepEP's NVLink and RDMA buffers on one GPU of an EP group of `ep` ranks."""
    token_bytes = 2 * hidden_size + DEEPEP_TOKEN_META_BYTES  # hidden_bytes: bf16 (at least 2 bytes per element)
    nvl_tokens = 256 if ep <= DEEPEP_NVL_PEERS else 288
    nvl = DEEPEP_CHANNELS * min(ep, DEEPEP_NVL_PEERS) * nvl_tokens * token_bytes
    rdma = 0 if ep <= DEEPEP_NVL_PEERS else DEEPEP_CHANNELS * (ep // DEEPEP_NVL_PEERS) * 128 * 2 * token_bytes
    return float(nvl + rdma)


def comm_buffer_bytes(model: ModelSpec, shard: Shard, train: TrainingSpec) -> float:
    """The TP all-gather output under SP, and for MoE the all-to-all dispatch buffers (received and permuted
    tokens) plus, with the flex dispatcher, DeepEP's registered buffers."""
    h = model.hidden_size
    buffers = 0.0
    if shard.sp:
        buffers += shard.act_bytes * shard.tokens * h  # gathered sequence for the next GEMM
    if model.is_moe and train.ep > 1:
        own = shard.tokens // shard.tp if shard.sp else shard.tokens
        buffers += 2 * shard.act_bytes * own * model.moe_router_topk * h
        if train.moe_token_dispatcher_type == "flex":
            buffers += deepep_buffer_bytes(h, train.ep)
    return buffers


def attention_score_buffer_bytes(model: ModelSpec, shard: Shard) -> float:
    """megatron-core's unfused attention (`DotProductAttention`, `--attention-backend unfused`) writes its raw scores
    with `torch.baddbmm` over an input taken from the process's global memory buffer,
    `parallel_state.get_global_memory_buffer().get_tensor((b * np, sq, sk), dtype, "mpu")`, which keeps the tensor
    for the rest of the run at its largest size (megatron-core 0.16.0 transformer/dot_product_attention.py,
    utils.GlobalMemoryBuffer.get_tensor): b x heads per TP rank x s x s 16-bit elements, once per process. The
    Megatron-LM of the 2020-21 papers allocated it per call (`torch.empty`): there, one layer's transient. None with
    flash attention, outside megatron-core, or without attention layers."""
    if shard.flash or not shard.megatron_core or model.num_attention_heads <= 0:
        return 0.0
    if model.hybrid_layer_pattern is not None and "*" not in model.hybrid_layer_pattern:
        return 0.0  # a hybrid model without attention layers
    heads = model.num_attention_heads // shard.tp
    return float(shard.act_bytes * shard.batch * heads * shard.seq * shard.seq_full)


@fastinit
@dataclass(frozen=True, slots=True)
class RankMemory:
    """Bytes on one GPU; `parts` add up to `total_bytes` (the module docstring names the three quantities)."""

    rank: int
    parts: dict[str, float]

    @property
    def allocated_bytes(self) -> float:
        """Peak allocated: the tensors at the worst moment."""
        return sum(v for k, v in self.parts.items() if k in ALLOCATED_PARTS)

    @property
    def reserved_bytes(self) -> float:
        """Peak reserved by the caching allocator: allocated plus the blocks it holds idle."""
        return self.allocated_bytes + sum(self.parts.get(k, 0.0) for k in RESERVED_PARTS)

    @property
    def total_bytes(self) -> float:
        """On the device: reserved plus the CUDA context and NCCL, outside the allocator."""
        return sum(self.parts.values())

    def quantity_bytes(self, quantity: str) -> float:
        """`allocated`, `reserved` or `device` (= `total_bytes`)."""
        if quantity == "allocated":
            return self.allocated_bytes
        if quantity == "reserved":
            return self.reserved_bytes
        return self.total_bytes


@dataclass(frozen=True, slots=True)
class MemoryResult:
    ranks: tuple[RankMemory, ...]
    capacity_bytes: float
    headroom: float = HEADROOM
    expandable_segments: bool = False
    """The allocator ran with expandable segments (`TrainingSpec.expandable_segments`): no fragmentation part."""
    _peak: list[RankMemory] = field(default_factory=list, init=False, repr=False, compare=False)
    """`peak`, once found (the tuner reads it three times: the filter's verdict, the peak, the fit)."""

    @property
    def peak(self) -> RankMemory:
        if not self._peak:
            self._peak.append(max(self.ranks, key=lambda r: r.total_bytes))
        return self._peak[0]

    @property
    def peak_gib(self) -> float:
        return self.peak.total_bytes / GIB

    @property
    def usable_bytes(self) -> float:
        return self.capacity_bytes * (1 - self.headroom)

    @property
    def fits(self) -> bool:
        return self.peak.total_bytes <= self.usable_bytes

    @property
    def headroom_bytes(self) -> float:
        """Usable HBM left at the peak (negative: over by that much)."""
        return self.usable_bytes - self.peak.total_bytes

    def to_dict(self) -> dict:
        peak = self.peak
        return {
            "peak_gib": round(self.peak_gib, 4),
            "peak_allocated_gib": round(peak.allocated_bytes / GIB, 4),
            "peak_reserved_gib": round(peak.reserved_bytes / GIB, 4),
            "capacity_gib": round(self.capacity_bytes / GIB, 3),
            "usable_gib": round(self.usable_bytes / GIB, 3),
            "headroom_gib": round(self.headroom_bytes / GIB, 4),
            "fits": self.fits,
            "expandable_segments": self.expandable_segments,
            "peak_rank": peak.rank,
            "parts": {k: round(v / GIB, 4) for k, v in peak.parts.items()},
            "per_rank_gib": [round(r.total_bytes / GIB, 4) for r in self.ranks],
        }


DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def optimizer_state_bytes(train: TrainingSpec) -> float:
    """Optimizer bytes per parameter under Megatron's precision-aware optimizer (TE FusedAdam): the main
    parameters and the two Adam moments in their dtypes (fp32 each by default: 12 bytes, as without it). An fp8
    moment carries one fp32 scale per tensor, negligible here."""
    return float(
        DTYPE_BYTES[train.main_params_dtype] + DTYPE_BYTES[train.exp_avg_dtype] + DTYPE_BYTES[train.exp_avg_sq_dtype]
    )


def state_bytes(
    dense_params: float,
    expert_params: float,
    train: TrainingSpec,
    expert_dp: int,
    gathered_params: float,
    unsharded_grad_params: float = 0.0,
    fsdp_grad_bytes: float | None = None,
    gathered_float8_params: float = 0.0,
    quantized_weights: float = 0.0,
    quantized_copy_bytes: float = 0.0,
) -> dict[str, float]:
    """Weights, gradients and optimizer states on one GPU.

    `gathered_params`: under FSDP/ZeRO-3, parameters materialised at once (the unit being computed
    and the one prefetched; under torchtitan the root unit and one block, `root_unit_gathered`).
    `unsharded_grad_params`: under ZeRO-2 (`zero2_unsharded_grad_params`), parameters whose full gradients exist
    at once before their reduce-scatter.
    `fsdp_grad_bytes`: under torch FSDP / Megatron-FSDP, the bytes of unsharded gradients in backward
    (`fsdp_unsharded_grad_bytes`; by default the gathered parameters' in the weight dtype).
    `gathered_float8_params`: of `gathered_params`, those gathered in one byte (torchao's float8 all-gather keeps the
    gathered float8 bytes as the unsharded weight, no 16-bit copy: `TrainingSpec.fsdp_float8_all_gather`).
    `quantized_weights`: the weight elements of the rank's low-precision Transformer Engine linears, and
    `quantized_copy_bytes` the bytes of their quantised copies per element (`quantized_copy_bytes_per_weight`; 0:
    none): beside the 16-bit weights (`quantized_weight_copies`), or in their place under `--fp8-param-gather`.
    """
    dp = train.dp * train.cp  # Megatron shards over the data-parallel group that includes CP
    fp32 = train.precision == "fp32"  # plain fp32: fp32 weights and grads, no separate master copy
    weight_bytes = FP32_WEIGHT_BYTES if fp32 else WEIGHT_BYTES
    grad_bytes = train.grad_reduce_bytes
    optimizer_bytes = ADAM_BYTES if fp32 else MASTER_AND_ADAM_BYTES
    if train.use_precision_aware_optimizer and not fp32:
        grad_bytes = min(grad_bytes, DTYPE_BYTES[train.main_grads_dtype])
        optimizer_bytes = optimizer_state_bytes(train)
    on_gpu = 1.0 - train.offloaded_optimizer_fraction  # CPU offload: that share of the states lives on the host
    if train.shards_params:
        shard = dense_params / dp + expert_params / expert_dp
        if train.framework in DEEPSPEED_FRAMEWORKS:
            zero3 = zero3_state_bytes(shard, gathered_params, weight_bytes, on_gpu)
            return {"weights": zero3.pop("weights"), "quantized_weight_copies": 0.0, **zero3}
        # torch FSDP / Megatron-FSDP mixed precision: fp32 sharded params and grads, Adam moments; bf16 gathered units
        # and their unsharded gradients (`fsdp_unsharded_grad_bytes`). FSDP2's CPUOffloadPolicy (torchtitan
        # `enable_cpu_offload`) keeps the sharded params and grads on the host too.
        return {
            "weights": weight_bytes * gathered_params
            - (weight_bytes - FLOAT8_GATHER_BYTES) * gathered_float8_params
            + 4 * shard * on_gpu,
            "quantized_weight_copies": 0.0,  # not modelled under sharded parameters (`quantized_copy_bytes_per_weight`)
            "gradients": 4 * shard * on_gpu
            + (weight_bytes * gathered_params if fsdp_grad_bytes is None else fsdp_grad_bytes),
            "optimizer": 8 * shard * on_gpu,
        }
    weights = weight_bytes * (dense_params + expert_params)
    copies = quantized_copy_bytes * quantized_weights
    if copies and train.quantized_primary_weights:  # the quantised tensors are the weights: no 16-bit copy of them
        weights = weight_bytes * (dense_params + expert_params - quantized_weights) + copies
        copies = 0.0
    if train.zero_stage >= 2:
        grads = grad_bytes * (dense_params / dp + expert_params / expert_dp + unsharded_grad_params)
    else:
        grads = grad_bytes * (dense_params + expert_params)
    if train.shards_optimizer:
        optimizer = optimizer_bytes * (dense_params / dp + expert_params / expert_dp)
    else:
        optimizer = optimizer_bytes * (dense_params + expert_params)
    optimizer *= on_gpu
    return {"weights": weights, "quantized_weight_copies": copies, "gradients": grads, "optimizer": optimizer}


def quantized_copy_bytes_per_weight(train: TrainingSpec, gpu: GpuSpec) -> float:
    """Bytes per weight element of a low-precision Transformer Engine linear that a megatron-core run keeps
    quantised for the whole run (0 where it keeps none).

    megatron-core's TE linears (TELinear, TELayerNormColumnParallelLinear, TEGroupedLinear) pass
    `is_first_microbatch` to TE unless `--disable-parameter-transpose-cache` (megatron-core 0.16
    extensions/transformer_engine.py; TransformerConfig.disable_parameter_transpose_cache, default False), and TE
    then caches the quantised weight under a `cache_name` in the module's `_fp8_workspaces`, re-cast in place on each
    step's first micro-batch and never freed (TE 2.9 module/base.py `get_weight_workspace`; linear.py,
    layernorm_linear.py, grouped_linear.py). With gradients on, the weight quantizer asks for the row-wise and the
    column-wise usage: `cost.quantize.quantized_weight_bytes`. Under `--fp8-param-gather` the primary weights are
    those quantised tensors (`get_weight_workspace` returns them as they are, with both usages) and `state_bytes`
    counts them in place of the 16-bit weights. Megatron-core frameworks only (torchtitan's torchao Float8Linear
    casts per forward); not under sharded parameters (Megatron-FSDP gathers its weights per module: not modelled)."""
    recipe = recipe_of(train.precision)
    if recipe is None or train.framework not in MEGATRON_CORE_FRAMEWORKS or train.shards_params:
        return 0.0
    return quantized_weight_bytes(recipe, 1.0, any_layout_fp8(gpu))


def zero2_unsharded_grad_params(train: TrainingSpec, max_layer_params: float) -> float:
    """Parameters whose gradients a ZeRO-2 rank holds unsharded at once: torch FSDP's SHARD_GRAD_OP (params
    gathered, "does not reshard them after the forward"; gradients reduce-scattered per wrapped unit after its
    backward, torch.distributed.fsdp.ShardingStrategy docs) and Megatron-FSDP's `optim_grads` produce a unit's
    (a decoder layer's) full gradient, then reduce-scatter it while the next unit's backward fills another: two
    layers, as the parameter gather of FSDP (`cost.block.gathered_params`). DeepSpeed ZeRO-2 reduces through
    its own bucket, not modelled here (0)."""
    if train.zero_stage != 2 or train.shards_params or train.framework in DEEPSPEED_FRAMEWORKS:
        return 0.0
    return 2 * max_layer_params


def fsdp_unsharded_grad_bytes(
    train: TrainingSpec, gathered_params: float, late_params: float = 0.0, layer_params: float = 0.0
) -> float:
    """The unsharded 16-bit gradients of torch FSDP's / Megatron-FSDP's gathered units (`state_bytes`): autograd
    writes a weight's gradient when the weight's own backward node runs (the LM head's after the loss's backward,
    torch autograd engine), and FSDP reduce-scatters a unit's gradients in its post-backward hook, so none is live
    while the loss's transient is: they belong to the backward's moment (`rank_memory`). 0 for DeepSpeed ZeRO-3,
    whose gradient bucket is held for the run (`memory.zero3`), and without sharded parameters. Under torchtitan's
    FSDP2: less the untied embedding's (`late_params`), plus the previous block's reduce-scatter input
    (`memory.fsdp2.backward_grad_bytes`; `layer_params`: the largest block's); with the stage kept unsharded
    (`keeps_stage_unsharded`), the block in backward's, until its `post_backward` adds them into the accumulator in
    the reduce dtype and frees them (`FSDPParam.to_accumulated_grad_if_needed`, `accumulate_unsharded_grad_if_needed`;
    the accumulators are `unsharded_stage_bytes`')."""
    if not train.shards_params or train.framework in DEEPSPEED_FRAMEWORKS:
        return 0.0
    param_bytes = FP32_WEIGHT_BYTES if train.precision == "fp32" else WEIGHT_BYTES
    if keeps_stage_unsharded(train):
        return param_bytes * layer_params
    if train.framework == "torchtitan":
        return fsdp2.backward_grad_bytes(train, gathered_params, late_params, layer_params, param_bytes)
    return param_bytes * gathered_params


def keeps_stage_unsharded(train: TrainingSpec) -> bool:
    """torchtitan's FSDP2 under pipeline parallelism keeps each stage's parameters gathered from forward to
    backward (`apply_fsdp`: `reshard_after_forward = False` when PP is on, "to avoid per-microbatch all-gathers",
    torchtitan@9dec370 parallelize_llama.py), and torch.distributed.pipelining syncs gradients only on the last
    micro-batch (`PipelineStage` `backward_maybe_with_nosync`: `set_requires_gradient_sync(last)`), so FSDP2
    accumulates the other micro-batches' gradients unsharded in its reduce dtype (`FSDPParam.
    to_accumulated_grad_if_needed`: fp32 under torchtitan's `reduce_dtype`)."""
    return train.shards_params and train.framework == "torchtitan" and train.pp > 1 and train.num_microbatches > 1


def root_unit_gathered(train: TrainingSpec, edge_params: float, max_layer_params: float) -> float:
    """torch FSDP2 as torchtitan applies it wraps each transformer block, then the model itself (`fully_shard(model)`
    in `apply_fsdp`, torchtitan@9dec370): the root unit is the embedding, final norm and output layer, gathered
    together at the start of forward and again of backward, when the loss's transient and the last block (kept
    gathered after forward, `reshard_after_forward = layer_id < n_layers - 1`) are live with it. Beside the root, one
    block at a time: a block's pre-forward or pre-backward copy-out (`FSDPParamGroup.wait_for_unshard`) allocates its
    unsharded parameters after the block before it resharded (`post_forward` / `post_backward` -> `reshard()`); the
    next block's prefetched all-gather output lives in the all-gather stream's pool (`memory.fsdp2`). 0 for other
    frameworks (Megatron-FSDP and ZeRO-3 gather per module)."""
    if not train.shards_params or train.framework != "torchtitan" or edge_params <= 0:
        return 0.0
    return edge_params + max_layer_params


LOGIT_OUTPUT_BYTES = 4  # torchtitan's `Transformer.forward` returns `self.output(h).float()`: fp32 logits
LOGIT_MATMUL_BYTES = 2  # the LM head's matmul output, in the 16-bit parameter dtype, before `.float()`


def cached_logits_bytes(train: TrainingSpec, loss_logits: float) -> float:
    """The caching allocator's block of the 16-bit logits, held idle at the loss's peak (reserved, not allocated).

    torchtitan's `Transformer.forward` returns `self.output(h).float()` (torchtitan@9dec370 models/llama/model.py):
    the head's matmul writes 16-bit logits into a block of their size, `.float()` copies them into a new fp32 block
    and frees the 16-bit one. PyTorch's CUDA caching allocator keeps a freed block in its segment for reuse by a
    request no larger than the block (it never merges blocks of different `cudaMalloc` segments, and returns
    segments to the driver only on `empty_cache()` or when a `cudaMalloc` fails: c10/cuda/CUDACachingAllocator.cpp
    `get_free_block` / `release_cached_blocks`; torch docs "CUDA memory management"). Every tensor the loss
    allocates next (fp32 log-probabilities, the gradients of `memory.loss`) is a whole fp32 logit tensor, twice
    that size, so none can reuse it: the 16-bit block stays reserved until the head's backward writes the 16-bit
    gradient of the logits into it, after the loss's peak. 0 without a loss on the rank, or outside torchtitan."""
    if train.framework != "torchtitan" or loss_logits <= 0:
        return 0.0
    return LOGIT_MATMUL_BYTES * loss_logits


def kept_pipeline_output_bytes(train: TrainingSpec, loss_logits: float) -> float:
    """The last pipeline stage's outputs that torch.distributed.pipelining keeps for the whole step: under
    torchtitan with PP the loss runs inside the schedule, and the last stage appends every micro-batch's output,
    torchtitan's fp32 logits, to `output_chunks` to merge and return them when `step()` ends (torch
    `_PipelineStageBase.forward_one_chunk`, cleared by `clear_runtime_states` at the next step; later torch added
    `step(return_outputs=False)` to skip it, still True by default in torch 2.13, after torchtitan@9dec370). At the
    last micro-batch's loss all of them are live, the current one included (without PP torchtitan's train.py frees
    it before backward, `del pred`). 0 without a loss here."""
    if train.framework != "torchtitan" or train.pp <= 1 or loss_logits <= 0:
        return 0.0
    return LOGIT_OUTPUT_BYTES * train.num_microbatches * loss_logits


def may_read_moments(train: TrainingSpec) -> bool:
    """Whether `pipeline_memory` may take a rank's activations from the plan's memory moments (`moment_peak`) rather
    than its static peak: only where a rank holds an unsharded stage or kept pipeline outputs, torchtitan under PP
    (`keeps_stage_unsharded`, `kept_pipeline_output_bytes`)."""
    return train.framework == "torchtitan" and train.pp > 1


def unsharded_stage_bytes(
    dense_params: float, expert_params: float, train: TrainingSpec, which: str = "both", float8_params: float = 0.0
) -> float:
    """The gathered 16-bit parameters ("params") and the unsharded gradients in the reduce dtype ("grads") of a
    stage that `keeps_stage_unsharded` (0 otherwise); "both": their sum. Under torchao's float8 all-gather the
    stage's `float8_params` stay gathered in one byte (`TrainingSpec.fsdp_gather_bytes`), their gradients 16-bit."""
    if not keeps_stage_unsharded(train):
        return 0.0
    if train.fsdp_float8_all_gather:
        params = dense_params + expert_params
        gathered, grads = train.fsdp_gather_bytes(params, float8_params), train.grad_reduce_bytes * params
        return {"params": gathered, "grads": grads, "both": gathered + grads}[which]
    per_param = {
        "params": train.param_gather_bytes,
        "grads": train.grad_reduce_bytes,
        "both": train.param_gather_bytes + train.grad_reduce_bytes,
    }[which]
    return per_param * (dense_params + expert_params)


def moment_peak(
    moments: np.ndarray,
    saved_bytes: Sequence[float],
    gathered_bytes: Sequence[float],
    accumulator_bytes: Sequence[float],
    output_bytes: Sequence[float],
    fragmentation: float = FRAGMENTATION,
) -> tuple[float, float]:
    """(activations with kept outputs, unsharded parameters and gradients) at a rank's worst moment: the row of
    `moments` (`sim.plan.Plan.memory_moments`: per local chunk its live micro-batches, gathered flag, accumulator
    flag and forwards done) with the most bytes, the activations weighed with the allocator's fragmentation on
    them (`rank_memory`), given per local chunk the bytes of one micro-batch's saved activations, of its gathered
    parameters, of its unsharded gradient accumulator and of one kept output; `fragmentation`: the allocator's
    share on the activations (`fragmentation_share`)."""
    n = len(saved_bytes)
    if len(moments) == 0 or n == 0:
        return 0.0, 0.0
    live, gathered, accumulating, forwards = (moments[:, g * n : (g + 1) * n] for g in range(4))
    activations = live @ np.asarray(saved_bytes, dtype=float) + forwards @ np.asarray(output_bytes, dtype=float)
    unsharded = gathered @ np.asarray(gathered_bytes, dtype=float) + accumulating @ np.asarray(
        accumulator_bytes, dtype=float
    )
    worst = int(np.argmax((1 + fragmentation) * activations + unsharded))
    return float(activations[worst]), float(unsharded[worst])


def rank_memory(
    rank: int,
    states: dict[str, float],
    activation_bytes: float,
    recompute_working_bytes: float,
    comm_buffer_bytes: float,
    loss_working_bytes: float = 0.0,
    unsharded_bytes: float = 0.0,
    cached_logits_bytes: float = 0.0,
    backward_transient_bytes: float = 0.0,
    backward_grad_bytes: float = 0.0,
    fragmentation: float = FRAGMENTATION,
    score_buffer_bytes: float = 0.0,
    all_gather_pool_bytes: float = 0.0,
) -> RankMemory:
    """The parts of one GPU. A layer's backward (the saved tensors of the layer it recomputes, the activation gradients
    in flight, `memory.blocks.backward_transient_bytes`, and the unsharded weight gradients that `backward_grad_bytes`
    of `states["gradients"]` stand for) and the loss's transient (`memory.loss`) are not live at once;
    `loss_working_set` is what the loss needs beyond the backward's working sets, so the parts add up to the larger.
    `fragmentation`: the allocator's holes as a share of the activations (`fragmentation_share`);
    `all_gather_pool_bytes`: FSDP2's all-gather stream pool (`memory.fsdp2`), reserved whatever the moment."""
    parts = dict(states)
    parts["activations"] = activation_bytes
    parts["recompute_working_set"] = recompute_working_bytes
    parts["backward_working_set"] = backward_transient_bytes
    backward_only = recompute_working_bytes + backward_transient_bytes + backward_grad_bytes
    parts["loss_working_set"] = max(0.0, loss_working_bytes - backward_only)
    parts["unsharded_params_and_grads"] = unsharded_bytes
    parts["communication_buffers"] = comm_buffer_bytes
    parts["attention_score_buffer"] = score_buffer_bytes
    parts["allocator_fragmentation"] = fragmentation * activation_bytes
    parts["allocator_cached_logits"] = cached_logits_bytes
    parts["allocator_all_gather_pool"] = all_gather_pool_bytes
    parts["cuda_context_and_nccl"] = CUDA_CONTEXT_BYTES
    return RankMemory(rank=rank, parts=parts)


def expert_dp(train: TrainingSpec) -> int:
    """Replicas of each expert: the ranks of the dense model's TP x CP x DP over those of the experts' ETP x EP."""
    return max(1, (train.tp * train.cp * train.dp) // (train.etp * train.ep))


@dataclass(frozen=True, slots=True)
class StageFootprint:
    """What one model stage leaves on a GPU: its blocks' parameters and the activations one micro-batch through it
    saves for backward (`memory.blocks.BlockMemory` summed over the stage)."""

    dense_params: float = 0.0
    expert_params: float = 0.0
    saved_bytes: float = 0.0
    max_layer_params: float = 0.0
    """The largest decoder layer's parameters (what FSDP gathers at once)."""
    max_full_saved_bytes: float = 0.0
    """The largest fully recomputed layer's working set while it recomputes."""
    loss_logits: float = 0.0
    """Logit elements of one micro-batch on this GPU when the stage holds the LM head and loss (`memory.loss`)."""
    edge_params: float = 0.0
    """Parameters outside the decoder layers (embedding, final norm, LM head): torch FSDP2's root unit."""
    max_backward_transient_bytes: float = 0.0
    """The largest decoder layer's gradients in flight in its backward (`memory.blocks.backward_transient_bytes`)."""
    float8_params: float = 0.0
    """Of `dense_params`, the weights of low-precision GEMMs: torchao's float8 linears, what its float8 all-gather
    sends in one byte (`TrainingSpec.fsdp_float8_all_gather`)."""
    max_layer_float8_params: float = 0.0
    """Of `max_layer_params`, the weights of the largest layer's float8 linears (`float8_params`)."""
    quantized_weights: float = 0.0
    """Weight elements of the stage's low-precision GEMMs, the Transformer Engine linears of its low-precision layers
    (`projection.quantized_weight_elements`)."""


@fastinit
@dataclass(frozen=True, slots=True)
class RankStates:
    """What one pipeline rank holds whatever it recomputes: its weights, gradients and optimizer states, the loss's
    transient, the pipeline outputs it keeps and the unsharded stage (functions of its stages' parameters and logits,
    never of their saved activations)."""

    states: dict[str, float]
    loss_working_bytes: float
    kept_output_bytes: float
    unsharded_bytes: float
    cached_logits_bytes: float = 0.0
    backward_grad_bytes: float = 0.0
    """The part of `states["gradients"]` live only in the backward (`fsdp_unsharded_grad_bytes`)."""
    all_gather_pool_bytes: float = 0.0
    """FSDP2's all-gather stream pool (`memory.fsdp2.all_gather_pool_bytes`)."""


RankStatesCache = dict[tuple[float, ...], RankStates]
"""`RankStates` by a rank's (dense, expert, edge parameters, loss logits, largest layer's parameters, low-precision
weight elements and, for a rank of several chunks, each chunk's edge parameters): valid for one model, shard and
training spec but for its recompute settings (`tune.memfilter.GroupMemory` holds one per structure)."""


def pipeline_memory(
    model: ModelSpec,
    shard: Shard,
    train: TrainingSpec,
    capacity_bytes: float,
    stages: Sequence[StageFootprint],
    holder: Sequence[Sequence[int]],
    peak_activation_bytes: Sequence[float],
    moments: Sequence[np.ndarray] | Callable[[], Sequence[np.ndarray]] | None = None,
    states_cache: RankStatesCache | None = None,
    quantized_copy_bytes: float = 0.0,
) -> MemoryResult:
    """Bytes per GPU of every pipeline rank: rank r holds model stages `holder[r]` (indices into `stages`) and at
    its peak `peak_activation_bytes[r]` of their activations (the schedule's in-flight micro-batches).

    `moments` (`sim.plan.Plan.memory_moments`, per rank): when what a stage holds besides activations changes
    within the step (torchtitan under PP: FSDP2's gathered stages and gradient accumulators, from a chunk's first
    forward or backward to its last, and the last stage's kept outputs, one per forward done), the peak is the
    worst of those moments (`moment_peak`), not the sum of each part's own peak. Without them every part is at
    its largest at once (an upper bound). A callable gives them when first needed: a plan's moments cost
    milliseconds to find (`Plan.memory_moments`), and only torchtitan under PP reads them.
    `states_cache`: the ranks' `RankStates` already computed for this model, shard and spec (any recompute).
    `quantized_copy_bytes`: bytes per weight element of the low-precision linears' quantised copies
    (`quantized_copy_bytes_per_weight` on the run's GPU)."""
    max_layer_params, max_full_saved, max_transient = stage_maxima(stages)
    comm_buffers = comm_buffer_bytes(model, shard, train)
    score_buffer = attention_score_buffer_bytes(model, shard)
    fragmentation = fragmentation_share(train)
    ranks = []
    # ranks with the same states and the same activations have the same parts: built and added up once (a pipeline's
    # middle ranks are alike); the peak is the first rank of the largest total, as `MemoryResult.peak` finds it
    alike: dict[tuple[int, float, float], tuple[dict[str, float], float]] = {}
    peak: RankMemory | None = None
    peak_total = 0.0
    for r, (row, rank) in enumerate(
        zip(
            holder,
            _ranks_states(model, shard, train, stages, holder, max_layer_params, states_cache, quantized_copy_bytes),
            strict=True,
        )
    ):
        kept_outputs, unsharded = rank.kept_output_bytes, rank.unsharded_bytes
        activations = peak_activation_bytes[r] + kept_outputs  # retained forward outputs: with the activations
        if moments is not None and (unsharded or kept_outputs):
            if callable(moments):
                moments = moments()
            activations, unsharded = moment_peak(
                moments[r],
                [stages[i].saved_bytes for i in row],
                [
                    unsharded_stage_bytes(
                        stages[i].dense_params, stages[i].expert_params, train, "params", stages[i].float8_params
                    )
                    for i in row
                ],
                [unsharded_stage_bytes(stages[i].dense_params, stages[i].expert_params, train, "grads") for i in row],
                [kept_pipeline_output_bytes(train, stages[i].loss_logits) / train.num_microbatches for i in row],
                fragmentation,
            )
        key = (id(rank), activations, unsharded)  # `rank` is held by the states cache or `_ranks_states`' list
        found = alike.get(key)
        if found is None:
            held = (rank.states, activations, max_full_saved, comm_buffers, rank.loss_working_bytes, unsharded)
            parts = rank_memory(
                r, *held, cached_logits_bytes=rank.cached_logits_bytes, backward_transient_bytes=max_transient,
                backward_grad_bytes=rank.backward_grad_bytes, fragmentation=fragmentation,
                score_buffer_bytes=score_buffer, all_gather_pool_bytes=rank.all_gather_pool_bytes,
            ).parts  # fmt: skip
            found = alike[key] = (parts, sum(parts.values()))
        memory = RankMemory(r, found[0])
        if peak is None or found[1] > peak_total:
            peak, peak_total = memory, found[1]
        ranks.append(memory)
    result = MemoryResult(tuple(ranks), capacity_bytes, expandable_segments=train.expandable_segments)
    if peak is not None:
        result._peak.append(peak)
    return result


def _ranks_states(
    model: ModelSpec,
    shard: Shard,
    train: TrainingSpec,
    stages: Sequence[StageFootprint],
    holder: Sequence[Sequence[int]],
    max_layer_params: float,
    states_cache: RankStatesCache | None,
    quantized_copy_bytes: float = 0.0,
) -> list[RankStates]:
    """Each rank's `RankStates`, from `states_cache` where it holds them (filled in here)."""
    cache: RankStatesCache = {} if states_cache is None else states_cache
    gathered: float | None = None  # looked up once, when a rank's states are not cached
    float8_gather = train.fsdp_float8_all_gather  # the float8 linears' weights counted apart (else 0.0 each)
    layer_float8 = max_layer_float8_params(stages, max_layer_params) if float8_gather else 0.0
    late = 0.0  # the untied embedding's parameters under torchtitan's FSDP2 (`_rank_states`), with `gathered`
    by_stages: dict[tuple[int, ...], RankStates] = {}  # ranks of several chunks holding the same footprint objects
    out = []
    for row in holder:
        held: tuple[int, ...] = ()
        chunk_edges: tuple[float, ...] = ()  # each chunk's edge parameters, for a rank of several
        if len(row) == 1:  # one stage: its figures as they are (a sum of one is that one, to the bit)
            one = stages[row[0]]
            dense, expert, edge, logits = one.dense_params, one.expert_params, one.edge_params, one.loss_logits
            float8 = one.float8_params if float8_gather else 0.0
            quantized = one.quantized_weights
        else:  # the sums and the max of `sum()` and `max()` over the row, in one pass (0 + x is x, to the bit)
            held = tuple([id(stages[i]) for i in row])  # `stages` holds them for the call
            found = by_stages.get(held)
            if found is not None:
                out.append(found)
                continue
            dense = expert = edge = float8 = quantized = 0
            logits: float | None = None
            for i in row:
                stage = stages[i]
                dense += stage.dense_params
                float8 += stage.float8_params if float8_gather else 0.0
                expert += stage.expert_params
                edge += stage.edge_params
                quantized += stage.quantized_weights
                if logits is None or stage.loss_logits > logits:
                    logits = stage.loss_logits
            if logits is None:
                logits = 0.0
            chunk_edges = tuple([stages[i].edge_params for i in row])
        key = (dense, expert, edge, logits, max_layer_params, float8, quantized, *chunk_edges)
        rank = cache.get(key)
        if rank is None:
            if gathered is None:
                gathered = _gathered_params(model, shard, train, max_layer_params)
                late = _embedding_table_params(model, shard) if gathered and train.framework == "torchtitan" else 0.0
            rank = cache[key] = _rank_states(
                train, dense, expert, edge, logits, max_layer_params, gathered, chunk_edges or (edge,), late,
                (float8, layer_float8), quantized, quantized_copy_bytes,
            )  # fmt: skip
        if held:
            by_stages[held] = rank
        out.append(rank)
    return out


def states_floor_bytes(
    model: ModelSpec,
    shard: Shard,
    train: TrainingSpec,
    stages: Sequence[StageFootprint],
    holder: Sequence[Sequence[int]],
    states_cache: RankStatesCache | None = None,
    quantized_copy_bytes: float = 0.0,
) -> list[float]:
    """Per pipeline rank, what `pipeline_memory` adds up whatever the activations and the recompute: the rank's
    `total_bytes` with the parts that depend on them (activations, the working sets, the unsharded stage that memory
    moments may lower, the fragmentation) at zero. Those parts are never negative and floating-point addition is
    monotone, so the total of the same rank under any activations is at least this floor (the parts' order is
    `rank_memory`'s, and x + 0.0 = x). The tuner's memory filter rejects a structure whose floor does not fit
    before it builds its schedule's plan (`tune.memfilter.GroupMemory.cannot_fit`)."""
    max_layer_params = stage_maxima(stages)[0]
    comm_buffers = comm_buffer_bytes(model, shard, train)
    score_buffer = attention_score_buffer_bytes(model, shard)
    floors: dict[int, float] = {}  # by RankStates (alike ranks share one): the same parts, the same total
    out = []
    ranks = _ranks_states(model, shard, train, stages, holder, max_layer_params, states_cache, quantized_copy_bytes)
    for r, rank in enumerate(ranks):
        floor = floors.get(id(rank))
        if floor is None:
            floor = floors[id(rank)] = rank_memory(
                r,
                rank.states,
                0.0,
                0.0,
                comm_buffers,
                cached_logits_bytes=rank.cached_logits_bytes,
                score_buffer_bytes=score_buffer,
                all_gather_pool_bytes=rank.all_gather_pool_bytes,
            ).total_bytes
        out.append(floor)
    return out


def stage_maxima(stages: Sequence[StageFootprint]) -> tuple[float, float, float]:
    """The largest layer's parameters, fully recomputed working set and backward transient over the stages: each
    `max(..., default=0.0)` of its field (the first of equal ones), in one pass."""
    if not stages:
        return 0.0, 0.0, 0.0
    first = stages[0]
    params, full, transient = first.max_layer_params, first.max_full_saved_bytes, first.max_backward_transient_bytes
    for s in stages:
        if s.max_layer_params > params:
            params = s.max_layer_params
        if s.max_full_saved_bytes > full:
            full = s.max_full_saved_bytes
        if s.max_backward_transient_bytes > transient:
            transient = s.max_backward_transient_bytes
    return params, full, transient


def max_layer_float8_params(stages: Sequence[StageFootprint], max_layer_params: float) -> float:
    """The float8 linears' weights of the largest layer (`stage_maxima`'s, the first stage that holds it)."""
    return next((s.max_layer_float8_params for s in stages if s.max_layer_params == max_layer_params), 0.0)


def _gathered_params(model: ModelSpec, shard: Shard, train: TrainingSpec, max_layer_params: float) -> float:
    """Parameters gathered at once under FSDP/ZeRO-3 (`cost.block.gathered_params`; DeepSpeed's, `zero3_live_params`),
    0 when the whole stage is gathered already (`unsharded_stage_bytes`)."""
    if keeps_stage_unsharded(train) or not train.shards_params:
        return 0.0
    if train.framework in DEEPSPEED_FRAMEWORKS:
        return zero3_live_params(model, shard)
    return gathered_params(train, max_layer_params)


def _embedding_table_params(model: ModelSpec, shard: Shard) -> float:
    """The embedding table's parameters on this GPU when not tied to the LM head (whose gradient the head's backward
    writes early); 0 when tied."""
    if model.tied_embeddings:
        return 0.0
    return float(K.layer_kind("embedding").params_of(model, shard) or 0)


def zero3_live_params(model: ModelSpec, shard: Shard) -> float:
    """DeepSpeed ZeRO-3's gathered parameters at the loss (`memory.zero3.kept_tail_params`, `live_params`): the
    modules with weights in forward order are the decoder layers' GEMMs, then the LM head (DeepSpeed refuses ZeRO-3
    with pipeline stages: one rank holds them all)."""
    by_kind: dict[str, list[int]] = {}

    def weights(kind: K.LayerKind) -> list[int]:
        if kind.name not in by_kind:
            by_kind[kind.name] = [w for w in map(weight_params, kind.ops(model, shard)) if w]
        return by_kind[kind.name]

    head = weights(K.layer_kind("head"))

    def last_first():
        yield from reversed(head)
        for layer in reversed(range(model.num_layers)):
            yield from reversed(weights(K.decoder_kind_of(model, layer)))

    largest = max((w for kind in K.decoder_kinds(model) for w in weights(kind)), default=0)
    return live_params(kept_tail_params(last_first()), max(largest, *head, 0))


def _rank_states(
    train: TrainingSpec,
    dense: float,
    expert: float,
    edge: float,
    logits: float,
    max_layer_params: float,
    gathered: float,
    chunk_edges: tuple[float, ...],
    late_params: float = 0.0,
    float8_params: tuple[float, float] = (0.0, 0.0),
    quantized_weights: float = 0.0,
    quantized_copy_bytes: float = 0.0,
) -> RankStates:
    """The `RankStates` of a rank with these parameters (dense, expert, outside the layers; `chunk_edges`: those
    outside the layers of each of its chunks) and loss logits; `late_params`: the untied embedding's, whose
    gradient the backward writes last (`fsdp_unsharded_grad_bytes`); `float8_params`: of the rank's dense parameters
    and of its largest layer's, the float8 linears' weights (0 each without `TrainingSpec.fsdp_float8_all_gather`;
    the root unit holds none: torchtitan's float8 filter keeps the LM head 16-bit, as `graph.layers.head_ops`);
    `quantized_weights`, `quantized_copy_bytes`: its low-precision linears' weight elements and the bytes of their
    quantised copies per element (`state_bytes`)."""
    rank_float8, layer_float8 = float8_params
    rank_gathered = gathered and (root_unit_gathered(train, edge, max_layer_params) or gathered)  # torchtitan's root
    fsdp_grads = fsdp_unsharded_grad_bytes(train, rank_gathered, late_params, max_layer_params)
    zero2_grads = zero2_unsharded_grad_params(train, max_layer_params)
    states = state_bytes(
        dense, expert, train, expert_dp(train), rank_gathered, unsharded_grad_params=zero2_grads,
        fsdp_grad_bytes=fsdp_grads, gathered_float8_params=layer_float8 if rank_gathered else 0.0,
        quantized_weights=quantized_weights, quantized_copy_bytes=quantized_copy_bytes,
    )  # fmt: skip
    return RankStates(
        states=states,
        backward_grad_bytes=fsdp_grads,
        loss_working_bytes=loss_extra_bytes_per_logit(train) * logits,
        kept_output_bytes=kept_pipeline_output_bytes(train, logits),
        unsharded_bytes=unsharded_stage_bytes(dense, expert, train, float8_params=rank_float8),
        cached_logits_bytes=cached_logits_bytes(train, logits),
        all_gather_pool_bytes=fsdp2.all_gather_pool_bytes(train, chunk_edges, max_layer_params, layer_float8),
    )
