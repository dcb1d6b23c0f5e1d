"""torchtitan's per-op SAC under torch.compile (issue 33 item 2): AOTAutograd's partitioner saves only the outputs
the policy keeps that a backward reads, so the output projection's output (and under TP its reduce-scatter's), which
only goes into the residual add, is not saved (`memory.activations.op_policy_saved_bytes`); measured on a scaled
Llama-3 block by benchmarks/compile_saved.py: 13.53 B per token x hidden eager, 11.53 compiled, the block input
aside."""

from __future__ import annotations

import pytest

from paraplan.api import memory
from paraplan.graph.layers import Shard, decoder_layer_ops
from paraplan.memory.activations import saved_bytes
from paraplan.specs.presets import model_preset
from paraplan.validate.measured import _stated_compile, read_rows, run_from_row

MODEL = model_preset("llama3.1-8b")


def _ops(tokens: int, tp: int = 1):
    shard = Shard(
        batch=1, seq=tokens, seq_full=tokens, tp=tp, sp=tp > 1, cp=1, ep=1, etp=1, precision="bf16", flash=True
    )
    return decoder_layer_ops(MODEL, shard, moe=False)


def test_compiled_block_drops_the_output_projection_it_never_reads() -> None:
    tokens, h = 8192, MODEL.hidden_size
    ops, block_input = _ops(tokens), 2 * tokens * h
    eager = saved_bytes(ops, "op", block_input, 2)
    compiled = saved_bytes(ops, "op", block_input, 2, compiled=True)
    assert eager - compiled == pytest.approx(2 * tokens * h)  # w2's output, h wide, 16-bit
    assert saved_bytes(ops, "op", block_input, 2, compiled=False) == eager  # the eager path is the default


def test_compiled_block_under_tp_drops_the_reduce_scatters_too() -> None:
    """Under TP with SP: w2's partial output (the whole sequence, h wide) and both reduce-scatters' outputs (the
    sequence shard, h wide) feed only the residual adds; wo is the policy's second mm, dropped in both."""
    tokens, h, tp = 8192, MODEL.hidden_size, 8
    ops, block_input = _ops(tokens, tp), 2 * tokens * h / tp
    eager = saved_bytes(ops, "op", block_input, 2)
    compiled = saved_bytes(ops, "op", block_input, 2, compiled=True)
    assert eager - compiled == pytest.approx(2 * tokens * h + 2 * (2 * tokens * h / tp))


def test_compile_changes_only_the_per_op_policy() -> None:
    ops, block_input = _ops(4096), 2 * 4096 * MODEL.hidden_size
    for mode in ("none", "full", "selective"):
        assert saved_bytes(ops, mode, block_input, 2, compiled=True) == saved_bytes(ops, mode, block_input, 2)


def test_torchtitan_projection_follows_its_compile_flag() -> None:
    """kernel_fusion is torchtitan's compile flag (`formats.torchtitan._compiled`): 32 blocks each keep one
    h-wide 16-bit tensor less compiled."""
    common = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=8, fsdp=True, zero_stage=3, mbs=2, gbs=16)
    common |= dict(seq=8192, framework="torchtitan", recompute_granularity="selective")
    eager = memory(**common, kernel_fusion=False).ranks[0].parts["activations"]
    compiled = memory(**common, kernel_fusion=True).ranks[0].parts["activations"]
    assert eager - compiled == pytest.approx(MODEL.num_layers * 2 * 2 * 8192 * MODEL.hidden_size)


def test_rows_read_a_stated_techniques_torch_compile(public_csv) -> None:
    rows = {r["id"]: r for r in read_rows(public_csv)}
    assert run_from_row(rows["p1803"]).train.kernel_fusion is False  # technique 'FSDP'
    assert run_from_row(rows["p1804"]).train.kernel_fusion is True  # technique 'FSDP + torch.compile'
    assert _stated_compile({"notes": "technique 'FSDP'"}, "megatron-lm") is None  # Megatron's fusions are not compile
    assert _stated_compile({"notes": "no technique listed"}, "torchtitan") is None
