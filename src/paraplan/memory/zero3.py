"""DeepSpeed ZeRO-3 on one GPU: what its partitioned states, its parameter coordinator and its gradient bucket hold.

From DeepSpeed's ZeRO-3 configuration defaults (DeepSpeed docs "ZeRO Optimizations for FP16 Training"; the
`zero_optimization` keys) and `deepspeed/runtime/zero/stage3.py` / `partitioned_param_coordinator.py`:
- the model's 16-bit parameters live as partitions (`param.ds_tensor`, 2 bytes per parameter over dp); the
  optimizer keeps the fp32 partition and Adam's two moments (`fp32_partitioned_groups_flat`, 12 bytes over dp);
  the reduced gradients go to a 16-bit partition buffer (`grad_partitions_flat_buffer`, 2 bytes over dp);
- gradients leave the backward through one contiguous bucket of `reduce_bucket_size` elements (default 5e8) in the
  model dtype (`contiguous_gradients`, on by default), allocated once and held for the run;
- a module's parameters are gathered when its hooks fire and released after it unless used again within
  `stage3_max_reuse_distance` parameters (default 1e9); the coordinator prefetches `stage3_prefetch_bucket_size`
  parameters ahead (default 5e7) and keeps at most `stage3_max_live_parameters` (1e9) materialised.
  Parameters under `stage3_param_persistence_threshold` (1e5 elements: norms, biases) stay whole: not counted.
"""

from __future__ import annotations

from collections.abc import Iterable

ZERO3_REDUCE_BUCKET_PARAMS = 5e8  # `reduce_bucket_size`
ZERO3_MAX_REUSE_DISTANCE_PARAMS = 1e9  # `stage3_max_reuse_distance`
ZERO3_MAX_LIVE_PARAMS = 1e9  # `stage3_max_live_parameters`
ZERO3_PREFETCH_PARAMS = 5e7  # `stage3_prefetch_bucket_size`
ZERO3_PARAM_BYTES = 2  # the 16-bit parameter partition
ZERO3_GRAD_BYTES = 2  # the 16-bit gradient partition and bucket
ZERO3_OPTIMIZER_BYTES = 12  # fp32 partition + Adam m and v


def kept_tail_params(weights_last_first: Iterable[int]) -> float:
    """Parameters still gathered when the forward ends (at the loss, the step's activation peak): walking back from
    the last module (the LM head), a module's next use is its backward, after the forward and backward of every
    module behind it: a reuse distance of twice their parameters. Those within the reuse distance stay; the first
    beyond it and every module before it were released (their distance only grows). The last module always stays
    (distance 0). `weights_last_first`: the parameters of each module with weights, from the last backwards."""
    kept = after = 0.0
    for params in weights_last_first:
        if 2 * after > ZERO3_MAX_REUSE_DISTANCE_PARAMS:
            break
        kept += params
        after += params
    return kept


def live_params(kept_tail: float, largest_module: float) -> float:
    """Parameters gathered at the peak: the kept tail and the prefetch bucket ahead of the backward, at most the live
    limit (a module larger than it is still gathered whole)."""
    return min(kept_tail, max(ZERO3_MAX_LIVE_PARAMS, largest_module)) + ZERO3_PREFETCH_PARAMS


def zero3_state_bytes(shard_params: float, gathered_params: float, grad_bytes: int, on_gpu: float) -> dict[str, float]:
    """Weights, gradients and optimizer states of one GPU under DeepSpeed ZeRO-3 (module docstring). `grad_bytes`:
    the model dtype's (4 in fp32 training); `on_gpu`: the share of the optimizer states not offloaded."""
    param_bytes = 4 if grad_bytes == 4 else ZERO3_PARAM_BYTES
    return {
        "weights": param_bytes * (shard_params + gathered_params),
        "gradients": grad_bytes * (shard_params + ZERO3_REDUCE_BUCKET_PARAMS),
        "optimizer": (ZERO3_OPTIMIZER_BYTES - (4 if param_bytes == 4 else 0)) * shard_params * on_gpu,
    }
