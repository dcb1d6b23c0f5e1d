"""Gated DeltaNet layers among gated full attention (Qwen3-Next): which layers, their operators, what they cannot
split, the parameter count and model FLOPs against Megatron-Bridge's formula."""

from __future__ import annotations

from dataclasses import replace

import pytest

import paraplan
from paraplan.errors import ConfigError
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.gdn import gdn_mixer_ops
from paraplan.graph.ops import CommAxis, OpKind
from paraplan.graph.params import model_params
from paraplan.projection import model_flops_per_sequence
from paraplan.specs.presets import model_preset
from paraplan.specs.training import TrainingSpec

QWEN3_NEXT = "qwen3-next-80b-a3b"


def _shard(**values: object) -> L.Shard:
    return L.Shard.of(TrainingSpec().with_values(**values))


def test_every_fourth_layer_is_full_attention() -> None:
    m = model_preset(QWEN3_NEXT)
    kinds = [K.decoder_kind_of(m, i).name for i in range(m.num_layers)]
    assert kinds[:4] == ["gdn_moe", "gdn_moe", "gdn_moe", "moe"]  # megatron-core: (i + 1) % 4 == 0 is attention
    assert K.block_counts(m) == {"moe": 12, "embedding": 1, "head": 1, "gdn_moe": 36}
    dense = replace(
        m, num_experts=0, moe_ffn_hidden_size=None, moe_router_topk=0, moe_shared_expert_intermediate_size=0
    )
    assert K.block_counts(dense) == {"dense": 12, "embedding": 1, "head": 1, "gdn": 36}


def test_gdn_ops_shapes_and_flops() -> None:
    m = model_preset(QWEN3_NEXT)  # h 2048; 16 key heads, 32 value heads of 128
    s, h = 4096, 2048
    ops = {op.name: op for op in gdn_mixer_ops(m, _shard(mbs=1, seq=s))}
    assert ops["gdn_in_proj"].gemm.n == 2 * 2048 + 2 * 4096 + 2 * 32  # q, k, v, z, beta, alpha
    assert ops["gdn_out_proj"].gemm.k == 4096 and ops["gdn_out_proj"].gemm.n == h
    rule = ops["gated_delta_rule"]
    assert rule.kind is OpKind.SCAN and rule.flops == 8 * s * 32 * 128 * 128  # Megatron-Bridge's 2·nv·dv²·4
    ops2 = {op.name: op for op in gdn_mixer_ops(m, _shard(mbs=1, seq=s, tp=2, sp=True))}
    assert ops2["gated_delta_rule"].flops * 2 == rule.flops and ops2["gdn_in_proj"].gemm.n * 2 == 12352


def test_gated_attention_widens_qkv_by_the_gate() -> None:
    m = model_preset(QWEN3_NEXT)
    shard = _shard(mbs=1, seq=2048)
    ops = {op.name: op for op in L.attention_ops(m, shard)}
    assert ops["qkv"].gemm.n == (16 + 2 * 2 + 16) * 256  # q, k, v and the output gate
    assert "attn_output_gate" in ops
    plain = {op.name: op for op in L.attention_ops(replace(m, attention_output_gate=False), shard)}
    assert plain["qkv"].gemm.n == (16 + 2 * 2) * 256 and "attn_output_gate" not in plain


def test_context_parallel_is_an_all_to_all_over_heads() -> None:
    ops = gdn_mixer_ops(model_preset(QWEN3_NEXT), _shard(mbs=1, seq=8192, cp=2))
    assert [op.name for op in ops if op.comm is not None and op.comm.axis is CommAxis.CP] == [
        "cp_a2a_gdn_in",
        "cp_a2a_gdn_out",
    ]
    rule = next(op for op in ops if op.kind is OpKind.SCAN)
    assert rule.scan.seq == 8192 and rule.scan.heads == 16


