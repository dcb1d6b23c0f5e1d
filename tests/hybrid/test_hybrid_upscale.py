"""Upscaling measured blocks through the core projection (no torch: the measurements are given), including
the CUDA path for H200 targets at 8 and 64 GPUs."""

from __future__ import annotations

import pytest

from paraplan.cost.calibration import calibration_for
from paraplan.measure.device import LocalDevices
from paraplan.measure.hybrid.plan import plan_benchmark
from paraplan.measure.hybrid.upscale import BlockTimes, upscale
from paraplan.projection import project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

H200 = LocalDevices("cuda", "NVIDIA H200", 1, 139.8 * 2**30)
TIMES = {  # one micro-batch, seconds: plausible H200 figures for seq 8192 (the test needs no accuracy)
    "dense": BlockTimes(0.012, 0.025),
    "moe": BlockTimes(0.030, 0.062),
    "embedding": BlockTimes(0.0002, 0.0015),
    "head": BlockTimes(0.010, 0.021),
}


def _project(model: str, gpus: int, train: TrainingSpec, times=TIMES, optimizer_s=2e-11):
    system = system_preset("h200-sxm-141gb", gpus)
    plan = plan_benchmark(model_preset(model), system, train, H200)
    return upscale(
        plan,
        system,
        {k: times[k] for k in plan.kinds},
        calibration_for(system.gpu.name, train.framework),
        optimizer_s_per_param=optimizer_s,
        comm=None,
        comm_scale_out=False,
        harness_overheads=False,
        device="cuda",
    )


@pytest.mark.parametrize("gpus", [8, 64])
def test_llama_on_h200_is_measured_compute_and_simulated_rest(gpus):
    train = TrainingSpec(seq_length=8192, global_batch_size=128).with_values(tp=1 if gpus == 8 else 2, pp=1)
    projection, sources, _ = _project("llama3.1-8b", gpus, train)
    assert projection.pipeline.measured_fraction == pytest.approx(1.0, abs=1e-3)
    assert set(sources) == set(projection.breakdown)
    assert sources["forward_compute"].origin == "measured" and sources["optimizer"].origin == "measured"
    assert sources["framework_overhead"].origin == "simulated"
    assert all(s.origin == "simulated" for p, s in sources.items() if "comm" in p or "dp_" in p)
    m = projection.train.num_microbatches
    expected_forward = m * (32 * TIMES["dense"].forward_s + TIMES["embedding"].forward_s + TIMES["head"].forward_s)
    overhead = m * projection.calibration.microbatch_overhead_s
    assert projection.breakdown["forward_compute"] == pytest.approx(expected_forward + overhead, rel=0.02)


@pytest.mark.parametrize("gpus", [8, 64])
def test_mixtral_on_h200(gpus):
    train = TrainingSpec(seq_length=4096, global_batch_size=64).with_values(ep=8, pp=1 if gpus == 8 else 4)
    projection, sources, _ = _project("mixtral-8x7b", gpus, train)
    assert projection.pipeline.measured_fraction == pytest.approx(1.0, abs=1e-3)
    assert sources["ep_comm_exposed"].origin == "simulated"
    assert projection.pipeline.comm_total_s["ep"] > 0  # the cut all-to-all, restored from the model
    if gpus == 64:
        assert "pipeline_bubble" in sources and sources["pipeline_bubble"].origin == "simulated"


def test_measured_times_drive_the_step():
    train = TrainingSpec(seq_length=8192, global_batch_size=64).with_values(pp=4)
    base, _, _ = _project("llama3.1-8b", 32, train)
    doubled = {k: BlockTimes(2 * t.forward_s, 2 * t.backward_s) for k, t in TIMES.items()}
    slow, _, _ = _project("llama3.1-8b", 32, train, times=doubled)
    compute = ("forward_compute", "backward_compute")
    ratio = sum(slow.breakdown[p] for p in compute) / sum(base.breakdown[p] for p in compute)
    assert ratio == pytest.approx(2.0, rel=0.02)
    analytic = project_specs(model_preset("llama3.1-8b"), system_preset("h200-sxm-141gb", 32), train)
    assert analytic.pipeline.measured_fraction == 0.0


def test_zero_bubble_uses_the_measured_b_w_split():
    train = TrainingSpec(seq_length=8192, global_batch_size=64).with_values(pp=4, pipeline_schedule="zb-h1")
    times = {k: BlockTimes(t.forward_s, t.backward_s, backward_input_s=t.backward_s / 2) for k, t in TIMES.items()}
    split, _, _ = _project("llama3.1-8b", 32, train, times=times)
    early = {k: BlockTimes(t.forward_s, t.backward_s, backward_input_s=t.backward_s * 0.9) for k, t in TIMES.items()}
    late, _, _ = _project("llama3.1-8b", 32, train, times=early)
    assert split.step_time_s < late.step_time_s  # more W to move into the bubbles


def test_compute_is_scaled_back_when_memory_forced_a_smaller_shard():
    train = TrainingSpec(seq_length=8192, global_batch_size=64)
    system = system_preset("h200-sxm-141gb", 64)
    small = LocalDevices("cuda", "NVIDIA H200", 1, 8 * 2**30)
    plan = plan_benchmark(model_preset("llama3.1-70b"), system, train, small)
    assert plan.shard.tp > 1
    kwargs = dict(optimizer_s_per_param=None, comm=None, comm_scale_out=False, harness_overheads=False, device="cuda")
    cal = calibration_for(system.gpu.name)
    times = {k: TIMES[k] for k in plan.kinds}
    scaled, _, _ = upscale(plan, system, times, cal, **kwargs)
    full = plan_benchmark(model_preset("llama3.1-70b"), system, train, H200)
    unscaled, _, _ = upscale(full, system, times, cal, **kwargs)
    ratio = scaled.breakdown["forward_compute"] / unscaled.breakdown["forward_compute"]
    assert ratio == pytest.approx(plan.shard.tp / full.shard.tp, rel=0.25)


def test_straggler_wait_grows_with_jitter_and_data_parallel_ranks():
    from paraplan.measure.hybrid.straggler import expected_max_normal

    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / 3.141592653589793**0.5, rel=1e-4)  # E[max of 2] = 1/sqrt(pi)
    jittery = {k: BlockTimes(t.forward_s, t.backward_s, jitter_s=0.05 * (t.forward_s + t.backward_s))
               for k, t in TIMES.items()}  # fmt: skip
    waits = []
    for gpus in (8, 64):  # 16 micro-batches per rank in both
        train = TrainingSpec(seq_length=8192, global_batch_size=16 * gpus)
        projection, sources, _ = _project("llama3.1-8b", gpus, train, times=jittery)
        waits.append(projection.breakdown["straggler_wait"])
        assert sources["straggler_wait"].origin == "simulated"
        assert sum(projection.breakdown.values()) == pytest.approx(projection.step_time_s, rel=1e-9)
    assert 0 < waits[0] < waits[1]  # the slowest of 64 lags more than the slowest of 8
    assert waits[1] / waits[0] == pytest.approx(expected_max_normal(64) / expected_max_normal(8), rel=1e-6)
    steady, _, _ = _project("llama3.1-8b", 8, TrainingSpec(seq_length=8192, global_batch_size=128))
    assert "straggler_wait" not in steady.breakdown
