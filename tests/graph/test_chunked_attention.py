"""Chunked local attention between global layers, with MoE on every or every other layer (Llama 4)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import paraplan
from paraplan.errors import ConfigError
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.projection import model_flops_per_sequence
from paraplan.specs.presets import model_preset
from paraplan.specs.training import TrainingSpec


def test_layers_are_chunked_but_every_fourth() -> None:
    scout, maverick = model_preset("llama4-scout"), model_preset("llama4-maverick")
    assert [K.decoder_kind_of(scout, i).name for i in range(4)] == ["moe_local"] * 3 + ["moe"]
    # Maverick: MoE on the odd layers (moe_layer_freq [0, 1] * 24), global attention on layers 3, 7, ...
    assert [K.decoder_kind_of(maverick, i).name for i in range(4)] == [
        "dense_local",
        "moe_local",
        "dense_local",
        "moe",
    ]
    assert K.block_counts(maverick) == {"moe": 12, "embedding": 1, "head": 1, "dense_local": 24, "moe_local": 12}


def test_chunked_attention_is_a_batch_of_chunks() -> None:
    m = model_preset("llama4-scout")
    shard = L.Shard.of(TrainingSpec().with_values(mbs=1, seq=32768))
    full = next(op for op in L.attention_ops(m, shard) if op.name == "attn_core")
    chunked = next(op for op in L.attention_ops(m, shard, local=True) if op.name == "attn_core")
    assert (chunked.attention.batch, chunked.attention.seq_q, chunked.attention.seq_kv) == (4, 8192, 8192)
    assert chunked.flops * 4 == full.flops
    short = L.Shard.of(TrainingSpec().with_values(mbs=1, seq=8192))  # a sequence within one chunk: full attention
    assert next(op for op in L.attention_ops(m, short, local=True) if op.name == "attn_core").attention.batch == 1


def test_model_flops_grow_slower_than_full_attention() -> None:
    scout = model_preset("llama4-scout")
    full = replace(scout, attention_chunk_size=0)
    assert model_flops_per_sequence(scout, 8192) == model_flops_per_sequence(full, 8192)
    s, q = 65536, 40 * 128
    saved = 36 * 3 * 2 * 2 * s * q * (s - 8192)  # 36 chunked layers attend 8192 keys instead of s (full square)
    assert model_flops_per_sequence(full, s) - model_flops_per_sequence(scout, s) == pytest.approx(saved, rel=1e-12)


def test_chunked_attention_refuses_context_parallelism() -> None:
    with pytest.raises(ConfigError, match="cp 2 > 1 with chunked attention \\(chunks of 8192\\) is not modelled"):
        paraplan.project("llama4-scout", "h100-sxm5-80gb", 128, tp=8, cp=2, ep=8, etp=1, gbs=64, seq=65536)


def test_sliding_window_layers() -> None:
    """Every layer but each 4th slides over 4096 keys: counted as attention is, the square of twice the keys a causal
    query attends on average (W - W(W-1)/2s, Megatron-Bridge's `calculate_swa_context`)."""
    base = model_preset("llama3.1-8b")
    swa = replace(base, window_size=4096, window_attn_skip_freq=4)
    assert [K.decoder_kind_of(swa, i).name for i in range(4)] == ["dense_local"] * 3 + ["dense"]
    s, w, q = 32768, 4096, 32 * 128
    keys = w - w * (w - 1) / (2 * s)
    core = next(op for op in L.attention_ops(swa, L.Shard.of(TrainingSpec().with_values(seq=s)), local=True)
                if op.name == "attn_core")  # fmt: skip
    assert core.flops == pytest.approx(2 * s * 32 * 2 * keys * 2 * 128)
    saved = 24 * 3 * 2 * 2 * s * q * (s - 2 * keys)  # 24 sliding layers of 32, forward and backward
    assert model_flops_per_sequence(base, s) - model_flops_per_sequence(swa, s) == pytest.approx(saved, rel=1e-9)
    # within the window it is full attention
    assert model_flops_per_sequence(swa, 4096) == pytest.approx(model_flops_per_sequence(base, 4096), rel=1e-12)
    with pytest.raises(ConfigError, match="cp 2 > 1 with sliding-window attention \\(window 4096\\) is not modelled"):
        paraplan.project(swa, "h100-sxm5-80gb", 16, tp=8, cp=2, gbs=8, seq=32768)
    assert (
        paraplan.project(swa, "h100-sxm5-80gb", 16, tp=8, gbs=8, seq=32768).step_time_s
        < paraplan.project(base, "h100-sxm5-80gb", 16, tp=8, gbs=8, seq=32768).step_time_s
    )
