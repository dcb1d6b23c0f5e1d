"""Memory per GPU, by part, to the byte.

Weights, gradients and optimizer states under each sharding scheme (Rajbhandari et al. 2020, ZeRO;
Megatron-LM's distributed optimizer keeps fp32 main grads and shards the 12 bytes/param of fp32 master
weights and Adam moments over the data-parallel ranks), activations from the tensors each operator saves
times the micro-batches in flight, and fixed framework overheads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from paraplan.cost.block import gathered_params
from paraplan.graph import kinds as K
from paraplan.specs.training import TrainingSpec

if TYPE_CHECKING:
    from paraplan.graph.layers import Shard
    from paraplan.specs.model import ModelSpec

GIB = 2**30
WEIGHT_BYTES = 2  # bf16/fp16 model weights
MASTER_AND_ADAM_BYTES = 12  # fp32 master weights + Adam m and v
FP32_WEIGHT_BYTES = 4  # plain fp32 training: the weights are the master copy
ADAM_BYTES = 8  # fp32 Adam m and v
CUDA_CONTEXT_BYTES = 0.75 * GIB  # CUDA context, cuBLAS/cuDNN workspaces, NCCL (nvidia-smi on an idle job)
FRAGMENTATION = 0.05  # caching-allocator fragmentation on activations (PyTorch memory stats, typical)
HEADROOM = 0.03  # margin kept free of the HBM capacity for the FITS verdict


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


@dataclass(frozen=True, slots=True)
class RankMemory:
    """Bytes on one GPU; `parts` add up to `total_bytes`."""

    rank: int
    parts: dict[str, float]

    @property
    def total_bytes(self) -> float:
        return sum(self.parts.values())


@dataclass(frozen=True, slots=True)
class MemoryResult:
    ranks: tuple[RankMemory, ...]
    capacity_bytes: float
    headroom: float = HEADROOM

    @property
    def peak(self) -> RankMemory:
        return max(self.ranks, key=lambda r: r.total_bytes)

    @property
    def peak_gib(self) -> float:
        return self.peak.total_bytes / GIB

    @property
    def usable_bytes(self) -> float:
        return self.capacity_bytes * (1 - self.headroom)

    @property
    def fits(self) -> bool:
        return self.peak.total_bytes <= self.usable_bytes

    def to_dict(self) -> dict:
        peak = self.peak
        return {
            "peak_gib": round(self.peak_gib, 4),
            "capacity_gib": round(self.capacity_bytes / GIB, 3),
            "usable_gib": round(self.usable_bytes / GIB, 3),
            "fits": self.fits,
            "peak_rank": peak.rank,
            "parts": {k: round(v / GIB, 4) for k, v in peak.parts.items()},
            "per_rank_gib": [round(r.total_bytes / GIB, 4) for r in self.ranks],
        }


def state_bytes(
    dense_params: float, expert_params: float, train: TrainingSpec, expert_dp: int, gathered_params: float
) -> dict[str, float]:
    """Weights, gradients and optimizer states on one GPU.

    `gathered_params`: under FSDP/ZeRO-3, parameters materialised at once (the unit being computed
    and the one prefetched).
    """
    dp = train.dp * train.cp  # Megatron shards over the data-parallel group that includes CP
    fp32 = train.precision == "fp32"  # plain fp32: fp32 weights and grads, no separate master copy
    weight_bytes = FP32_WEIGHT_BYTES if fp32 else WEIGHT_BYTES
    grad_bytes = train.grad_reduce_bytes
    optimizer_bytes = ADAM_BYTES if fp32 else MASTER_AND_ADAM_BYTES
    if train.shards_params:
        # torch FSDP / ZeRO-3 mixed precision: fp32 sharded params and grads, Adam moments; bf16 gathered units
        shard = dense_params / dp + expert_params / expert_dp
        return {
            "weights": weight_bytes * gathered_params + 4 * shard,
            "gradients": 4 * shard + weight_bytes * gathered_params,
            "optimizer": 8 * shard,
        }
    weights = weight_bytes * (dense_params + expert_params)
    if train.zero_stage >= 2:
        grads = grad_bytes * (dense_params / dp + expert_params / expert_dp)
    else:
        grads = grad_bytes * (dense_params + expert_params)
    if train.shards_optimizer:
        optimizer = optimizer_bytes * (dense_params / dp + expert_params / expert_dp)
    else:
        optimizer = optimizer_bytes * (dense_params + expert_params)
    return {"weights": weights, "gradients": grads, "optimizer": optimizer}


def rank_memory(
    rank: int,
    states: dict[str, float],
    activation_bytes: float,
    recompute_working_bytes: float,
    comm_buffer_bytes: float,
) -> RankMemory:
    parts = dict(states)
    parts["activations"] = activation_bytes
    parts["recompute_working_set"] = recompute_working_bytes
    parts["communication_buffers"] = comm_buffer_bytes
    parts["framework_overhead"] = CUDA_CONTEXT_BYTES + FRAGMENTATION * activation_bytes
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


def pipeline_memory(
    model: ModelSpec,
    shard: Shard,
    train: TrainingSpec,
    capacity_bytes: float,
    stages: Sequence[StageFootprint],
    holder: Sequence[Sequence[int]],
    peak_activation_bytes: Sequence[float],
) -> MemoryResult:
    """Bytes per GPU of every pipeline rank: rank r holds model stages `holder[r]` (indices into `stages`) and at
    its peak `peak_activation_bytes[r]` of their activations (the schedule's in-flight micro-batches)."""
    max_layer_params = max((s.max_layer_params for s in stages), default=0.0)
    max_full_saved = max((s.max_full_saved_bytes for s in stages), default=0.0)
    gathered = gathered_params(train, max_layer_params, lambda: K.all_decoder_layer_ops(model, shard))
    comm_buffers = comm_buffer_bytes(model, shard, train)
    edp = expert_dp(train)
    ranks = []
    for r, row in enumerate(holder):
        dense = sum(stages[i].dense_params for i in row)
        expert = sum(stages[i].expert_params for i in row)
        states = state_bytes(dense, expert, train, edp, gathered_params=gathered)
        ranks.append(rank_memory(r, states, peak_activation_bytes[r], max_full_saved, comm_buffers))
    return MemoryResult(ranks=tuple(ranks), capacity_bytes=capacity_bytes)
