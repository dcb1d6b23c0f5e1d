"""The 2026 presets' parameter counts: against the published figures where the sources give them (within 1%, or the
figure's own rounding where it is only a rounded class), and term by term against an independent count from the
providers' fields (../shared/data/model-configs/), so a wrong term fails even where the published figure is coarse."""

from __future__ import annotations

import pytest

from paraplan.graph.params import model_params
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import model_preset


def _attention(m: ModelSpec) -> int:
    h = m.hidden_size
    if m.is_mla:  # q_a, q_b, kv_a (latent + rope key), kv_b (k nope + v), o
        q = h * m.q_lora_rank + m.q_lora_rank * m.num_attention_heads * m.qk_head_dim if m.q_lora_rank else 0
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim)
        kv += m.kv_lora_rank * m.num_attention_heads * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + m.num_attention_heads * m.v_head_dim * h
    q_width, kv_width = m.num_attention_heads * m.head_dim, m.kv_groups * m.head_dim
    gate = q_width if m.attention_output_gate else 0
    return h * (q_width + gate + 2 * kv_width) + q_width * h


def _mlp(m: ModelSpec, width: int) -> int:
    return (3 if m.gated_mlp else 2) * m.hidden_size * width


def _moe(m: ModelSpec) -> tuple[int, int]:
    """(total, active) of one MoE block: routed experts, shared expert, router."""
    expert, shared = _mlp(m, m.expert_ffn), _mlp(m, m.moe_shared_expert_intermediate_size)
    router = m.hidden_size * m.num_experts
    return m.num_experts * expert + shared + router, m.moe_router_topk * expert + shared + router


def _mamba(m: ModelSpec) -> int:
    """in_proj [z, x, B, C, dt], out_proj, conv1d (weights and bias), A, D, dt bias, gated norm, pre-norm."""
    inner, groups_state = m.mamba_inner, m.mamba_num_groups * m.mamba_state_dim
    in_proj = m.hidden_size * (2 * inner + 2 * groups_state + m.mamba_heads)
    conv = (inner + 2 * groups_state) * (m.mamba_conv_kernel + 1)
    return in_proj + inner * m.hidden_size + conv + 3 * m.mamba_heads + inner + m.hidden_size


def padded(vocab: int) -> int:
    """Megatron pads the embedding and LM head to a multiple of 128 rows (make_vocab_size_divisible_by); Llama 4's
    202048 becomes 202112 (+0.0006%)."""
    return -(-vocab // 128) * 128


def independent_count(m: ModelSpec) -> tuple[int, int]:
    """(total, active) from the shapes alone, without paraplan's operator graph."""
    tables = padded(m.vocab_size) * m.hidden_size * (1 if m.tied_embeddings else 2)
    total = active = tables
    for layer in range(m.num_layers):
        symbol = m.layer_symbol(layer)
        if symbol is None:  # attention then MLP or MoE
            mixer = _attention(m)
            t, a = _moe(m) if m.is_moe_layer(layer) else (_mlp(m, m.ffn_hidden_size),) * 2
            t, a = t + mixer, a + mixer
        elif symbol == "M":
            t = a = _mamba(m)
        elif symbol == "*":
            t = a = _attention(m)
        elif symbol == "-":
            t = a = _mlp(m, m.ffn_hidden_size)
        else:
            t, a = _moe(m)
        total, active = total + t, active + a
    return total, active


INDEPENDENT = [
    "nemotron-3-nano-30b-a3b", "nemotron-h-8b", "llama4-scout", "llama4-maverick", "gpt-oss-120b", "gpt-oss-20b",
    "kimi-k2", "qwen3-8b", "qwen3-32b",
]  # fmt: skip


@pytest.mark.parametrize("preset", INDEPENDENT)
def test_the_count_is_the_sum_of_its_terms(preset: str) -> None:
    m = model_preset(preset)
    p = model_params(m)
    total, active = independent_count(m)
    assert (p.total, p.active) == (total, active)
    assert p.embedding == padded(m.vocab_size) * m.hidden_size


# ------------------------------------------------------------------ against the published figures
def test_gpt_oss_within_one_percent() -> None:
    """openai/gpt-oss README: 117B total / 5.1B active, 21B / 3.6B. Computed 116.79B / 5.13B and 20.91B / 3.61B: the
    active figures count the LM head but not the input embedding (a lookup); with it they would be 5.71B and 4.19B,
    12% and 16% over."""
    for preset, total, active in (("gpt-oss-120b", 117e9, 5.1e9), ("gpt-oss-20b", 21e9, 3.6e9)):
        p = model_params(model_preset(preset))
        assert p.total == pytest.approx(total, rel=0.01), preset
        assert p.active_without_embedding == pytest.approx(active, rel=0.01), preset
        assert p.active > active * 1.1  # the convention matters


def test_llama4_maverick_within_one_percent_and_scout_under_its_multimodal_total() -> None:
    """llama-models MODEL_CARD.md: Maverick 400B / 17B, Scout 109B / 17B, of the multimodal checkpoints (the vision
    encoder included; its size is not in the model-configs data, so it is not subtracted). Computed for the text
    model: Maverick 400.7B, Scout 107.8B, 1.1% under the multimodal 109B, as a text model must be."""
    maverick, scout = model_params(model_preset("llama4-maverick")), model_params(model_preset("llama4-scout"))
    assert maverick.total == pytest.approx(400e9, rel=0.01) and maverick.active == pytest.approx(17e9, rel=0.02)
    assert 0.985 * 109e9 < scout.total < 109e9 and scout.active == pytest.approx(17e9, rel=0.02)


def test_nemotron_3_nano_against_its_rounded_class() -> None:
    """The sources give only "30B" total and "3.5B" active (Megatron-Bridge nemotron3.mdx, and the name 30B-A3B).
    Every term matches the provider (test_the_count_is_the_sum_of_its_terms): 23 MoE blocks of 128 experts of
    2·2688·1856 (squared ReLU, not gated) are 29.37B alone, so "30B" is the model's rounded class, not a count of
    31.58B that misses a term; the tolerance is that rounding, not a 1% match."""
    m = model_preset("nemotron-3-nano-30b-a3b")
    p = model_params(m)
    routed = m.pattern_count("E") * m.num_experts * 2 * m.hidden_size * m.expert_ffn
    assert routed == pytest.approx(29.37e9, rel=1e-3) and routed < 30e9 < p.total
    assert p.total == pytest.approx(30e9, rel=0.06) and p.active == pytest.approx(3.5e9, rel=0.03)


def test_kimi_k2_against_its_rounded_figures() -> None:
    """Kimi-K2 README: "1T" total, "32B" activated (rounded). 60 MoE layers of 384 experts of 3·7168·2048 are 1014.7B
    alone; computed 1026.4B / 32.9B."""
    m = model_preset("kimi-k2")
    p = model_params(m)
    routed = m.num_moe_layers * m.num_experts * 3 * m.hidden_size * m.expert_ffn
    assert routed == pytest.approx(1014.7e9, rel=1e-3)
    assert p.total == pytest.approx(1e12, rel=0.03) and p.active == pytest.approx(32e9, rel=0.03)


def test_qwen3_dense_against_their_names() -> None:
    """No published count in the sources read (the model-configs cards record none): the names, 8B and 32B."""
    assert model_params(model_preset("qwen3-8b")).total == pytest.approx(8e9, rel=0.03)
    assert model_params(model_preset("qwen3-32b")).total == pytest.approx(32e9, rel=0.03)
