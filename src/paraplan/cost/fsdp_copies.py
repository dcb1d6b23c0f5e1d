"""The copies torch FSDP2 (`fully_shard`) runs on the compute stream beside its collectives.

FSDP2 gathers a unit's parameters into one flat buffer and reduce-scatters its gradients from another, so each
collective has a memory pass on the stream that computes (torch 2.13 `distributed/fsdp/_fully_shard`):
- after every all-gather, `FSDPParamGroup.wait_for_unshard` -> `foreach_all_gather_copy_out` splits the gathered
  buffer into the unsharded parameters (`torch.split_with_sizes_copy`, one kernel a unit) on the current stream:
  it reads and writes the unit's parameters in their all-gather dtype;
- before every reduce-scatter, `foreach_reduce` -> `foreach_reduce_scatter_copy_in` concatenates the unit's
  unsharded gradients (in the parameter dtype) into the reduce-scatter input (in the reduce dtype: fp32 under
  torchtitan's default `mixed_precision_reduce`) with `torch.ops.fsdp.chunk_cat`, one kernel a unit, on the
  current stream too; only the collective itself runs on the reduce-scatter stream.
The all-gather's copy-in (the local shard, 1/dp of the unit) runs on the all-gather stream.

FSDP1 (llm-foundry's Composer) gathers into the flat parameter the module's parameters are views of and reduces
its flat gradient in place (no copy on the compute stream); Megatron-FSDP's buckets are views too, and DeepSpeed
ZeRO-3 copies gradients into its bucket on its reduce stream: those frameworks have none of these passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.calibration import Calibration
from paraplan.specs.system import GpuSpec
from paraplan.specs.training import TrainingSpec

FSDP2_FRAMEWORKS = frozenset({"torchtitan"})
"""Frameworks whose sharded data parallelism is torch FSDP2 (torchtitan, and the torch FSDP trainers that map to
it: `specs.frameworks.FAMILY_PATTERNS`)."""

GRAD_BYTES = 2
"""Bytes of an unsharded gradient element before the reduce: FSDP2 computes gradients in the parameter dtype
(bf16 under mixed precision)."""


@dataclass(frozen=True, slots=True)
class Fsdp2Copies:
    """One collective's compute-stream copies over a chunk's units, in seconds."""

    copy_out_s: float  # after one all-gather of every unit
    copy_in_s: float  # before one reduce-scatter of every unit


NO_COPIES = Fsdp2Copies(0.0, 0.0)
"""Outside FSDP2 sharding: one shared value, so the projection's hot path builds nothing for it."""


def fsdp2_copies(params: float, train: TrainingSpec, gpu: GpuSpec, cal: Calibration, units: int) -> Fsdp2Copies:
    """The copies of `units` FSDP2 units holding `params` parameters on this GPU (its tensor-parallel shard);
    none for other frameworks, or without sharded parameters or gradients."""
    if train.framework not in FSDP2_FRAMEWORKS or params <= 0 or not (train.shards_params or train.zero_stage == 2):
        return NO_COPIES
    bytes_per_s = gpu.hbm_bytes_per_s * cal.memory_efficiency
    launches = max(1, units) * cal.kernel_launch_s
    copy_out = 2 * train.param_gather_bytes * params / bytes_per_s + launches  # read the buffer, write the params
    copy_in = (GRAD_BYTES + train.grad_reduce_bytes) * params / bytes_per_s + launches
    return Fsdp2Copies(copy_out, copy_in)
