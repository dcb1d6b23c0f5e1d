"""Activation bytes one layer keeps per in-flight micro-batch, from the tensors its operators save.

For the GPT layer this reproduces Korthikanti et al. 2022 exactly: s*b*h*(34 + 5*a*s/h) bytes without
parallelism or recompute; s*b*h*(10 + 24/t + 5*a*s/(h*t)) with tensor parallelism; divided by t
throughout with sequence parallelism; 34*s*b*h/t with selective recompute and sequence parallelism;
and only the layer input, 2*s*b*h, with full recompute.

Recompute modes: "none"; "selective", Megatron-LM's (the ops tagged selective, core attention, are recomputed);
"full" (only the layer input is kept); and "op", torchtitan's per-op selective checkpointing (`op_policy_saved_bytes`),
which is what "selective" means under torchtitan (`recompute_mode`).
"""

from __future__ import annotations

from collections.abc import Sequence

from paraplan.graph.backward import is_weightless_gemm
from paraplan.graph.ops import CommKind, Op, OpKind
from paraplan.specs.training import TrainingSpec


def recompute_mode(train: TrainingSpec) -> str:
    """The recompute mode the memory and cost models apply: torchtitan's selective AC with its default option
    `op` (`activation_checkpoint.selective_ac_option`, torchtitan@9dec370 config_manager.py) is per-op SAC."""
    if train.recompute_granularity == "selective" and train.framework == "torchtitan":
        return "op"
    return train.recompute_granularity


def _mm_widths(op: Op, forward: Sequence[Op]) -> list[int]:
    """The output widths of the torch `mm` calls a weight GEMM op stands for: torchtitan's Llama runs wq, wk and wv
    apart (the fused QKV split by the core attention's head counts) and w1 and w3 apart (an up-projection twice
    the down-projection's input is gate and up)."""
    assert op.gemm is not None
    n = op.gemm.n
    if op.name == "qkv":
        core = next((o.attention for o in forward if o.attention is not None), None)
        if core is not None and (core.heads + core.kv_heads) * core.head_dim_qk + core.kv_heads * core.head_dim_v == n:
            kv = core.kv_heads
            return [core.heads * core.head_dim_qk, kv * core.head_dim_qk, kv * core.head_dim_v]
    if op.name.endswith("_up"):
        down = next((o for o in forward if o.gemm is not None and o.name == op.name[:-3] + "_down"), None)
        if down is not None and down.gemm is not None and n == 2 * down.gemm.k:
            return [n // 2, n // 2]
    return [n]


def op_policy_saved_bytes(forward: Sequence[Op], layer_input_bytes: float, act_bytes: float) -> float:
    """torchtitan's per-op selective activation checkpointing (torchtitan@9dec370 parallelize_llama.py
    `_save_list` and `_get_custom_policy`): the block is checkpointed (its input kept) and inside it the outputs of
    the listed ops are kept, everything else recomputed: every `aten.mm` but each second one (counted per block in
    call order), scaled-dot-product attention (output and log-sum-exp), the TP reduce-scatter, and float8's
    amax (`abs`, `max`: scalars, not counted)."""
    kept = layer_input_bytes
    mm_count = 0
    for op in forward:
        if op.kind is OpKind.GEMM and op.gemm is not None and not is_weightless_gemm(op):
            for width in _mm_widths(op, forward):
                mm_count += 1
                if mm_count % 2:
                    kept += act_bytes * op.gemm.m * width * op.gemm.count
        elif op.attention is not None:
            a = op.attention
            kept += act_bytes * a.batch * a.seq_q * a.heads * a.head_dim_v + op.saved_bytes  # output, log-sum-exp
        elif op.comm is not None and op.comm.kind is CommKind.REDUCE_SCATTER:
            kept += op.comm.bytes / op.comm.group_size
    return kept


def recomputed_ops(forward: Sequence[Op], recompute: str) -> list[Op]:
    if recompute == "full":
        return list(forward)
    if recompute == "selective":
        return [op for op in forward if "selective" in op.tags]
    if recompute == "op":  # the ops whose outputs per-op SAC drops whole (GEMMs it keeps in part are not redone)
        return [op for op in forward if op.kind is OpKind.ELEMENTWISE or op.name == "attn_out"]
    return []


def saved_bytes(forward: Sequence[Op], recompute: str, layer_input_bytes: float, act_bytes: float = 2.0) -> float:
    """Bytes kept for backward. Under full recompute only the layer input (a checkpoint) is kept."""
    if recompute == "full":
        return layer_input_bytes
    if recompute == "op":
        return op_policy_saved_bytes(forward, layer_input_bytes, act_bytes)
    dropped = sum(op.saved_bytes for op in recomputed_ops(forward, recompute))
    return sum(op.saved_bytes for op in forward) - dropped
