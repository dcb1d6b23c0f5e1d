"""The loss kernel (eager fp32 or fused), the host/GPU launch queue, and the softmax exponentials."""

from __future__ import annotations

from datetime import date

import pytest

import paraplan
from paraplan.cost.block import BlockContext, _phase_times
from paraplan.cost.calibration import Calibration
from paraplan.cost.compute import compute_time_s
from paraplan.graph import layers as L
from paraplan.graph.backward import backward_ops
from paraplan.graph.kernels import CROSS_ENTROPY_EAGER_KERNELS
from paraplan.graph.ops import AttentionShape, GemmShape, Op, OpKind, Phase
from paraplan.specs.frameworks import defaults_on
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

H100 = system_preset("h100-sxm5-80gb", 8)


def _loss(fused: bool) -> Op:
    shard = L.Shard.of(TrainingSpec(micro_batch_size=1, seq_length=1024, cross_entropy_fusion=fused))
    model = model_preset("llama3.1-8b")
    return next(op for op in L.head_ops(model, shard, L.padded_vocab(model, 1)) if op.name == "cross_entropy")


def test_eager_loss_moves_four_times_the_fused_bytes_in_its_own_kernels() -> None:
    eager, fused = _loss(False), _loss(True)
    assert eager.bytes_moved == pytest.approx(38 / 10 * fused.bytes_moved)
    assert eager.saved_bytes == fused.saved_bytes  # both keep the fp32 softmax for backward
    assert (eager.host_ops, fused.host_ops) == (CROSS_ENTROPY_EAGER_KERNELS[0], 1)
    (eager_back,), (fused_back,) = backward_ops(eager), backward_ops(fused)
    assert eager_back.bytes_moved == pytest.approx(14 / 10 * fused.bytes_moved)
    assert fused_back.bytes_moved == pytest.approx(1.5 * fused.bytes_moved)
    gpu, cal = H100.gpu, Calibration()
    assert compute_time_s(eager, gpu, cal) > 3 * compute_time_s(fused, gpu, cal)


def test_recipes_fuse_the_loss_and_megatron_runs_it_eager() -> None:
    assert defaults_on("nemo-megatron", None).settings["cross_entropy_fusion"] is True
    for day in (None, date(2020, 9, 1), date(2025, 6, 1)):  # Megatron-LM leaves it off in every era
        assert "cross_entropy_fusion" not in defaults_on("megatron-lm", day).settings
    assert TrainingSpec().cross_entropy_fusion is False  # Megatron-LM's own default
    kwargs = dict(gpus=8, tp=1, dp=8, mbs=1, gbs=64, seq=4096)
    eager = paraplan.project("llama3.1-8b", "h100-sxm5-80gb", **kwargs)
    fused = paraplan.project("llama3.1-8b", "h100-sxm5-80gb", cross_entropy_fusion=True, **kwargs)
    assert eager.step_time_s > fused.step_time_s


def _gemm(name: str, m: int) -> Op:
    return Op(name, OpKind.GEMM, Phase.FORWARD, flops=2.0 * m * 4096 * 4096, gemm=GemmShape(m, 4096, 4096))


def _small(name: str) -> Op:
    return Op(name, OpKind.ELEMENTWISE, Phase.FORWARD, bytes_moved=1024.0)


def test_the_launch_queue_hides_host_time_behind_long_kernels_only_after_them() -> None:
    ctx = BlockContext(system=H100, cal=Calibration(), groups={}, tp_comm_overlap=False)
    host = 20e-6
    big = compute_time_s(_gemm("g", 65536), H100.gpu, ctx.cal)
    small = compute_time_s(_small("s"), H100.gpu, ctx.cal)
    smalls = [_small(f"s{i}") for i in range(50)]
    first = _phase_times([_gemm("g", 65536), *smalls], ctx, host)  # the host issues the rest while it runs
    last = _phase_times([*smalls, _gemm("g", 65536)], ctx, host)  # it waits for 51 launches before the GEMM
    gpu = big + 50 * small
    assert big > 50 * host  # the GEMM is longer than all the launches: max(GPU, host) would hide them both ways
    assert first.compute_s == pytest.approx(max(gpu, host + big + 50 * small), rel=1e-9)
    assert last.compute_s == pytest.approx(51 * host + big, rel=1e-9)
    assert last.compute_s > first.compute_s
    assert last.host_bound_s == pytest.approx(last.compute_s - gpu)
    launch_bound = _phase_times(smalls, ctx, host)  # tiny kernels: the host's pace
    assert launch_bound.compute_s == pytest.approx(50 * host + small)


def test_softmax_exponentials_bound_attention_where_the_sfus_are_slow() -> None:
    shape = AttentionShape(batch=1, seq_q=8192, seq_kv=8192, heads=32, kv_heads=8, head_dim_qk=128, head_dim_v=128)
    op = Op("attn_core", OpKind.ATTENTION, Phase.FORWARD, flops=4.0 * 8192 * 8192 * 32 * 128, attention=shape)
    cal = Calibration()
    gb200 = system_preset("gb200-nvl72", 72).gpu
    gb300 = system_preset("gb300-nvl72", 72).gpu
    assert gb200.bf16_tflops == gb300.bf16_tflops and gb300.exp_tera_per_s > 2 * gb200.exp_tera_per_s
    exps = 1 * 32 * 8192 * 8192 * 0.5  # causal
    saved = exps / (gb200.exp_tera_per_s * 1e12) - exps / (gb300.exp_tera_per_s * 1e12)
    assert compute_time_s(op, gb200, cal) - compute_time_s(op, gb300, cal) == pytest.approx(saved)


@pytest.mark.parametrize("host", [5e-6, 20e-6, 60e-6])
def test_layers_in_one_queue_cost_what_the_queue_gives_their_concatenation(host: float) -> None:
    from paraplan.cost.block import block_cost, repeated_s
    from paraplan.projection import group_placements

    train = TrainingSpec(tensor_model_parallel_size=2, micro_batch_size=1, seq_length=1024)
    system = system_preset("a100-sxm4-80gb", 8)
    ctx = BlockContext(system, Calibration(host_launch_s=host), group_placements(train, system), False)
    ops = L.decoder_layer_ops(model_preset("llama3.1-8b"), L.Shard.of(train), moe=False)
    one = block_cost(ops, "none", ctx)
    three = _phase_times(ops * 3, ctx, host)  # three layers issued into one stream, timed from an empty queue
    forward, *_ = repeated_s(one, 3)
    assert forward == pytest.approx(three.compute_s + one.forward_comm_exposed_s * 3, rel=1e-9)
    assert forward <= 3 * one.forward_s
    alone = _phase_times(ops, ctx, host)
    assert one.forward_runahead_s <= alone.host_bound_s + 1e-15  # it only ever hides host time
