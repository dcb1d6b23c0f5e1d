"""The error split into per-step and per-micro-batch parts (`paraplan validate --decompose`)."""

import json

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.validate.decompose import by_source, cell_fits, depth_by_source, depth_fits
from paraplan.validate.measured import read_rows
from paraplan.validate.report import RowResult

runner = CliRunner()


def _row(row_id: str, cell: str, microbatches: int, measured: float, predicted: float, layers: int = 0) -> RowResult:
    return RowResult(
        id=row_id, source="synthetic", metric="step_time_s", measured=measured, predicted=predicted,
        group=("m", "gpu", 8), measured_step_s=measured, predicted_step_s=predicted, global_batch=8 * microbatches,
        microbatches=microbatches, cell=cell, cell_key=("synthetic", cell), depth_key=("synthetic", "wide"),
        depth_cell="wide", layers_per_rank=layers,
    )  # fmt: skip


def test_lines_recover_both_parts() -> None:
    # measured: 0.5 s per step + 2 s per micro-batch; projected: per step 0.1 s too long, per micro-batch 10% short
    rows = [_row(f"r{m}", "a", m, 0.5 + 2.0 * m, 0.6 + 1.8 * m) for m in (2, 4, 8)]
    rows.append(_row("alone", "b", 4, 9.0, 9.0))  # a cell of one run says nothing
    (fit,) = cell_fits(rows)
    assert fit.cell == "a" and fit.runs == 3 and fit.microbatches == (2, 4, 8)
    assert fit.measured_per_step_s == pytest.approx(0.5) and fit.measured_per_microbatch_s == pytest.approx(2.0)
    assert fit.per_step_error_s == pytest.approx(0.1)
    assert fit.per_microbatch_error_pct == pytest.approx(-10.0)
    assert fit.measured_residual_pct == pytest.approx(0.0, abs=1e-9)
    (split,) = by_source([fit])
    assert split.cells == 1 and split.runs == 3
    assert split.per_microbatch_mean_error_pct == pytest.approx(-10.0)
    assert split.per_step_mean_error_s == pytest.approx(0.1)


def test_nonlinear_measurements_show_a_residual() -> None:
    rows = [_row("r2", "a", 2, 5.0, 5.0), _row("r4", "a", 4, 9.0, 9.0), _row("r8", "a", 8, 20.0, 20.0)]
    (fit,) = cell_fits(rows)
    assert fit.measured_residual_pct > 1.0


def test_depth_lines_split_layers_from_the_rest_of_the_stage() -> None:
    # per micro-batch, measured: 2 ms + 3 ms per layer; projected: 1 ms + 3.3 ms per layer (per step: 0.1 s both)
    rows = [
        _row(f"L{n}m{m}", f"L{n}", m, 0.1 + m * (2e-3 + 3e-3 * n), 0.1 + m * (1e-3 + 3.3e-3 * n), layers=n)
        for n in (4, 6, 8)
        for m in (2, 4)
    ]
    rows.append(_row("other", "x", 2, 1.0, 1.0, layers=0))  # no depth: left out
    (fit,) = depth_fits(cell_fits(rows))
    assert fit.cell == "wide" and fit.cells == 3 and fit.layers_per_rank == (4, 6, 8)
    assert fit.measured_per_layer_s == pytest.approx(3e-3) and fit.measured_rest_s == pytest.approx(2e-3)
    assert fit.per_layer_error_pct == pytest.approx(10.0)
    assert fit.rest_error_s == pytest.approx(-1e-3)
    assert fit.measured_residual_pct == pytest.approx(0.0, abs=1e-6)
    (split,) = depth_by_source([fit])
    assert split.cells == 1 and split.per_layer_mean_error_pct == pytest.approx(10.0)
    assert split.rest_mean_error_s == pytest.approx(-1e-3)


def test_one_depth_says_nothing() -> None:
    rows = [_row(f"m{m}", "L4", m, 0.1 + 0.02 * m, 0.1 + 0.02 * m, layers=4) for m in (2, 4)]
    assert depth_fits(cell_fits(rows)) == []


def test_projected_time_per_microbatch_is_affine_in_the_depth(public_report) -> None:
    """The layers of a stage share one launch queue: the first costs its own time, each further one the larger of
    its host and GPU time (`cost.block.repeated_s`), so a stage's time per micro-batch is affine in its layer count
    and the projected depth line passes through every cell."""
    fits = cell_fits([r for r in public_report.rows if r.source == "vTrain_MICRO24_single"])  # rows projected alone
    depths = {d.cell: d for d in depth_fits(fits)}
    assert len(depths) > 50
    for f in fits:
        d = depths.get(f.depth_cell)
        if d is not None:
            line = d.projected_rest_s + d.projected_per_layer_s * f.layers_per_rank
            assert f.projected_per_microbatch_s == pytest.approx(line, rel=2e-3), f.cell


def test_projection_is_linear_in_microbatches_once_the_pipeline_is_full(public_csv, public_report) -> None:
    """1F1B: step = fill and drain + micro-batches x steady-state time, once each stage holds a micro-batch in flight
    (m >= pp); the projected line through such runs must pass through every one of them."""
    rows = [r for r in read_rows(public_csv) if r["source"] == "vTrain_MICRO24_single"]
    full = [r for r in rows if int(r["gbs"]) // (int(r["mbs"]) * int(r["dp"])) >= int(r["pp"])]
    ids = {r["id"] for r in full}
    projected = [r for r in public_report.rows if r.id in ids]  # each row is projected alone: validate_rows(full)
    fits = cell_fits(projected)
    assert len(fits) > 100
    by_cell = {}
    for r in projected:
        by_cell.setdefault(r.cell, []).append(r)
    for fit in fits:
        for r in by_cell[fit.cell]:
            line = fit.projected_per_step_s + fit.projected_per_microbatch_s * r.microbatches
            assert r.predicted_step_s == pytest.approx(line, rel=2e-3), (fit.cell, r.id)


def test_cli_decompose(public_csv) -> None:
    args = ["validate", "--data", str(public_csv), "--source", "vTrain_MICRO24_single", "--decompose"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Time per micro-batch" in result.output and "Per-step time" in result.output
    out = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    (split,) = out["decomposition"]["sources"]
    assert split["source"] == "vTrain_MICRO24_single" and split["cells"] == len(out["decomposition"]["cells"]) > 0
    cell = out["decomposition"]["cells"][0]
    assert set(cell) >= {"cell", "measured_per_step_s", "projected_per_microbatch_s", "per_microbatch_error_pct"}
    assert "Time per layer on the busiest rank" in result.output
    (depth,) = out["decomposition"]["depth"]["sources"]
    assert depth["cells"] == len(out["decomposition"]["depth"]["cells"]) > 0
    assert set(out["decomposition"]["depth"]["cells"][0]) >= {"cell", "measured_per_layer_s", "rest_error_s"}


def test_cli_decompose_without_cells(public_csv) -> None:
    args = ["validate", "--data", str(public_csv), "--source", "Korthikanti2022_Table5", "--decompose"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "nothing to decompose" in result.output
