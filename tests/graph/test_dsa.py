"""DeepSeek sparse attention (DeepSeek-V3.2): the lightning indexer and MLA over the keys it picks."""

from __future__ import annotations

from dataclasses import replace

import pytest

import paraplan
from paraplan.errors import ConfigError
from paraplan.graph import dsa
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.dsa import sparse_keys
from paraplan.graph.params import model_params
from paraplan.projection import model_flops_per_sequence
from paraplan.specs.presets import model_preset
from paraplan.specs.training import TrainingSpec


def _ops(model, **values):  # noqa: ANN001, ANN202
    """MLA with the core the layer kinds give it (`graph.dsa.attention_core`)."""
    shard = L.Shard.of(TrainingSpec().with_values(**values))
    return {op.name: op for op in L.mla_attention_ops(model, shard, dsa.attention_core(model))}


def test_indexer_ops_and_sparse_core() -> None:
    m = model_preset("deepseek-v3.2")
    s = 32768
    ops = _ops(m, mbs=1, seq=s)
    assert ops["indexer_wq"].gemm.n == 64 * 128 and ops["indexer_wq"].gemm.k == 1536  # from the q latent
    assert ops["indexer_wk"].gemm.n == 128 and ops["indexer_weights"].gemm.n == 64
    assert ops["indexer_scores"].flops == 2 * s * s * 64 * 128
    core = ops["attn_core"]
    keys = 2048 - 2048 * 2047 / (2 * s)  # causal top-2048: fewer for the first 2048 queries
    # counted as attention is: the square of twice the keys a causal query attends, the kernel doing half
    assert core.flops == pytest.approx(2 * s * 128 * 2 * keys * (192 + 128))
    assert core.attention.causal and core.attention.seq_kv == round(2 * keys)
    short = _ops(m, mbs=1, seq=2048)["attn_core"]  # within top-k: exactly dense MLA
    dense = _ops(replace(m, dsa_indexer_n_heads=0), mbs=1, seq=2048)["attn_core"]
    assert short.flops == dense.flops and short.attention == dense.attention
    # the indexer is duplicated over TP (Megatron's parallel_mode="duplicated"); the MLA heads split
    ops8 = _ops(m, mbs=1, seq=s, tp=8, sp=True)
    assert ops8["indexer_scores"].flops == ops["indexer_scores"].flops
    assert ops8["attn_core"].flops * 8 == pytest.approx(core.flops)


def test_sparse_keys() -> None:
    assert sparse_keys(1024, 2048) == 512  # shorter than top-k: plain causal attention
    assert sparse_keys(1 << 20, 2048) == pytest.approx(2048, rel=1e-3)


def test_sparse_attention_pays_off_at_long_sequences() -> None:
    """Model FLOPs count the sparse core like attention (twice the attended pairs) and the indexer's whole square:
    at 128k tokens V3.2 does under 0.4 of V3's work per token (without MTP on both)."""
    v32 = model_preset("deepseek-v3.2")
    dense = replace(v32, dsa_indexer_n_heads=0)
    long = 131072
    assert model_flops_per_sequence(v32, long) < 0.4 * model_flops_per_sequence(dense, long)


def test_dsa_needs_mla() -> None:
    with pytest.raises(ConfigError, match="DeepSeek sparse attention \\(dsa_indexer_n_heads\\) runs over MLA"):
        replace(model_preset("llama3.1-8b"), dsa_indexer_n_heads=64)


def test_deepseek_v32_parameter_count() -> None:
    """Published: 671B total (a third-party doc and the checkpoint's file name; no active count in the sources).
    Computed without MTP (not in the sources): 671.9B, the indexers adding 0.9B to DeepSeek-V3's 671B."""
    p = model_params(model_preset("deepseek-v3.2"))
    assert p.total == pytest.approx(671e9, rel=0.01)
    indexer = 61 * (1536 * 64 * 128 + 7168 * 128 + 7168 * 64)
    v3 = replace(model_preset("deepseek-v3.2"), dsa_indexer_n_heads=0)
    assert p.total - model_params(v3).total == indexer


def test_deepseek_v32_projects_with_context_parallelism() -> None:
    r = paraplan.project("deepseek-v3.2", "h100-sxm5-80gb", 512, tp=1, pp=8, cp=2, ep=32, gbs=256, seq=32768,
                         pipeline_layout=(8,) * 7 + (5,))  # fmt: skip
    assert r.step_time_s > 0


def test_the_layer_kinds_choose_the_sparse_core() -> None:
    m = model_preset("deepseek-v3.2")
    shard = L.Shard.of(TrainingSpec().with_values(seq=8192))
    for kind in ("dense", "moe"):
        names = {op.name for op in K.layer_kind(kind).ops(m, shard)}
        assert {"indexer_scores", "indexer_topk"} <= names
    assert "indexer_scores" not in {op.name for op in K.layer_kind("moe").ops(model_preset("deepseek-v3"), shard)}
