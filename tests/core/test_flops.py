"""FLOP accounting equals the closed forms users know."""

import pytest

import paraplan
from paraplan.graph.layers import padded_vocab
from paraplan.projection import model_flops_per_sequence
from paraplan.specs.model import ModelSpec

GPT = ModelSpec(
    name="gpt-test", num_layers=24, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=16,
    vocab_size=51200, activation="gelu", norm="layernorm", position="learned", dropout=True,
)  # fmt: skip


def megatron_72(B: int, s: int, l: int, h: int, V: int) -> float:  # noqa: E741 - the paper's names
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))


def megatron_96(B: int, s: int, l: int, h: int, V: int) -> float:  # noqa: E741 - the paper's names
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


@pytest.mark.parametrize("backend", ["flash", "unfused"])
def test_gpt_model_flops_match_megatron_72(backend: str) -> None:
    got = model_flops_per_sequence(GPT, 2048, backend) * 64
    want = megatron_72(64, 2048, GPT.num_layers, GPT.hidden_size, 51200)
    assert got == pytest.approx(want, rel=1e-3)


def test_gpt_hardware_flops_with_full_recompute_match_megatron_96() -> None:
    r = paraplan.project(GPT, "a100-sxm4-80gb", 8, tp=2, pp=2, dp=2, mbs=2, gbs=64, seq=2048,
                         recompute="full", attention_backend="unfused")  # fmt: skip
    want = megatron_96(64, 2048, GPT.num_layers, GPT.hidden_size, 51200)
    assert r.hardware_flops_per_step == pytest.approx(want, rel=1e-3)
    assert r.model_flops_per_step == pytest.approx(megatron_72(64, 2048, 24, 2048, 51200), rel=1e-3)
    assert r.hfu > r.mfu


@pytest.mark.parametrize("preset", ["llama3.1-8b", "llama3.1-70b", "mixtral-8x7b", "qwen3-30b-a3b"])
def test_six_n_plus_attention(preset: str) -> None:
    """6 * (matmul parameters active per token) + 12 * layers * seq * (attention width) per token."""
    m = paraplan.project(preset, "h100-sxm5-80gb", 8, tp=4, gbs=8, seq=4096, sp=True, ep=1).model
    h, d, s = m.hidden_size, m.head_dim, 4096
    attn_params = h * (m.num_attention_heads + 2 * m.kv_groups) * d + m.num_attention_heads * d * h
    ffn = m.expert_ffn if m.is_moe else m.ffn_hidden_size
    mlp_params = 3 * h * ffn * (m.moe_router_topk if m.is_moe else 1) + (h * m.num_experts if m.is_moe else 0)
    n_active = m.num_layers * (attn_params + mlp_params) + h * padded_vocab(m, 1)
    attention = 12 * m.num_layers * s * m.num_attention_heads * d  # QK^T and AV, forward + backward
    per_token = 6 * n_active + attention
    assert model_flops_per_sequence(m, s) / s == pytest.approx(per_token, rel=1e-3)
