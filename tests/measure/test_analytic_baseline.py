"""The analytic cost model as the baseline of `paraplan fit`: device names to presets, the model's times on
regressor features, and its error on the shipped A100 samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from paraplan.cost.calibration import calibration_for
from paraplan.cost.compute import compute_time_s
from paraplan.graph.ops import GemmShape, Op, OpKind, Phase
from paraplan.measure.analytic import analytic_error, analytic_time_us, preset_for_device
from paraplan.specs.presets import system_preset


@pytest.mark.parametrize(
    ("device", "preset"),
    [
        ("NVIDIAA100-SXM4-80GB", "a100-sxm4-80gb"),  # the shipped Perlmutter samples
        ("NVIDIAA100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIAGH200120GB", "gh200"),  # the shipped Vista samples: not "h200"
        ("NVIDIAH200", "h200-sxm-141gb"),  # torch's name on the lent H200
        ("NVIDIAH10080GBHBM3", "h100-sxm5-80gb"),
        ("NVIDIAB200", "b200"),
        ("CPU-IntelXeon", None),
        ("NVIDIAL4", None),
    ],
)
def test_device_names_map_to_presets(device: str, preset: str | None) -> None:
    assert preset_for_device(device) == preset


def test_gemm_baseline_is_the_cost_model() -> None:
    features = np.array([[4096.0, 3072.0, 1024.0], [2048.0, 8192.0, 4096.0]])
    gpu = system_preset("a100-sxm4-80gb", 1).gpu
    cal = calibration_for("a100-sxm4-80gb", "")
    forward = analytic_time_us("gemm", "gemm", "fwd", features, "a100-sxm4-80gb", "fp16")
    backward = analytic_time_us("gemm", "gemm", "bwd", features, "a100-sxm4-80gb", "fp16")
    m, n, k = (int(v) for v in features[0])
    op = Op("g", OpKind.GEMM, Phase.FORWARD, flops=2.0 * m * n * k, gemm=GemmShape(m, n, k), precision="fp16")
    assert forward[0] == pytest.approx(compute_time_s(op, gpu, cal) * 1e6)
    assert np.all(backward > 1.5 * forward)  # dX and dW: two GEMMs of the forward's FLOPs


def test_elementwise_baseline_moves_the_bytes_of_the_modelled_kernel() -> None:
    """The feature is the profile's nominal traffic; the baseline times what graph.layers moves. Megatron's eager
    cross-entropy moves more than the nominal fused-kernel bytes, a fused LayerNorm exactly those."""
    nominal = np.array([[1e9]])
    norm = analytic_time_us("elementwise", "layernorm", "fwd", nominal, "a100-sxm4-80gb", "fp16")
    loss = analytic_time_us("elementwise", "cross_entropy", "fwd", nominal, "a100-sxm4-80gb", "fp16")
    cal = calibration_for("a100-sxm4-80gb", "")
    bandwidth = system_preset("a100-sxm4-80gb", 1).gpu.hbm_bytes_per_s * cal.memory_efficiency
    assert norm[0] == pytest.approx((1e9 / bandwidth + cal.kernel_launch_s) * 1e6)
    assert loss[0] > 3 * norm[0]


def test_no_baseline_without_a_preset_or_for_collectives() -> None:
    features, times = np.array([[1e6]]), np.array([10.0])
    assert analytic_error("elementwise", "layernorm", "fwd", features, times, None, "fp16") is None
    assert analytic_error("collective", "all_reduce", "comm", features, times, "a100-sxm4-80gb", "fp16") is None


def test_error_and_ratio_are_taken_against_the_measured_times() -> None:
    """One sample timed exactly as modelled, one twice as slow: MAPE (0 + 0.5) / 2, median measured/model 1.5."""
    features = np.array([[2048.0, 4096.0, 4096.0], [8192.0, 1024.0, 512.0]])
    times = analytic_time_us("gemm", "gemm", "fwd", features, "gh200", "bf16") * np.array([1.0, 2.0])
    error = analytic_error("gemm", "gemm", "fwd", features, times, "gh200", "bf16")
    assert error is not None and error.mape == pytest.approx(0.25) and error.ratio == pytest.approx(1.5)


@pytest.mark.slow  # fits every regressor family on the kernel samples (~30 s)
def test_fit_reports_the_analytic_error_per_regressor(kernel_samples: Path, tmp_path: Path) -> None:
    """On the A100 samples the analytic GEMM and attention models (fitted on measured training steps, not on these
    kernels) are within 20% on average; the report carries it next to the regressor's own error. The attention
    samples are timed over the full square: read as causal, they ran at twice the analytic time."""
    from test_measure_fit import small_copy

    from paraplan.measure.fit import fit_profile

    result = fit_profile(small_copy(kernel_samples, tmp_path / "samples"))
    reports = {r.name: r for r in result.regressors}
    gemm = reports["gemm.fwd"].analytic
    assert gemm is not None and gemm.mape < 0.20 and 0.8 < gemm.ratio < 1.25
    attention = reports["attention.fwd"].analytic
    assert attention is not None and attention.mape < 0.20 and 0.8 < attention.ratio < 1.25
    assert reports["all_reduce.1x4"].analytic is None
