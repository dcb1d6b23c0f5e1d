"""The hybrid benchmark's Mamba-2, Gated DeltaNet and local-attention blocks: the chunked scans equal their
recurrences, the blocks have the graph's weights and FLOPs at every sharding, and a tiny hybrid model is measured
and projected on this CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from paraplan.cost.block import weight_params  # noqa: E402
from paraplan.graph.layers import Shard  # noqa: E402
from paraplan.graph.ops import OpKind  # noqa: E402
from paraplan.measure.hybrid.plan import block_ops  # noqa: E402
from paraplan.measure.layers import RankShapes, build_block, core_attention  # noqa: E402
from paraplan.measure.mixers import (  # noqa: E402
    delta_rule_chunked,
    delta_rule_recurrent,
    ssd_chunked,
)
from paraplan.specs.presets import model_preset  # noqa: E402
from paraplan.specs.training import TrainingSpec  # noqa: E402

NANO = model_preset("nemotron-3-nano-30b-a3b").with_overrides(
    hidden_size=128, ffn_hidden_size=192, moe_ffn_hidden_size=64, moe_shared_expert_intermediate_size=128,
    num_experts=8, moe_router_topk=2, num_attention_heads=8, num_query_groups=2, kv_channels=16, vocab_size=1000,
    mamba_num_heads=8, mamba_head_dim=16, mamba_num_groups=2, mamba_state_dim=16,
)  # fmt: skip
NEXT = model_preset("qwen3-next-80b-a3b").with_overrides(
    hidden_size=128, ffn_hidden_size=192, moe_ffn_hidden_size=64, moe_shared_expert_intermediate_size=64,
    num_experts=8, moe_router_topk=2, num_attention_heads=4, num_query_groups=2, kv_channels=32, vocab_size=1000,
    linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32, linear_value_head_dim=32,
)  # fmt: skip
MAVERICK = model_preset("llama4-maverick").with_overrides(
    hidden_size=128, ffn_hidden_size=256, moe_ffn_hidden_size=64, moe_shared_expert_intermediate_size=64,
    num_experts=8, num_attention_heads=4, num_query_groups=2, kv_channels=32, vocab_size=1000, attention_chunk_size=32,
)  # fmt: skip
OSS = model_preset("gpt-oss-20b").with_overrides(
    hidden_size=128, ffn_hidden_size=64, moe_ffn_hidden_size=64, num_experts=8, num_attention_heads=4,
    num_query_groups=2, kv_channels=32, vocab_size=1000, window_size=15,
)  # fmt: skip


def test_the_chunked_scans_equal_their_recurrences() -> None:
    """Sequences that are not a whole number of chunks, in float64: the chunked SSD (Dao & Gu 2024, Listing 1) and
    the chunked gated delta rule (WY form) against one step at a time."""
    torch.manual_seed(0)
    f64 = dict(dtype=torch.float64)
    b, s, heads, p_dim, n_state = 2, 100, 3, 4, 5
    x, a = torch.randn(b, s, heads, p_dim, **f64), -torch.rand(b, s, heads, **f64)
    bb, cc = torch.randn(b, s, heads, n_state, **f64), torch.randn(b, s, heads, n_state, **f64)
    state, ys = torch.zeros(b, heads, p_dim, n_state, **f64), []
    for t in range(s):  # h_t = exp(a_t) h_{t-1} + x_t b_t^T, y_t = h_t c_t
        state = state * torch.exp(a[:, t])[..., None, None] + torch.einsum("bhp,bhn->bhpn", x[:, t], bb[:, t])
        ys.append(torch.einsum("bhpn,bhn->bhp", state, cc[:, t]))
    assert torch.allclose(ssd_chunked(x, a, bb, cc, chunk=16), torch.stack(ys, dim=1), atol=1e-10)
    q = torch.randn(b, s, heads, 6, **f64)
    k = torch.nn.functional.normalize(torch.randn(b, s, heads, 6, **f64), dim=-1)
    v, g, beta = (
        torch.randn(b, s, heads, 7, **f64),
        -0.3 * torch.rand(b, s, heads, **f64),
        torch.rand(b, s, heads, **f64),
    )
    expected = delta_rule_recurrent(q, k, v, g, beta)
    assert torch.allclose(delta_rule_chunked(q, k, v, g, beta, chunk=16), expected, atol=1e-10)
    assert not torch.allclose(delta_rule_chunked(q, k, v, g, 0.5 * beta, chunk=16), expected, atol=1e-3)


CASES = [
    (NANO, dict(seq_length=256), ("mamba", "attention", "moe_mlp", "mlp")),
    (NANO, dict(seq_length=256, tensor_model_parallel_size=2, sequence_parallel=True), ("mamba",)),
    (NANO, dict(seq_length=256, context_parallel_size=2), ("mamba",)),
    (NEXT, dict(seq_length=256), ("gdn_moe", "gdn", "moe")),
    (NEXT, dict(seq_length=256, tensor_model_parallel_size=2, context_parallel_size=2), ("gdn_moe",)),
    (MAVERICK, dict(seq_length=100), ("dense_local", "moe_local", "moe")),
    (OSS, dict(seq_length=100, tensor_model_parallel_size=2), ("moe_local", "moe")),
]  # fmt: skip


@pytest.mark.parametrize(("model", "train", "kinds"), CASES)
def test_blocks_have_the_graphs_weights_and_flops(model, train, kinds) -> None:
    """GEMM weights equal; torch's FLOPs outside the scans equal the graph's GEMMs, attention and conv1d; the scans'
    own work is the chunked algorithm's, not the Megatron-Bridge count the graph uses (below)."""
    shard = Shard.of(TrainingSpec(attention_backend="unfused", **train))  # torch counts the unfused matmuls
    for kind in kinds:
        run = build_block(kind, model, shard)
        ops = block_ops(kind, model, shard)
        linear = sum(m.weight.numel() for m in run.module.modules() if isinstance(m, torch.nn.Linear))
        experts = sum(p.numel() for name, p in run.module.named_parameters() if name.endswith(("w_up", "w_down")))
        assert linear + experts == sum(weight_params(op) for op in ops), kind
        with FlopCounterMode(display=False) as counter:
            out = run.forward()
        by_module = counter.get_flop_counts()
        scans = sum(sum(c.values()) for name, c in by_module.items() if name.endswith((".scan", ".rule")))
        graph = sum(op.flops for op in ops if op.kind in (OpKind.GEMM, OpKind.ATTENTION) or "conv1d" in op.name)
        assert counter.get_total_flops() - scans == pytest.approx(graph, rel=1e-9), kind
        assert (scans > 0) == any(op.kind is OpKind.SCAN for op in ops), kind
        assert tuple(out.shape) == (shard.batch, shard.seq // shard.sp_div, model.hidden_size), kind
        out.sum().backward()
        assert all(p.grad is not None for p in run.params), kind


def test_the_scans_work_against_the_flop_convention() -> None:
    """At Nemotron-H 8B's and Qwen3-Next's shapes (8192 tokens, on the meta device): the chunked SSD does 1.58x the
    FLOPs Megatron-Bridge counts (7·s·d_in·N), the chunked delta rule 1.38x its 8·s·Hv·dk·dv (the triangular solve
    not counted); SCAN_EFFICIENCY is relative to the convention."""
    from paraplan.graph.gdn import gdn_mixer_ops
    from paraplan.graph.mamba import mamba_mixer_ops

    shard = Shard.of(TrainingSpec(seq_length=8192))
    meta = dict(device="meta")
    m = model_preset("nemotron-h-8b")
    heads, p_dim, n_state = m.mamba_heads, m.mamba_head_dim, m.mamba_state_dim
    with FlopCounterMode(display=False) as counter:
        ssd_chunked(torch.empty(1, 8192, heads, p_dim, **meta), torch.empty(1, 8192, heads, **meta),
                    torch.empty(1, 8192, heads, n_state, **meta), torch.empty(1, 8192, heads, n_state, **meta))  # fmt: skip
    convention = next(op.flops for op in mamba_mixer_ops(m, shard) if op.kind is OpKind.SCAN)
    assert counter.get_total_flops() / convention == pytest.approx(1.576, rel=1e-3)
    m = model_preset("qwen3-next-80b-a3b")
    heads, dk, dv = m.linear_num_value_heads, m.linear_key_head_dim, m.linear_value_head_dim
    qk, v, g = (
        torch.empty(1, 8192, heads, dk, **meta),
        torch.empty(1, 8192, heads, dv, **meta),
        torch.empty(1, 8192, heads, **meta),
    )
    with FlopCounterMode(display=False) as counter:
        delta_rule_chunked(qk, qk, v, g, g)
    convention = next(op.flops for op in gdn_mixer_ops(m, shard) if op.kind is OpKind.SCAN)
    assert counter.get_total_flops() / convention == pytest.approx(1.375, rel=1e-3)


def test_the_blocked_sliding_window_is_the_banded_square() -> None:
    """The flash-like path (query blocks against two key blocks) gives the unfused banded mask's result."""
    torch.manual_seed(1)
    shard = Shard.of(TrainingSpec(seq_length=100))
    q, k, v = torch.randn(2, 4, 100, 16), torch.randn(2, 2, 100, 16), torch.randn(2, 2, 100, 16)
    flash = RankShapes.of(OSS, shard)
    unfused = RankShapes.of(OSS, Shard.of(TrainingSpec(seq_length=100, attention_backend="unfused")))
    blocked = core_attention(q, k, v, flash, False, False, window=15)
    banded = core_attention(q, k, v, unfused, False, False, window=15)
    assert torch.allclose(blocked, banded, atol=1e-5)
    assert not torch.allclose(blocked, core_attention(q, k, v, flash, False, False), atol=1e-3)


@pytest.mark.parametrize("model", [NANO, NEXT], ids=["mamba", "gdn"])
def test_a_tiny_hybrid_model_is_measured_and_projected_on_this_cpu(model, tmp_path) -> None:
    from paraplan.measure.hybrid.api import HybridOptions, hybrid_project
    from paraplan.measure.hybrid.local import local_cpu_system

    cache = str(tmp_path / "h.sqlite")
    system = local_cpu_system(1, cache_path=cache)
    train = TrainingSpec().with_values(seq=128, mbs=1, gbs=2)
    options = HybridOptions(device="cpu", cache_path=cache, warmup=1, repeats=2, collectives=False)
    result = hybrid_project(model, system, train, options)
    mixers = {"mamba", "attention", "moe_mlp"} if model is NANO else {"gdn_moe", "moe"}
    assert mixers <= set(result.blocks) and all(result.blocks[k].forward_s > 0 for k in mixers)
    assert result.sources["forward_compute"].origin == "measured"
    assert result.projection.step_time_s > 0


def test_the_cli_measures_a_scaled_down_hybrid_config_json(tmp_path, monkeypatch) -> None:
    """`paraplan project --model <nemotron_h config.json> --hybrid --device cpu` on a CPU system file."""
    import json

    from typer.testing import CliRunner

    from paraplan.cli.main import app
    from paraplan.measure.hybrid.local import local_cpu_system, system_file_text

    monkeypatch.setenv("PARAPLAN_HYBRID_CACHE", str(tmp_path / "h.sqlite"))
    config = tmp_path / "tiny-nano" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({
        "model_type": "nemotron_h", "hybrid_override_pattern": "MEM*E", "hidden_size": 128, "intermediate_size": 192,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000,
        "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2, "ssm_state_size": 16, "n_routed_experts": 8,
        "moe_intermediate_size": 64, "num_experts_per_tok": 2, "n_shared_experts": 1,
        "moe_shared_expert_intermediate_size": 128,
    }))  # fmt: skip
    system_file = tmp_path / "cpu.yaml"
    system_file.write_text(system_file_text(local_cpu_system(1, cache_path=str(tmp_path / "h.sqlite"))))
    args = ["project", "--model", str(config), "--system-file", str(system_file), "--seq", "128", "--mbs", "1",
            "--gbs", "2", "--hybrid", "--device", "cpu", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{") :])
    assert {"mamba", "attention", "moe_mlp"} <= set(out["hybrid"]["blocks"])
    assert out["hybrid"]["sources"]["forward_compute"]["origin"] == "measured"
    assert out["cost_sources"]["measured_fraction"] > 0.9
