"""The error split into per-step and per-micro-batch parts (`paraplan validate --decompose`)."""

import json

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.validate.decompose import by_source, cell_fits
from paraplan.validate.measured import read_rows
from paraplan.validate.report import RowResult, validate_rows

runner = CliRunner()


def _row(row_id: str, cell: str, microbatches: int, measured: float, predicted: float) -> RowResult:
    return RowResult(
        id=row_id, source="synthetic", metric="step_time_s", measured=measured, predicted=predicted,
        group=("m", "gpu", 8), measured_step_s=measured, predicted_step_s=predicted, global_batch=8 * microbatches,
        microbatches=microbatches, cell=cell, cell_key=("synthetic", cell),
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


def test_projection_is_linear_in_microbatches_once_the_pipeline_is_full(public_csv) -> None:
    """1F1B: step = fill and drain + micro-batches x steady-state time, once each stage holds a micro-batch in flight
    (m >= pp); the projected line through such runs must pass through every one of them."""
    rows = [r for r in read_rows(public_csv) if r["source"] == "vTrain_MICRO24_single"]
    full = [r for r in rows if int(r["gbs"]) // (int(r["mbs"]) * int(r["dp"])) >= int(r["pp"])]
    report = validate_rows(full)
    fits = cell_fits(report.rows)
    assert len(fits) > 100
    by_cell = {}
    for r in report.rows:
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
    out = json.loads(runner.invoke(app, [*args, "--json"]).output)
    (split,) = out["decomposition"]["sources"]
    assert split["source"] == "vTrain_MICRO24_single" and split["cells"] == len(out["decomposition"]["cells"]) > 0
    cell = out["decomposition"]["cells"][0]
    assert set(cell) >= {"cell", "measured_per_step_s", "projected_per_microbatch_s", "per_microbatch_error_pct"}


def test_cli_decompose_without_cells(public_csv) -> None:
    args = ["validate", "--data", str(public_csv), "--source", "Korthikanti2022_Table5", "--decompose"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "nothing to decompose" in result.output
