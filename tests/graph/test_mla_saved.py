"""MLA keeps its key for attention as megatron-core writes it: the rotary part once per head."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.specs.presets import model_preset
from paraplan.specs.training import TrainingSpec


def _kv_up_saved(tp: int) -> tuple[float, float]:
    model = model_preset("deepseek-v3")
    shard = L.Shard.of(TrainingSpec().with_values(tp=tp, seq=4096, mbs=1))
    ops = {op.name: op for op in L.mla_attention_ops(model, shard)}
    heads = model.num_attention_heads // tp
    per_token_elems = heads * (model.qk_nope_head_dim + model.qk_rope_head_dim + model.v_head_dim)
    kv_input = shard.act_bytes * shard.tokens * model.kv_lora_rank  # its input, kept beside (replicated over TP)
    return ops["kv_up"].saved_bytes - kv_input, shard.act_bytes * shard.tokens * per_token_elems


def test_kv_up_keeps_k_and_v_with_the_rotary_key_per_head() -> None:
    # megatron-core 0.19.2 `qkv_up_proj_and_rope_apply`: key [tokens, heads, d_nope + d_rope], value [.., d_v]
    for tp in (1, 2, 8):
        saved, expected = _kv_up_saved(tp)
        assert saved == expected


def test_the_rotary_key_scales_with_the_heads_on_the_rank() -> None:
    one, _ = _kv_up_saved(1)
    eight, _ = _kv_up_saved(8)
    assert one == 8 * eight
