"""torch FSDP2 (`fully_shard`, as torchtitan applies it): the communication buffers beside the sharded states and the
gathered units of `memory.model.state_bytes`, from torch 2.13's torch/distributed/fsdp/_fully_shard/.

The all-gather of a unit runs on FSDP's own streams: `FSDPParamGroup.unshard` passes
`comm_ctx.get_all_gather_streams(...)` (the `all_gather_copy_in_stream` and `all_gather_stream` of
`FSDPCommContext.lazy_init`, one set per root) in forward and in backward whenever the unshard is synchronous
(torchtitan leaves `unshard_async_op` False), and `_fsdp_collectives.foreach_all_gather` allocates, under
`device_handle.stream(all_gather_copy_in_stream)`, the flat 16-bit copy of the rank's shard (`_get_param_all_gather_
inputs`: `flat_foreach_copy_input`, under mixed precision) and the output of world x shard elements
(`all_gather_output = all_gather_comm.allocate(...)`). The unsharded parameters are copied out of it on the compute
stream (`foreach_all_gather_copy_out` -> `FSDPParam.alloc_all_gather_outputs`): those are `state_bytes`' gathered
units. PyTorch's caching allocator serves a request only from blocks of the requesting stream (c10/cuda/
CUDACachingAllocator.cpp: `BlockComparatorSize` orders by stream first, `get_free_block` rejects a block of another
stream) and keeps freed blocks until `empty_cache()`, so the copy-in stream's blocks stay reserved at their
high-water mark, idle whenever no all-gather is in flight ("avoid inter-stream fragmentation from using separate
unshard streams", `FSDPParamGroup.__init__` on `unshard_async_op`).
"""

from __future__ import annotations

from collections.abc import Sequence

from paraplan.specs.training import TrainingSpec


def all_gather_pool_bytes(
    train: TrainingSpec, chunk_edge_params: Sequence[float], max_layer_params: float, layer_float8_params: float = 0.0
) -> float:
    """Bytes the all-gather copy-in stream's pool holds (reserved) on a rank of torchtitan's FSDP2, whose model chunks
    have `chunk_edge_params` outside the decoder layers (the root unit's). torchtitan shards each pipeline chunk as
    its own root (`apply_fsdp` per model part), each root's `FSDPCommContext.lazy_init` creates its own streams, and
    `torch.cuda.Stream` draws them round-robin from 32 per priority (c10/cuda/CUDAStream.cpp `getStreamFromPool`):
    one pool per chunk.

    Its high-water mark is set in forward (the first micro-batch's under PP, when `reshard_after_forward` is off and
    nothing is gathered again): with implicit prefetching `FSDPParamGroup.wait_for_unshard` keeps the previous
    unit's all-gather result (`comm_ctx.all_gather_state`) until the next unit's copy-out, and the next unit's
    `unshard` allocates its input and output before that, so two units' outputs and one input are live at once;
    the root unit, first in forward (its pre-forward hook runs at the model's), with the first block. In backward
    the wait frees the result right after the copy-out, one prefetched unit at a time (`_backward_prefetch`): within
    the forward's mark (and counted here, not among the backward's allocated parts, whose peak it can raise by one
    block's 16-bit output). Per chunk: max(root, layer) + layer x (1 + 1/world) elements, or the root's output and
    input alone if larger, in the 16-bit gather dtype
    (`TrainingSpec.param_gather_bytes`; no copied input without mixed precision, where the shard is the input). 0
    outside torchtitan's FSDP, or with one rank per shard group (`unshard` then all-gathers nothing).

    Under torchao's float8 all-gather (`TrainingSpec.fsdp_float8_all_gather`) a layer's `layer_float8_params`
    travel in one byte: `_get_param_all_gather_inputs` takes each float8 weight's `fsdp_pre_all_gather` output (its
    shard cast to float8, on the copy-in stream) as its input, the others' 16-bit copy as before, and with mixed
    dtypes `foreach_all_gather` gathers them all as bytes (`_get_all_gather_input_metadatas`: uint8), so a unit's
    output and input are its bytes (`TrainingSpec.fsdp_gather_bytes`). Left out: the eager cast's two fp32
    temporaries of one weight's shard (`tensor.to(float32) * scale`, then the clamp of `to_fp8_saturated`), freed
    before the output is allocated."""
    world = train.dp * train.cp  # torchtitan's FSDP mesh: dp_shard x cp
    if not train.shards_params or train.framework != "torchtitan" or world <= 1 or max_layer_params <= 0:
        return 0.0
    copied_input = 0.0 if train.precision == "fp32" else 1.0 / world
    if train.fsdp_float8_all_gather:  # in bytes (torchtitan's root unit has no float8 linear: 16-bit)
        unit_bytes = train.fsdp_gather_bytes(max_layer_params, layer_float8_params)
        per_chunk_bytes = (
            max(edge_bytes * (1.0 + copied_input), max(edge_bytes, unit_bytes) + unit_bytes * (1.0 + copied_input))
            for edge_bytes in (train.param_gather_bytes * edge for edge in chunk_edge_params)
        )
        return float(sum(per_chunk_bytes))
    unit = max_layer_params
    per_chunk = (
        max(edge * (1.0 + copied_input), max(edge, unit) + unit * (1.0 + copied_input)) for edge in chunk_edge_params
    )
    return float(train.param_gather_bytes * sum(per_chunk))


def backward_grad_bytes(
    train: TrainingSpec, gathered_params: float, late_params: float, layer_params: float, param_bytes: int
) -> float:
    """The gradients beyond the sharded ones live in a block's backward under torchtitan's FSDP2 without PP, whose
    gathered parameters are the root unit's and the block's (`gathered_params`, `memory.model.root_unit_gathered`):
    - autograd writes their gradients, `param_bytes` each (the compute dtype), into `unsharded_param.grad`; a block's
      leave in its `post_backward` (`RegisterPostBackwardFunction` on the block's inputs), the root's only in the
      final callback (`FSDPState._root_post_backward_final_callback`: the root's input, token ids, needs no
      gradient), and the embedding's (`late_params`) comes from the backward's last node, after every block's;
    - a block's `post_backward` copies its gradients into a new reduce-scatter input of the unit's size in the reduce
      dtype (`_fsdp_collectives.foreach_reduce`: `reduce_scatter_comm.allocate` on the compute stream, then
      `foreach_reduce_scatter_copy_in`'s `chunk_cat`; fp32 under torchtitan's `mixed_precision_reduce`) and keeps it
      in `comm_ctx.reduce_scatter_states` until the next block's `post_backward` frees it (at most
      `reduce_scatter_max_input_buffers`, 1 by default, `FSDPParamGroup.post_backward`): live through the next
      block's backward. Counted whole beside every saved activation at the backward's moment (`memory.model.
      rank_memory`): an upper bound, by at most the saved tensors of the block whose backward comes first;
    - the reduce-scatter output (the unit's shard in the reduce dtype) becomes the sharded gradient (`foreach_reduce`
      `as_strided` views of `reduce_output`), already `state_bytes`' 4 bytes per sharded parameter."""
    return param_bytes * (gathered_params - late_params) + train.grad_reduce_bytes * layer_params
