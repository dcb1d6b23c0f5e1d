"""Hybrid models: the pattern picks each block's kind, the Mamba-2 mixer's operators, its TP and CP rules, parameter
counts against the published sizes and model FLOPs against Megatron-Bridge's formula."""

from __future__ import annotations

from dataclasses import replace

import pytest

import paraplan
from paraplan.errors import ConfigError
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.balance import balanced_layout, layer_work
from paraplan.graph.mamba import mamba_mixer_ops
from paraplan.graph.ops import CommAxis, OpKind
from paraplan.graph.params import model_params
from paraplan.projection import model_flops_per_sequence
from paraplan.specs.presets import model_preset
from paraplan.specs.training import TrainingSpec

HYBRIDS = ("nemotron-h-8b", "nemotron-h-56b", "nemotron-3-nano-30b-a3b")


def test_the_pattern_claims_every_block() -> None:
    counts = K.block_counts(model_preset("nemotron-h-8b"))
    # Megatron-Bridge NemotronHModelProvider8B: 24 M, 24 -, 4 * (../shared/data/model-configs/nemotron-h-8b.json)
    assert counts == {"embedding": 1, "head": 1, "mamba": 24, "attention": 4, "mlp": 24}
    nano = K.block_counts(model_preset("nemotron-3-nano-30b-a3b"))
    assert (nano["mamba"], nano["moe_mlp"], nano["attention"]) == (23, 23, 6)  # the doc's 23 / 23 / 6
    assert "dense" not in K.block_counts(model_preset("nemotron-h-56b"))
    assert [k.name for k in K.decoder_kinds(model_preset("nemotron-h-8b"))] == ["mamba", "attention", "mlp"]
    # a plain model keeps its kinds
    assert set(K.block_counts(model_preset("deepseek-v3"))) == {"dense", "moe", "embedding", "head", "mtp"}


def test_a_bad_pattern_is_refused_with_its_rule() -> None:
    base = model_preset("nemotron-h-8b")
    with pytest.raises(ConfigError, match="symbols \\['G'\\] are not modelled"):
        replace(base, hybrid_layer_pattern="G" * 52)
    with pytest.raises(ConfigError, match="pattern has 3 layers, num_layers is 52"):
        replace(base, hybrid_layer_pattern="M*-")
    with pytest.raises(ConfigError, match="MoE layers \\(E\\) but the model has no experts"):
        replace(base, hybrid_layer_pattern="E" * 52)


def _shard(**values: object) -> L.Shard:
    return L.Shard.of(TrainingSpec().with_values(**values))


def test_mamba_mixer_ops_shapes_and_flops() -> None:
    m = model_preset("nemotron-h-8b")  # h 4096, 128 heads x 64, 8 groups, state 128
    s, h, d_in, gn, heads = 4096, 4096, 8192, 8 * 128, 128
    ops = {op.name: op for op in mamba_mixer_ops(m, _shard(mbs=1, seq=s))}
    assert ops["mamba_in_proj"].gemm.n == 2 * d_in + 2 * gn + heads
    assert ops["mamba_out_proj"].gemm.k == d_in and ops["mamba_out_proj"].gemm.n == h
    scan = ops["ssd_scan"]
    assert scan.kind is OpKind.SCAN and scan.flops == 7 * s * d_in * 128  # Megatron-Bridge's scan term
    assert scan.scan.heads == heads and scan.scan.chunk == 128
    # TP splits heads and groups: every sharded width falls by tp
    ops8 = {op.name: op for op in mamba_mixer_ops(m, _shard(mbs=1, seq=s, tp=8, sp=True))}
    assert ops8["mamba_in_proj"].gemm.n * 8 == ops["mamba_in_proj"].gemm.n
    assert ops8["ssd_scan"].flops * 8 == scan.flops
    assert {op.name for op in ops8.values() if op.kind is OpKind.COMM} == {"tp_ag_mamba", "tp_rs_mamba"}