def test_what_gdn_cannot_split_is_refused() -> None:
    with pytest.raises(ConfigError, match="Gated DeltaNet key heads 16 must be divisible by tp\\*cp = 2\\*16 = 32"):
        paraplan.project(QWEN3_NEXT, "h100-sxm5-80gb", 256, tp=2, cp=16, ep=8, gbs=64, seq=65536)
    bad = replace(model_preset(QWEN3_NEXT), linear_num_value_heads=24)
    with pytest.raises(ConfigError, match="value heads 24 must be a multiple of its key heads 16"):
        paraplan.project(bad, "h100-sxm5-80gb", 64, ep=8, gbs=64, seq=4096)


def test_qwen3_next_parameter_count() -> None:
    """The sources give the sizes only in the name (80B total, A3B active; the Megatron-Bridge provider and the
    model-configs card record no number). Computed: 79.67B total; 3.87B active with the embedding and the LM head,
    3.25B without them."""
    p = model_params(model_preset(QWEN3_NEXT))
    assert p.total == pytest.approx(80e9, rel=0.01)
    tables = 2 * 151936 * 2048
    assert p.active - tables == pytest.approx(3.25e9, rel=0.01)


def bridge_gdn_flops(m, seq: int) -> float:  # noqa: ANN001
    """Megatron-Bridge 0.6.2 training/utils/flop_utils.py `transformer_flops` with experimental_attention_variant
    gated_delta_net, for one sequence: MoE 6·h·(ffn·k·3 + shared·3) per MoE layer (no router), full attention
    6·(h·(q + k + v + gate) + q·h + q·s) (the causal half of the square), Gated DeltaNet
    6·(h·(2·qk + 2·v + 2·nv) + kernel·(2·qk + v) + nv·dv²·4 + h·v), logits 6·h·V; all times s."""
    h, s = m.hidden_size, seq
    q, kv = m.num_attention_heads * m.head_dim, m.kv_groups * m.head_dim
    gate = q if m.attention_output_gate else 0
    attention = 6 * (h * (q + 2 * kv + gate) + q * h + q * s)
    qk, v, nv = m.linear_num_key_heads * m.linear_key_head_dim, m.linear_num_value_heads * m.linear_value_head_dim, 32
    gdn = 6 * (
        h * (2 * qk + 2 * v + 2 * nv) + m.linear_conv_kernel_dim * (2 * qk + v) + nv * m.linear_value_head_dim**2 * 4
    )
    gdn += 6 * h * v
    moe = 6 * h * (m.expert_ffn * m.moe_router_topk * 3 + m.moe_shared_expert_intermediate_size * 3)
    n_gdn = sum(m.is_linear_attention_layer(i) for i in range(m.num_layers))
    total = n_gdn * gdn + (m.num_layers - n_gdn) * attention + m.num_layers * moe + 6 * h * m.vocab_size
    return s * total


@pytest.mark.parametrize("seq", [4096, 8192])
def test_model_flops_match_megatron_bridge(seq: int) -> None:
    """Equal to Megatron-Bridge's count but for three documented differences: paraplan counts attention's full square
    (Bridge the causal half), the router GEMM (2·h·E per token and MoE layer, Bridge none) and not the Gated DeltaNet
    conv1d (a memory-bound op, Bridge 2·kernel·(2·qk + v) per token)."""
    m = model_preset(QWEN3_NEXT)
    n_gdn = 36
    q = m.num_attention_heads * m.head_dim
    half_square = 3 * (m.num_layers - n_gdn) * 2 * q * seq * seq
    router = 3 * m.num_layers * 2 * seq * m.hidden_size * m.num_experts
    conv = 3 * n_gdn * 2 * seq * m.linear_conv_kernel_dim * (2 * 16 * 128 + 32 * 128)
    want = bridge_gdn_flops(m, seq) + half_square + router - conv
    assert model_flops_per_sequence(m, seq) == pytest.approx(want, rel=1e-12)
