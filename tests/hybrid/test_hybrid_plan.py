"""The downscaling planner: what it cuts, in which order, and why (no torch needed)."""

from __future__ import annotations

from paraplan.graph.ops import CommKind
from paraplan.measure.device import LocalDevices
from paraplan.measure.hybrid.plan import block_memory_bytes, plan_benchmark
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

GIB = 2**30


def h200s(count: int, memory_gib: float = 139.8) -> LocalDevices:
    return LocalDevices("cuda", "NVIDIA H200", count, memory_gib * GIB)


def test_llama_on_one_gpu_cuts_layers_pp_dp_then_tp():
    train = TrainingSpec(seq_length=8192, global_batch_size=128).with_values(tp=2, pp=4)
    plan = plan_benchmark(model_preset("llama3.1-8b"), system_preset("h200-sxm-141gb", 64), train, h200s(1))
    cuts = {c.what: c for c in plan.cuts}
    assert list(cuts) == ["layers", "pp", "dp", "tp"]
    assert (cuts["layers"].target, cuts["layers"].bench) == (32, 1)
    assert (cuts["pp"].target, cuts["pp"].bench) == (4, 1)
    assert (cuts["dp"].target, cuts["dp"].bench) == (8, 1)
    assert (cuts["tp"].target, cuts["tp"].bench) == (2, 1)
    assert plan.kinds == ("dense", "embedding", "head")
    assert plan.layer_counts == {"dense": 32, "embedding": 1, "head": 1}
    assert plan.shard.tp == 2 and plan.compute_scale == 1.0  # one TP rank's shard: no compute scaling
    assert plan.dtype == "bf16" and not plan.split_backward
    assert plan.collective_ranks == 0  # a single device: no collectives among local devices
    text = "\n".join(plan.explain())
    assert "1f1b schedule over 4 stages" in text and "gradient all-reduce" in text


def test_moe_reduces_ep_before_tp_keeping_experts_per_rank():
    train = TrainingSpec(seq_length=4096, global_batch_size=64, sequence_parallel=True).with_values(tp=2, ep=8)
    plan = plan_benchmark(model_preset("mixtral-8x7b"), system_preset("h200-sxm-141gb", 64), train, h200s(4))
    whats = [c.what for c in plan.cuts]
    assert "ep" in whats and "tp" not in whats  # cutting EP is enough for 4 devices
    ep_cut = next(c for c in plan.cuts if c.what == "ep")
    assert (ep_cut.target, ep_cut.bench) == (8, 2) and "1 expert(s)" in ep_cut.reason  # etp 2 x ep 2 = 4
    assert plan.kinds == ("moe", "embedding", "head")
    assert plan.shard.ep == 8  # shapes stay the target's: one expert per rank
    assert plan.collective_ranks == 4


def test_eight_local_gpus_keep_an_ep8_group():
    train = TrainingSpec(seq_length=4096, global_batch_size=64).with_values(ep=8)
    plan = plan_benchmark(model_preset("mixtral-8x7b"), system_preset("h200-sxm-141gb", 64), train, h200s(8))
    assert "ep" not in [c.what for c in plan.cuts]
    assert plan.collective_ranks == 8


def test_deepseek_runs_every_distinct_kind_with_mla():
    train = TrainingSpec(
        seq_length=4096, global_batch_size=256, sequence_parallel=True, pipeline_layout=(8, 8, 8, 8, 8, 8, 8, 5)
    ).with_values(tp=2, pp=8, ep=32)
    plan = plan_benchmark(model_preset("deepseek-v3"), system_preset("h200-sxm-141gb", 512), train, h200s(8))
    assert plan.kinds == ("dense", "moe", "embedding", "head", "mtp")
    assert plan.layer_counts["dense"] == 3 and plan.layer_counts["moe"] == 58 and plan.layer_counts["mtp"] == 1
    assert "MLA attention" in plan.cuts[0].reason


def test_cp_is_never_reduced():
    train = TrainingSpec(seq_length=32768, global_batch_size=8).with_values(cp=4)
    plan = plan_benchmark(model_preset("llama3.1-8b"), system_preset("h200-sxm-141gb", 8), train, h200s(1))
    assert plan.shard.cp == 4 and plan.shard.seq == 8192
    assert "cp" not in [c.what for c in plan.cuts]
    assert any("never reduced" in n for n in plan.notes)


def test_memory_last_resort_splits_further_and_says_so():
    model = model_preset("llama3.1-70b")
    train = TrainingSpec(seq_length=8192, global_batch_size=64)
    small = h200s(1, memory_gib=8)
    plan = plan_benchmark(model, system_preset("h200-sxm-141gb", 64), train, small)
    assert plan.shard.tp > 1
    assert plan.cuts[-1].what == "memory" and "analytic ratio" in plan.cuts[-1].restored
    assert plan.memory_bytes <= small.memory_bytes * 0.8
    assert block_memory_bytes("dense", model, plan.shard, "bf16") < block_memory_bytes(
        "dense", model, plan.shard.__class__.of(plan.train), "bf16"
    )


def test_zero_bubble_needs_b_and_w_apart_and_fp8_runs_in_bf16():
    train = TrainingSpec(seq_length=4096, global_batch_size=64, precision="fp8").with_values(
        pp=4, pipeline_schedule="zb-h1"
    )
    plan = plan_benchmark(model_preset("llama3.1-8b"), system_preset("h200-sxm-141gb", 8), train, h200s(1))
    assert plan.split_backward
    assert plan.dtype == "bf16" and any("fp8" in n for n in plan.notes)


def test_comm_use_lists_what_the_target_sends():
    model = model_preset("llama3.1-8b")
    system = system_preset("h200-sxm-141gb", 16)
    pp = plan_benchmark(model, system, TrainingSpec(seq_length=4096, global_batch_size=16).with_values(pp=2), h200s(2))
    kinds = {u.kind for u in pp.comm_use}
    assert CommKind.SEND_RECV in kinds and CommKind.ALL_REDUCE in kinds
    send = next(u for u in pp.comm_use if u.kind is CommKind.SEND_RECV)
    assert send.nbytes == 2 * 4096 * 4096  # bf16 activations of one micro-batch
    dist = plan_benchmark(
        model, system, TrainingSpec(seq_length=4096, global_batch_size=16, use_distributed_optimizer=True), h200s(2)
    )
    assert {u.kind for u in dist.comm_use} == {CommKind.REDUCE_SCATTER, CommKind.ALL_GATHER}