def test_mamba_saved_activations() -> None:
    """Per token (16-bit): in_proj input h, conv input and scan x/B/C 2(d_in + 2GN), scan y, gated-norm z and out_proj
    input 3 d_in, the residual nothing; fp32 dt and dA_cumsum per head; the RMSNorm input h."""
    m = model_preset("nemotron-h-8b")
    s, h, d_in, gn, heads = 2048, 4096, 8192, 8 * 128, 128
    saved = sum(op.saved_bytes for op in mamba_mixer_ops(m, _shard(mbs=1, seq=s)))
    assert saved == s * (2 * h + 2 * h + 2 * 2 * (d_in + 2 * gn) + 2 * 3 * d_in + 8 * heads)
    # and it shards over TP with sequence parallelism
    saved8 = sum(op.saved_bytes for op in mamba_mixer_ops(m, _shard(mbs=1, seq=s, tp=8, sp=True)))
    assert saved8 * 8 == pytest.approx(saved)


def test_context_parallel_turns_sequence_shards_into_head_shards() -> None:
    m = model_preset("nemotron-h-8b")
    ops = mamba_mixer_ops(m, _shard(mbs=1, seq=8192, tp=2, cp=4))
    a2a = [op for op in ops if op.comm is not None and op.comm.axis is CommAxis.CP]
    assert [op.name for op in a2a] == ["cp_a2a_mamba_in", "cp_a2a_mamba_out"]
    scan = next(op for op in ops if op.kind is OpKind.SCAN)
    assert scan.scan.seq == 8192 and scan.scan.heads == 128 // 2 // 4  # whole sequence, a quarter of the heads
    r = paraplan.project("nemotron-h-8b", "h100-sxm5-80gb", 64, tp=2, cp=4, sp=True, gbs=64, seq=32768)
    assert r.step_time_s > 0


