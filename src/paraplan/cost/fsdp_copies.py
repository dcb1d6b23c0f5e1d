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

Under torchao's float8 all-gather (`TrainingSpec.fsdp_float8_all_gather`) the copy-out moves the float8 linears'
weights in one byte (`foreach_all_gather_copy_out` splits the byte buffer into each parameter's
`all_gather_outputs`, which `fsdp_post_all_gather` wraps as the `Float8TrainingTensor` as they are), and each
all-gather first casts those weights' fp32 shards to float8 on the copy-in stream (`float8_shard_casts_s`).

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


def fsdp2_copies(
    params: float, train: TrainingSpec, gpu: GpuSpec, cal: Calibration, units: int, float8_params: float = 0.0
) -> Fsdp2Copies:
    """The copies of `units` FSDP2 units holding `params` parameters on this GPU (its tensor-parallel shard), of
    them `float8_params` float8 linears' weights (`TrainingSpec.fsdp_gather_bytes`); none for other frameworks, or
    without sharded parameters or gradients."""
    if train.framework not in FSDP2_FRAMEWORKS or params <= 0 or not (train.shards_params or train.zero_stage == 2):
        return NO_COPIES
    bytes_per_s = gpu.hbm_bytes_per_s * cal.memory_efficiency
    launches = max(1, units) * cal.kernel_launch_s
    copy_out = 2 * train.fsdp_gather_bytes(params, float8_params) / bytes_per_s + launches  # read buffer, write params
    copy_in = (GRAD_BYTES + train.grad_reduce_bytes) * params / bytes_per_s + launches
    return Fsdp2Copies(copy_out, copy_in)


FLOAT8_SHARD_CAST_BYTES = 4 + 4 + 4 + 4 + 4 + 1
"""Bytes moved per element by torchao's cast of an fp32 shard to float8 in `fsdp_pre_all_gather`, eager in FSDP2's
hook: `hp_tensor_and_scale_to_float8` -> `_ToFloat8ConstrFunc.forward` computes `tensor.to(float32) * scale` (reads the
fp32 shard, writes fp32), `to_fp8_saturated` clamps it (reads and writes fp32) and casts it (reads fp32, writes one
byte) (torchao 0.18 float8/float8_training_tensor.py, float8_utils.py)."""


def float8_shard_casts_s(float8_params: float, train: TrainingSpec, gpu: GpuSpec, cal: Calibration) -> float:
    """One all-gather's casts of the float8 linears' shards (`float8_params` weights on this GPU, 1/(dp x cp) of them
    each rank's) under `TrainingSpec.fsdp_float8_all_gather`, with the scales precomputed after the optimizer step
    (torchtitan's `precompute_float8_dynamic_scale_for_fsdp`: no amax here): `fsdp_pre_all_gather` runs them on the
    all-gather copy-in stream (`foreach_all_gather` -> `_get_param_all_gather_inputs`), before the all-gather that
    waits for that stream. A memory-bound pass (`FLOAT8_SHARD_CAST_BYTES`); 0 without float8 all-gather."""
    world = train.dp * train.cp
    if not train.fsdp_float8_all_gather or float8_params <= 0 or world <= 1:
        return 0.0
    return FLOAT8_SHARD_CAST_BYTES * float8_params / world / (gpu.hbm_bytes_per_s * cal.memory_efficiency)


FLOAT8_AMAX_BYTES = 4
"""Bytes read per element by `precompute_float8_dynamic_scale_for_fsdp`'s amax: `torch._foreach_norm(weights,
ord=inf)` over the fp32 shards (torchao 0.18 float8/fsdp_utils.py)."""


def float8_scale_precompute_s(float8_params: float, train: TrainingSpec, gpu: GpuSpec, cal: Calibration) -> float:
    """torchtitan's `precompute_float8_dynamic_scale_for_fsdp` after each optimizer step under float8 all-gather: one
    amax over every float8 weight's fp32 shard (`float8_params` on this GPU, 1/(dp x cp) of them each rank's), a
    memory-bound pass; the scales' one all-reduce of a few hundred floats (`torch.clamp` on the stacked `Partial`
    amaxes) is left out (latency only). 0 without float8 all-gather."""
    world = train.dp * train.cp
    if not train.fsdp_float8_all_gather or float8_params <= 0:
        return 0.0
    return FLOAT8_AMAX_BYTES * float8_params / world / (gpu.hbm_bytes_per_s * cal.memory_efficiency)
