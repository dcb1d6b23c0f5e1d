"""Reference layers: the same weights, FLOPs and shapes as the operator graph, at every sharding."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")

from paraplan.cost.block import MATMUL_KINDS, weight_params  # noqa: E402
from paraplan.graph.layers import Shard  # noqa: E402
from paraplan.measure.hybrid.plan import block_ops  # noqa: E402
from paraplan.measure.layers import build_block  # noqa: E402
from paraplan.specs.model import ModelSpec  # noqa: E402
from paraplan.specs.presets import model_preset  # noqa: E402
from paraplan.specs.training import TrainingSpec  # noqa: E402

TINY = ModelSpec(
    name="tiny", num_layers=2, hidden_size=128, ffn_hidden_size=352, num_attention_heads=4,
    num_query_groups=2, vocab_size=1000,
)  # fmt: skip
MOE = model_preset("mixtral-8x7b").with_overrides(
    hidden_size=128, ffn_hidden_size=256, moe_ffn_hidden_size=256, num_attention_heads=8, num_query_groups=4,
    vocab_size=1000,
)  # fmt: skip
MLA = model_preset("deepseek-v3").with_overrides(
    hidden_size=128, ffn_hidden_size=256, moe_ffn_hidden_size=64, num_attention_heads=8, vocab_size=1000,
    num_experts=16, q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
    moe_shared_expert_intermediate_size=64,
)  # fmt: skip
GPT = model_preset("gpt3-175b").with_overrides(
    hidden_size=128, ffn_hidden_size=512, num_attention_heads=4, vocab_size=1000
)  # fmt: skip

CASES = [
    (TINY, dict(seq_length=64), ("dense", "embedding", "head")),
    (TINY, dict(seq_length=64, tensor_model_parallel_size=2, sequence_parallel=True), ("dense", "head")),
    (TINY, dict(seq_length=64, context_parallel_size=2), ("dense",)),
    (MOE, dict(seq_length=32, tensor_model_parallel_size=2, sequence_parallel=True, expert_model_parallel_size=4),
     ("moe",)),
    (MOE, dict(seq_length=32, expert_model_parallel_size=2, expert_tensor_parallel_size=2), ("moe",)),
    (MLA, dict(seq_length=32, tensor_model_parallel_size=2, expert_model_parallel_size=4), ("dense", "moe", "mtp")),
    (GPT, dict(seq_length=32, tensor_model_parallel_size=2), ("dense",)),
]  # fmt: skip


def _unfused(train: dict) -> TrainingSpec:
    """Unfused attention: its matmuls are visible to torch's FLOP counter (the CPU flash kernel is not)."""
    return TrainingSpec(attention_backend="unfused", **train)


@pytest.mark.parametrize(("model", "train", "kinds"), CASES)
def test_weights_and_flops_match_the_graph(model, train, kinds):
    from torch.utils.flop_counter import FlopCounterMode

    shard = Shard.of(_unfused(train))
    for kind in kinds:
        run = build_block(kind, model, shard)
        ops = block_ops(kind, model, shard)
        matrices = sum(p.numel() for p in run.module.parameters() if p.dim() >= 2)
        graph_params = sum(weight_params(op) for op in ops)
        if kind == "embedding":
            graph_params = run.module.table.numel()  # a lookup, no GEMM in the graph
        assert matrices == graph_params, kind
        with FlopCounterMode(display=False) as counter:
            out = run.forward()
        graph_flops = sum(op.flops for op in ops if op.kind in MATMUL_KINDS)
        assert counter.get_total_flops() == pytest.approx(graph_flops, rel=1e-6), kind
        expected = () if out.dim() == 0 else (shard.batch, shard.seq // shard.sp_div, model.hidden_size)
        assert tuple(out.shape) == expected


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_recompute_gives_the_same_gradients(recompute):
    shard = Shard.of(TrainingSpec(seq_length=64))
    ref = build_block("dense", TINY, shard, seed=3)
    run = build_block("dense", TINY, shard, seed=3, recompute=recompute)
    grads = []
    for block in (ref, run):
        out = block.forward()
        torch.autograd.backward(out, torch.ones_like(out))
        grads.append([p.grad.clone() for p in block.params])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


def test_bf16_and_cp_mask():
    from paraplan.measure.layers import RankShapes, causal_mask

    shard = Shard.of(TrainingSpec(seq_length=64, context_parallel_size=2))
    run = build_block("dense", TINY, shard, dtype="bf16")
    assert run.forward().dtype == torch.bfloat16
    mask = causal_mask(RankShapes.of(TINY, shard, cp_rank=0), torch.device("cpu"))
    assert mask.shape == (32, 64)
    assert mask.float().mean().item() == pytest.approx(0.5, abs=0.02)  # load-balanced halves