@pytest.mark.parametrize(
    ("values", "rule"),
    [
        (dict(tp=16), "Mamba groups 8 must be divisible by tp 16 \\(MambaMixer"),
        (dict(tp=8, cp=32), "Mamba heads 128 must be divisible by tp\\*cp = 8\\*32 = 256 \\(MambaContextParallel"),
        (dict(tp=2, cp=8, pp=2, vpp=2, pipeline_schedule="interleaved"), "needs explicit stage boundaries"),
    ],
)
def test_what_a_mamba_layer_cannot_split_is_refused(values: dict, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        paraplan.project("nemotron-h-8b", "h100-sxm5-80gb", 512, gbs=512, seq=8192, **values)


def test_groups_repeat_when_cp_exceeds_them_and_refuse_otherwise() -> None:
    m = replace(model_preset("nemotron-h-8b"), mamba_num_groups=4, mamba_num_heads=96)
    with pytest.raises(ConfigError, match="Mamba groups per TP rank 2 and cp 3 must divide one another"):
        paraplan.project(m, "h100-sxm5-80gb", 24, tp=2, cp=3, gbs=8, seq=6144)
    assert paraplan.project(m, "h100-sxm5-80gb", 32, tp=2, cp=4, gbs=8, seq=8192).step_time_s > 0


# ------------------------------------------------------------------ parameter counts against the published ones
# The counting method, on models whose cards give the number: Llama 3.1 8B 8.03B (Meta's model card), Mixtral 8x7B
# 46.7B total / 12.9B active (Mistral AI's announcement), Qwen3-30B-A3B 30.5B / 3.3B (Qwen's model card).
@pytest.mark.parametrize(
    ("preset", "total", "active"),
    [("llama3.1-8b", 8.03e9, 8.03e9), ("mixtral-8x7b", 46.7e9, 12.9e9), ("qwen3-30b-a3b", 30.5e9, 3.3e9)],
)
def test_parameter_counting_matches_published_cards(preset: str, total: float, active: float) -> None:
    p = model_params(model_preset(preset))
    assert p.total == pytest.approx(total, rel=0.01) and p.active == pytest.approx(active, rel=0.02)


def test_hybrid_parameter_counts() -> None:
    """The published counts the sources give: none for Nemotron-H (the Megatron-Bridge providers and their
    model-configs cards record none, only the names 8B and 56B), and 30B total / 3.5B active for Nemotron 3 Nano
    (Megatron-Bridge docs nemotron3.mdx; rounded figures). Computed: 8.10B, 56.32B, 31.58B / 3.58B."""
    h8, h56, nano = (model_params(model_preset(name)) for name in HYBRIDS)
    assert h8.total == pytest.approx(8.0e9, rel=0.02)  # the name only: no published count in the sources
    assert h56.total == pytest.approx(56.0e9, rel=0.01)  # the name only
    assert nano.active == pytest.approx(3.5e9, rel=0.03)  # the doc's 3.5B (top-6; top-5 would give 3.35B)
    assert nano.total == pytest.approx(30e9, rel=0.06)  # the doc's "30B" is the rounded class of 31.6B
    assert h8.total == h8.active and nano.total > 8 * nano.active


# ------------------------------------------------------------------ model FLOPs as the publisher counts them
def bridge_hybrid_flops(model, seq: int) -> float:  # noqa: ANN001
    """Megatron-Bridge 0.6.2 training/utils/flop_utils.py `hybrid_flops` (batch 1, no MoE, no GDN, no SWA):
    attention 4·s·h·p·(h + h·g/n) + 2·s·h·p·s (the causal half of the square); MLP 4·(ffn/h)·s·h²; Mamba
    2·s·h·(2·d_in + 2·G·N + H) + 7·s·d_in·N + 2·s·d_in·h with d_in = 2h; logits 2·s·h·V; times 3."""
    h, n, g = model.hidden_size, model.num_attention_heads, model.kv_groups
    p = model.head_dim * n / h
    attn = 4 * seq * h * p * (h + h * g / n) + 2 * seq * h * p * seq
    mlp = 4 * (model.ffn_hidden_size / h) * seq * h * h
    d_in, state, groups = 2 * h, model.mamba_state_dim, model.mamba_num_groups
    mamba = 2 * seq * h * (2 * d_in + 2 * groups * state + model.mamba_heads) + 7 * seq * d_in * state
    mamba += 2 * seq * d_in * h
    fwd = model.pattern_count("*") * attn + model.pattern_count("-") * mlp + model.pattern_count("M") * mamba
    return 3 * (fwd + 2 * seq * h * model.vocab_size)


@pytest.mark.parametrize("preset", ["nemotron-h-8b", "nemotron-h-56b"])
@pytest.mark.parametrize("seq", [4096, 8192])
def test_model_flops_match_megatron_bridge(preset: str, seq: int) -> None:
    """Every term equals Megatron-Bridge's but attention's core: paraplan's model FLOPs count the full s x s square
    (Megatron-LM's GPT convention, kept for every model so MFU compares across them), Bridge's hybrid formula the
    causal half. The difference is exactly that half."""
    m = model_preset(preset)
    core_half = 3 * m.pattern_count("*") * 2 * seq * seq * m.num_attention_heads * m.head_dim
    assert model_flops_per_sequence(m, seq) == pytest.approx(bridge_hybrid_flops(m, seq) + core_half, rel=1e-12)


def test_balanced_split_beats_the_even_split() -> None:
    m = model_preset("nemotron-h-8b")
    work, first, last = layer_work(m, 8192)

    def heaviest(layout: tuple[int, ...]) -> float:
        loads, start = [], 0
        for i, n in enumerate(layout):
            loads.append(
                sum(work[start : start + n]) + (first if i == 0 else 0) + (last if i == len(layout) - 1 else 0)
            )
            start += n
        return max(loads)

    layout = balanced_layout(m, 4, 8192)
    assert layout is not None and sum(layout) == 52 and min(layout) >= 1
    assert heaviest(layout) < heaviest((13, 13, 13, 13))
    assert layout[-1] < 13  # the LM head's 131k vocabulary weighs on the last stage
    even = paraplan.project(m, "h100-sxm5-80gb", 32, tp=8, pp=4, sp=True, gbs=64, seq=8192)
    balanced = paraplan.project(m, "h100-sxm5-80gb", 32, tp=8, pp=4, sp=True, gbs=64, seq=8192, pipeline_layout=layout)
    assert balanced.step_time_s < even.step_time_s


def test_dense_and_moe_layers_are_untouched() -> None:
    ds = model_preset("deepseek-v3")
    assert [K.decoder_kind_of(ds, i).name for i in (0, 2, 3, 60)] == ["dense", "dense", "moe", "moe"]
    assert not ds.is_hybrid and ds.layer_symbol(5) is None
