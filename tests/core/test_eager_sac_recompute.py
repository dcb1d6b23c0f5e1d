"""The recompute working set of torchtitan's per-op SAC, eager (`memory.activations.op_policy_recompute_bytes`):
torch's non-reentrant checkpoint reruns the block's forward at the first unpack of its backward and holds every
tensor the eager ops save, while the policy's outputs the rerun never reaches (w2's, and under TP its
reduce-scatter's: the rerun stops at w2's saved input) stay cached. Measured by benchmarks/compile_saved.py on a
scaled Llama-3 block (h=512, one KV head): 49.047 B per token x hidden saved eagerly without AC, 37.516 held by the
per-op SAC recompute. Compiled and Megatron paths keep their figures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paraplan.api import memory
from paraplan.graph.layers import Shard, decoder_layer_ops
from paraplan.memory.activations import op_policy_recompute_bytes, op_policy_saved_bytes
from paraplan.memory.blocks import block_memory
from paraplan.specs.presets import model_preset

MODEL = model_preset("llama3.1-8b")
SCALED = replace(
    MODEL, hidden_size=512, num_attention_heads=4, num_query_groups=1, ffn_hidden_size=1792, kv_channels=128
)
"""The benchmark's block: Llama 3.1 8B's ratios at h=512 (4 heads of 128, one KV head: repeat_kv is a view)."""


def _ops(model=MODEL, batch: int = 1, seq: int = 8192, tp: int = 1, fused: bool = False):
    shard = Shard(
        batch=batch, seq=seq, seq_full=seq, tp=tp, sp=tp > 1, cp=1, ep=1, etp=1, precision="bf16", flash=True,
        fused=fused,
    )  # fmt: skip
    return decoder_layer_ops(model, shard, moe=False)


def _eager_set(ops) -> float:
    return sum(op.saved_bytes if op.eager_saved_bytes is None else op.eager_saved_bytes for op in ops)


def test_eager_ops_save_what_the_benchmark_measured() -> None:
    """Eager RMSNorm keeps an fp32 copy of its input, the fp32 rstd and the normalised 16-bit tensor; eager SwiGLU
    keeps silu's output beside gate and up: 49.047 B per token x hidden without AC (the block input aside)."""
    batch, seq = 2, 2048
    ops = _ops(SCALED, batch, seq)
    assert _eager_set(ops) / (batch * seq * SCALED.hidden_size) == pytest.approx(49.047, abs=1e-3)
    fused = _ops(SCALED, batch, seq, fused=True)
    assert all(op.eager_saved_bytes is None for op in fused)  # compiled / fused kernels: the graph's own set


def test_eager_recompute_holds_every_saved_tensor_and_w2s_cached_output() -> None:
    batch, seq = 2, 2048
    unit = batch * seq * SCALED.hidden_size
    ops, block_input = _ops(SCALED, batch, seq), 2 * unit
    kept = op_policy_saved_bytes(ops, block_input, 2) - block_input
    w2_output = 2 * unit
    working = op_policy_recompute_bytes(ops, block_input, 2)
    assert working == pytest.approx(_eager_set(ops) + w2_output - kept)
    assert working / unit == pytest.approx(37.516, abs=1e-3)  # the benchmark's eager per-op SAC recompute


def test_eager_recompute_under_tp_keeps_the_reduce_scatter_cached_too() -> None:
    tokens, h, tp = 8192, MODEL.hidden_size, 8
    ops, block_input = _ops(MODEL, 1, tokens, tp), 2 * tokens * h / tp
    kept = op_policy_saved_bytes(ops, block_input, 2) - block_input
    never_taken = 2 * tokens * h + 2 * tokens * h / tp  # w2's partial output and its reduce-scatter's
    assert op_policy_recompute_bytes(ops, block_input, 2) == pytest.approx(_eager_set(ops) + never_taken - kept)


@pytest.mark.parametrize("tp", [1, 8])
def test_compiled_recompute_is_the_dropped_outputs(tp: int) -> None:
    """Compiled: unchanged, the no-recompute set less what the partitioner keeps."""
    tokens = 8192
    ops, block_input = _ops(MODEL, 1, tokens, tp, fused=True), 2 * tokens * MODEL.hidden_size / tp
    m = block_memory(ops, "op", block_input, 2, compiled=True)
    assert m.op_recompute_bytes == pytest.approx(m.full_saved_bytes - m.saved_bytes)


def test_eager_saved_bytes_enter_no_other_mode() -> None:
    """Megatron's modes and torchtitan's full and no AC read the graph's saved bytes only."""
    ops = _ops(MODEL, 1, 4096)
    plain = [replace(op, eager_saved_bytes=None) for op in ops]
    block_input = 2 * 4096 * MODEL.hidden_size
    for mode in ("none", "full", "selective", "selective:layernorm,mlp"):
        assert block_memory(ops, mode, block_input, 2) == block_memory(plain, mode, block_input, 2)


def test_projection_takes_the_blocks_eager_recompute() -> None:
    """torchtitan 8B, FSDP, per-op SAC, eager: the recompute working set is one block's rule."""
    common = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=8, fsdp=True, zero_stage=3, mbs=2, gbs=16)
    common |= dict(seq=8192, framework="torchtitan", recompute_granularity="selective", kernel_fusion=False)
    part = memory(**common).ranks[0].parts["recompute_working_set"]
    ops, block_input = _ops(MODEL, 2, 8192), 2 * 2 * 8192 * MODEL.hidden_size
    assert part == pytest.approx(op_policy_recompute_bytes(ops, block_input, 2))
