"""The time of quantised primary weights under megatron-core's distributed optimizer (`--fp8-param-gather`,
`TrainingSpec.gathers_quantized_weights`).

megatron-core 0.16 with Transformer Engine 2.9: after its step the distributed optimizer casts the fp32 main params
of its shard straight into the quantised weights' own bytes (distrib_optimizer.py `_copy_main_params_to_model_params`
-> fp8_utils.py `quantize_param_shard` -> TE tensor/utils.py `cast_master_weights_to_fp8`), all-reduces the amaxes
(MAX over the data-parallel group, the one the optimizer shards over) so every rank's scales agree, and resets the
weights' transposes; the param all-gather then sends the one-byte data (a uint8 buffer: `TrainingSpec.
one_byte_gather_bytes`). In the next forward the TE linears take the quantised weight as it is (module/base.py
`get_weight_workspace` returns a QuantizedTensor after `update_usage`): no per-step cast of the whole weight, only the
column-wise copy remade from the row-wise data where it is a copy of its own (Hopper per-tensor FP8, blockwise FP8
on every GPU; `cost.quantize.weight_transpose_bytes`). megatron-core's `post_all_gather_processing` would make it
right after the gather, but TE 2.9 has no `post_all_gather_processing`, so it is a no-op and the first micro-batch's
forward makes it (`update_usage(columnwise_usage=True)`), once a step.
"""

from __future__ import annotations

from paraplan.cost.calibration import Calibration
from paraplan.cost.collectives import timed_collective
from paraplan.cost.comm import GroupPlacement
from paraplan.cost.compute import primary_weight_cast_s
from paraplan.cost.quantize import primary_weight_amax_bytes, recipe_of
from paraplan.graph.ops import CommAxis, CommKind
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec


def optimizer_writes_quantized_weights(train: TrainingSpec) -> bool:
    """Whether the precision-aware optimizer writes the quantised weights itself, so the distributed optimizer casts
    nothing (megatron-core 0.16 optimizer_config.py `use_precision_aware_optimizer_no_fp8_or_ds_fp8`: main params
    not fp32, delayed scaling, or CPU offload; distrib_optimizer.py `_copy_main_params_to_model_params` then returns
    first, and TE's FusedAdam writes FP8 params in its update kernel, `multi_tensor_adam_fp8`: the bytes of the step,
    `cost.offload.adam_bytes_per_param`)."""
    return train.use_precision_aware_optimizer and (
        train.main_params_dtype != "fp32" or train.precision == "fp8" or train.optimizer_cpu_offload
    )


def quantized_weights_step_s(
    quantized: tuple[float, float],
    train: TrainingSpec,
    edp: int,
    system: SystemSpec,
    cal: Calibration,
    groups: tuple[GroupPlacement, GroupPlacement],
) -> float:
    """What the optimizer step adds for a rank's (dense, expert) quantised primary weights (`quantized`, weight
    elements on this GPU): the cast of its shard of them (1/(dp x cp) of the dense ones, 1/edp of the experts', as
    the distributed optimizer shards them) and the amax all-reduce of each sub-optimizer (the dense one's over `groups`
    [0], the experts' over `groups`[1]; megatron-core's ChainedOptimizer steps them in turn). 0 without
    `gathers_quantized_weights`, or where the optimizer writes them (`optimizer_writes_quantized_weights`)."""
    recipe = recipe_of(train.precision)
    if not train.gathers_quantized_weights or recipe is None or optimizer_writes_quantized_weights(train):
        return 0.0
    dense, expert = quantized
    seconds = primary_weight_cast_s(train.precision, dense / (train.dp * train.cp) + expert / edp, system.gpu, cal)
    for elements, group in zip(quantized, groups, strict=True):
        if elements > 0:
            nbytes = primary_weight_amax_bytes(recipe, elements)
            seconds += timed_collective(CommKind.ALL_REDUCE, nbytes, group, system, cal, axis=CommAxis.DP)[0]
    return seconds


__all__ = ["optimizer_writes_quantized_weights", "quantized_weights_step_s"]
