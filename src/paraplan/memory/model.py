"""Memory per GPU, by part, to the byte.

Weights, gradients and optimizer states under each sharding scheme (Rajbhandari et al. 2020, ZeRO;
Megatron-LM's distributed optimizer keeps fp32 main grads and shards the 12 bytes/param of fp32 master
weights and Adam moments over the data-parallel ranks), activations from the tensors each operator saves
times the micro-batches in flight, and fixed framework overheads.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.specs.training import TrainingSpec

GIB = 2**30
WEIGHT_BYTES = 2  # bf16/fp16 model weights
MASTER_AND_ADAM_BYTES = 12  # fp32 master weights + Adam m and v
FP32_WEIGHT_BYTES = 4  # plain fp32 training: the weights are the master copy
ADAM_BYTES = 8  # fp32 Adam m and v
CUDA_CONTEXT_BYTES = 0.75 * GIB  # CUDA context, cuBLAS/cuDNN workspaces, NCCL (nvidia-smi on an idle job)
FRAGMENTATION = 0.05  # caching-allocator fragmentation on activations (PyTorch memory stats, typical)
HEADROOM = 0.03  # margin kept free of the HBM capacity for the FITS verdict


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
