"""Communication hidden under compute slows that compute (`Calibration.overlap_interference`): NCCL's kernels
share the SMs and HBM of the kernels they overlap."""

from __future__ import annotations

from dataclasses import replace

import pytest
from gpt_model import gpt

from paraplan.cost.block import BlockContext, MeasuredBlock, block_cost, with_measured_compute
from paraplan.cost.calibration import calibration_for
from paraplan.graph import layers as L
from paraplan.projection import ProjectionOptions, group_placements, project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec


def _fsdp(framework: str, interference: float):
    system = system_preset("a100-sxm4-80gb", 16)
    train = TrainingSpec(precision="bf16", framework=framework, zero_stage=3).with_values(
        dp=16, mbs=4, gbs=64, seq=2048, recompute="full"
    )
    cal = replace(calibration_for(system.gpu.name, framework), overlap_interference=interference)
    return project_specs(gpt(2560, 8, vocab=50368), system, train, ProjectionOptions(calibration=cal))


def _compute_s(proj) -> float:
    return sum(proj.breakdown[k] for k in ("forward_compute", "backward_compute", "recompute", "comm_interference"))


def test_prefetched_fsdp_collectives_slow_the_compute_they_hide_under() -> None:
    """llm-foundry (torch FSDP) prefetches: each micro-batch's compute grows by the interference times the
    collectives it hides (gather in the forward; gather, refetch and reduce-scatter in the backward), at most its
    own length. DeepSpeed ZeRO-3 of 2021 gathers on demand, hides nothing and is not slowed."""
    clean, slowed = _fsdp("llm-foundry", 0.0), _fsdp("llm-foundry", 0.3)
    comm = clean.pipeline.comm_total_s["fsdp"]
    busy_clean, busy_slowed = _compute_s(clean), _compute_s(slowed)
    assert busy_slowed - busy_clean == pytest.approx(0.3 * comm, rel=1e-6)  # the comm is shorter than the compute
    assert slowed.step_time_s > clean.step_time_s
    assert _fsdp("deepspeed", 0.3).step_time_s == _fsdp("deepspeed", 0.0).step_time_s


def _layer(interference: float, tp_async: bool = True, userbuffers: bool = False):
    model = gpt(6144)
    train = TrainingSpec().with_values(tp=8, dp=1, mbs=4, gbs=4, seq=2048, tp_async_backward=tp_async)
    system = system_preset("a100-sxm4-80gb", 8)
    cal = replace(calibration_for(system.gpu.name), overlap_interference=interference)
    ctx = BlockContext(system, cal, group_placements(train, system), userbuffers, tp_async_backward=tp_async)
    return block_cost(L.decoder_layer_ops(model, L.Shard.of(train), moe=False), "none", ctx)


def test_asynchronous_tp_collectives_slow_the_weight_gradient_gemms() -> None:
    """A 6144-wide layer at tp 8: the backward's two all-reduces hide under the weight-gradient GEMMs, which take
    the interference times their length longer; a synchronous backward waits for them and is not slowed, nor are
    the GEMMs beside userbuffer collectives."""
    clean, slowed = _layer(0.0), _layer(0.3)
    hidden = clean.comm_total_s["tp"] / 2  # the backward's all-reduces move what the forward's do
    assert clean.comm_exposed_s["tp"] == pytest.approx(clean.comm_total_s["tp"] / 2)  # the forward's, in the stream
    assert slowed.backward_weight_s - clean.backward_weight_s == pytest.approx(0.3 * hidden, rel=1e-9)
    assert (slowed.forward_s, slowed.backward_input_s) == (clean.forward_s, clean.backward_input_s)
    assert _layer(0.3, tp_async=False) == _layer(0.0, tp_async=False)
    # TransformerEngine's userbuffers (tp_comm_overlap) move them on a few SMs or the copy engines, not NCCL's
    assert _layer(0.3, userbuffers=True) == _layer(0.0, userbuffers=True)


def test_the_breakdown_names_the_interference_apart_from_the_compute() -> None:
    """Llama 3.1 8B at tp 4 with SP on 16 H100: the slowdown is its own part of the step, the parts still add up to
    the step, and without interference the part is zero and the compute parts are what they were."""
    model, system = model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", 16)
    train = TrainingSpec(seq_length=8192, global_batch_size=64).with_values(tp=4, sp=True)
    base = calibration_for(system.gpu.name)
    clean, slowed = (
        project_specs(model, system, train, ProjectionOptions(calibration=base.with_values(overlap_interference=f)))
        for f in (0.0, 0.3)
    )
    assert clean.breakdown["comm_interference"] == 0.0
    assert slowed.breakdown["comm_interference"] > 0.01 * slowed.step_time_s
    assert sum(slowed.breakdown.values()) == pytest.approx(slowed.step_time_s, rel=1e-9)
    compute = ("forward_compute", "backward_compute")
    assert sum(slowed.breakdown[k] for k in compute) == pytest.approx(sum(clean.breakdown[k] for k in compute))


def test_measured_blocks_keep_the_modelled_interference() -> None:
    """A block measured alone on one device ran without the cluster's collectives beside it: the hybrid projection
    adds their modelled slowdown to its measured times."""
    cost = _layer(0.3)
    slow_f, slow_b, slow_w = cost.interference_s
    assert slow_w > 0
    measured = with_measured_compute(cost, MeasuredBlock(1.0, 2.0, 3.0))
    assert measured.backward_weight_s == pytest.approx(3.0 + slow_w)
    assert measured.forward_s == pytest.approx(1.0 + cost.forward_comm_exposed_s + slow_f)
