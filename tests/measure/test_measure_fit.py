"""Fitting: family choice, export fidelity, held-out accuracy on the real samples, the `fit` command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from sample_files import copy_rows
from typer.testing import CliRunner

from paraplan.cost.profile import Profile
from paraplan.graph.ops import GemmShape, Op, OpKind, Phase
from paraplan.measure.datasets import mapping_for
from paraplan.measure.samples import parse_sample_name, read_sample_table

pytest.importorskip("sklearn", reason="scikit-learn is not installed (the 'fit' extra)")

from paraplan.measure.fit import (  # noqa: E402  (needs scikit-learn)
    _candidates,
    _export,
    _inputs_matrix,
    fit_profile,
    fit_regressor,
)


def gemm_like(rows: int, seed: int = 0, noise: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.exp(rng.uniform(np.log(256), np.log(16384), (rows, 3)))
    flops = 2 * x.prod(axis=1)
    # a launch floor, and a tile-quantisation ripple the power law cannot follow
    ripple = 1 + 0.3 * (np.ceil(x[:, 1] / 4096) * 4096 / x[:, 1] - 1) / 3
    time_us = (8 + flops / 2e8 * ripple) * np.exp(rng.normal(0, noise, rows))
    return x, time_us


def test_power_law_data_picks_the_physical_fit() -> None:
    rng = np.random.default_rng(0)
    x = np.exp(rng.uniform(np.log(1e6), np.log(1e9), (60, 1)))
    time_us = 3e-4 * x[:, 0] * np.exp(rng.normal(0, 0.01, 60))
    regressor, report = fit_regressor("gelu.fwd", "elementwise", "fwd", x, time_us)
    assert regressor is not None and report.shipped and report.family == "physical"
    assert report.cv_mape < 0.02
    assert regressor.time_us((1e8,)) == pytest.approx(3e4, rel=0.02)
    assert regressor.feature_min[0] == pytest.approx(x.min(), rel=1e-6)


@pytest.mark.parametrize("family", ["gbm", "forest"])
def test_exported_trees_reproduce_sklearn(family: str) -> None:
    x, time_us = gemm_like(300)
    candidate = next(c for c in _candidates(3, 0) if c.family == family)
    z = np.log(x) @ _inputs_matrix("gemm", 3, candidate.uses_work).T
    estimator = candidate.make(len(time_us)).fit(z, np.log(time_us))
    poly, trees = _export(candidate, estimator, z)
    assert trees is not None
    assert poly.predict(z) + trees.predict(z) == pytest.approx(estimator.predict(z), abs=1e-9)


def test_tree_family_wins_on_structure_and_round_trips() -> None:
    x, time_us = gemm_like(400)
    regressor, report = fit_regressor("gemm.fwd", "gemm", "fwd", x, time_us, families=("gbm", "physical"))
    assert regressor is not None and report.family == "gbm" and report.cv_mape < 0.05
    again = Profile.from_dict(
        json.loads(
            json.dumps(
                {
                    "format": "paraplan-profile",
                    "format_version": 1,
                    "gpu": "G",
                    "regressors": {"gemm.fwd": regressor.to_dict()},
                }
            )
        )
    )
    assert again.regressors["gemm.fwd"].predict_us(x[:20]) == pytest.approx(regressor.predict_us(x[:20]), rel=1e-6)


def test_too_few_or_too_poor() -> None:
    x, time_us = gemm_like(5)
    regressor, report = fit_regressor("gemm.fwd", "gemm", "fwd", x, time_us)
    assert regressor is None and "only 5 samples" in report.reason
    rng = np.random.default_rng(3)
    noise = np.exp(rng.normal(0, 1.0, 40))
    regressor, report = fit_regressor("gemm.fwd", "gemm", "fwd", gemm_like(40)[0], noise)
    assert regressor is None and "above 25%" in report.reason


def _held_out_mape(root: Path, op_files: list[str], direction: str, families: tuple[str, ...]) -> float:
    features, times = [], []
    for name in op_files:
        file = parse_sample_name(root / name)
        assert file is not None
        table = read_sample_table(file)
        mapping = mapping_for(file.category, file.op)
        assert not isinstance(mapping, str)
        column = dict(mapping.directions)[direction]
        features.append(mapping.features(table, direction))
        times.append(table.column(column))
    x, y = np.vstack(features), np.concatenate(times)
    test = np.random.default_rng(0).random(len(y)) < 0.2
    regressor, _ = fit_regressor("r", mapping.kind, direction, x[~test], y[~test], families=families)
    assert regressor is not None
    return float(np.mean(np.abs(regressor.predict_us(x[test]) / y[test] - 1)))


@pytest.mark.slow  # fits profiles on the kernel samples (15-25 s)
def test_held_out_gemm_and_attention(kernel_samples: Path) -> None:
    """Fit on 80% of the A100 rows, predict the other 20% (no outlier removal: the raw held-out rows)."""
    root = kernel_samples / "Perlmutter" / "operator"
    gemm = ["NVIDIAA100-SXM4-80GB_linear2_fp16.csv", "NVIDIAA100-SXM4-80GB_linear4_fp16.csv"]
    assert _held_out_mape(root, gemm, "fwd", ("gbm",)) < 0.06
    assert _held_out_mape(root, gemm, "bwd", ("gbm",)) < 0.06
    attention = ["NVIDIAA100-SXM4-80GB_flash_atten_fp16.csv"]
    assert _held_out_mape(root, attention, "fwd", ("gbm",)) < 0.10


def small_copy(kernel_samples: Path, target: Path, rows: int = 80) -> Path:
    operator = kernel_samples / "Perlmutter" / "operator"
    nccl = kernel_samples / "Perlmutter" / "nccl"
    for name in ("linear1", "linear3", "flash_atten", "layernorm", "baddbmm", "middleStage_optimizer"):
        copy_rows(operator / f"NVIDIAA100-SXM4-80GB_{name}_fp16.csv", target / "Perlmutter" / "operator", rows)
    shutil.copy(operator / "NVIDIAA100-SXM4-80GB.csv", target / "Perlmutter" / "operator")  # not a sample file
    copy_rows(nccl / "NVIDIAA100-SXM4-80GB_allreduce_fp16_1_4.csv", target / "Perlmutter" / "nccl", rows)
    return target


@pytest.mark.slow  # fits profiles on the kernel samples (15-25 s)
def test_fit_command_on_a_small_copy(kernel_samples: Path, tmp_path: Path, cli_app) -> None:
    samples = small_copy(kernel_samples, tmp_path / "samples")
    out = tmp_path / "a100.json"
    result = CliRunner().invoke(cli_app, ["fit", "--samples", str(samples), "--out", str(out), "--source", "test"])
    assert result.exit_code == 0, result.output
    assert "gemm.fwd" in result.stdout and "baddbmm" in result.stdout  # the table, and the skipped file
    profile = Profile.load(out)
    assert profile.gpu == "NVIDIAA100-SXM4-80GB" and profile.source == "test"
    assert {"gemm.fwd", "gemm.bwd", "attention.fwd", "layernorm.fwd", "optimizer", "all_reduce.1x4"} <= set(
        profile.regressors
    )
    files = profile.provenance["files"]
    assert files["Perlmutter/operator/NVIDIAA100-SXM4-80GB_linear1_fp16.csv"]["fwd"]["rows"] == 80
    assert "Perlmutter/operator/NVIDIAA100-SXM4-80GB_baddbmm_fp16.csv" in profile.provenance["skipped_files"]
    op = Op("qkv", OpKind.GEMM, Phase.FORWARD, gemm=GemmShape(2048, 6144, 2048))
    assert profile.op_time_s(op) is not None and profile.covers(op) == "gemm.fwd"


@pytest.mark.slow  # fits profiles on the kernel samples (15-25 s)
def test_fit_profile_reports_outliers(kernel_samples: Path, tmp_path: Path) -> None:
    samples = small_copy(kernel_samples, tmp_path / "samples", rows=60)
    result = fit_profile(samples)
    assert {c.label.split("/")[-1] for c in result.columns} >= {"NVIDIAA100-SXM4-80GB_linear1_fp16.csv"}
    for report in result.regressors:
        assert report.n_dropped == sum(c.counts.dropped for c in result.columns if c.regressor == report.name)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "not found"),
        ("empty", "no sample files"),
        ("garbled", "non-numeric"),
        ("ragged", "fields"),
        ("two_gpus", "several GPUs"),
    ],
)
def test_fit_command_bad_input(tmp_path: Path, cli_app, setup: str, message: str) -> None:
    samples = tmp_path / "samples"
    operator = samples / "operator"
    if setup != "missing":
        operator.mkdir(parents=True)
    if setup == "garbled":
        (operator / "G_gemm_fp16.csv").write_text("m,n,k,F_dur(us),B_dur(us)\n1,2,x,4,5\n")
    if setup == "ragged":
        (operator / "G_gemm_fp16.csv").write_text("m,n,k,F_dur(us),B_dur(us)\n1,2,3\n")
    if setup == "two_gpus":
        for gpu in ("A", "B"):
            (operator / f"{gpu}_gemm_fp16.csv").write_text("m,n,k,F_dur(us),B_dur(us)\n1,2,3,4,5\n")
    result = CliRunner().invoke(cli_app, ["fit", "--samples", str(samples), "--out", str(tmp_path / "p.json")])
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "p.json").exists()


def test_fit_command_missing_output_folder(tmp_path: Path, cli_app) -> None:
    result = CliRunner().invoke(cli_app, ["fit", "--samples", str(tmp_path), "--out", str(tmp_path / "no" / "p.json")])
    assert result.exit_code == 2 and "output folder does not exist" in result.stderr


def test_replicate_mape_is_the_spread_of_repeated_features() -> None:
    from paraplan.measure.fit import replicate_mape

    features = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [3.0, 4.0]])
    time_us = np.array([100.0, 110.0, 90.0, 7.0])
    floor, rows = replicate_mape(features, time_us)
    # leave one out: median(110, 90) = 100 vs 100; median(100, 90) = 95 vs 110; median(100, 110) = 105 vs 90
    assert rows == 3
    assert floor == pytest.approx((0.0 + 15 / 110 + 15 / 90) / 3)
    assert replicate_mape(features[2:], time_us[2:]) == (None, 0)
