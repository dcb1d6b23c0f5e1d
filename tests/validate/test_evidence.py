"""`paraplan project` shows the fitted and held-out error of the measured sources on the projected GPU's family."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.cost.calibration import fitted_table
from paraplan.validate.calibrate import source_scope
from paraplan.validate.evidence import evidence_for
from paraplan.validate.measured import read_rows


def test_hopper_projections_cite_the_hopper_sources() -> None:
    table = fitted_table()
    evidence = evidence_for("h100-sxm5-80gb")
    names = {e.source for e in evidence.sources}
    assert names == {"NeMo_perf_summary_24.07", "MegatronBridge_perf_summary_25.11"}
    for e in evidence.sources:
        assert e.fitted_mape_pct == table["fitted_mape_pct"][e.source]
        assert e.held_out_mape_pct == table["held_out_mape_pct"][e.source]
    assert evidence.balanced is not None
    fitted = table["fitted_mape_pct"]
    assert evidence.balanced.fitted_mape_pct == sum(fitted.values()) / len(fitted)
    assert "vTrain" not in evidence.line()


def test_a_family_without_measured_runs_says_so() -> None:
    line = evidence_for("mi300x").line()
    assert line.startswith("no measured cdna3 runs; all sources")


def test_the_shipped_scope_matches_the_data(public_csv) -> None:
    assert fitted_table()["source_scope"] == source_scope(read_rows(public_csv))


def test_project_prints_and_serialises_the_evidence() -> None:
    args = ["project", "--model", "llama3.1-8b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--gbs", "64"]
    result = CliRunner().invoke(app, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "measured-run error (ampere)" in result.output and "vTrain_MICRO24_single" in result.output
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)
    assert "Korthikanti2022_Table5" in data["validation"]["sources"]
    assert data["validation"]["gpu_family"] == "ampere"


def test_tune_prints_the_evidence_for_its_gpu() -> None:
    args = ["tune", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--gbs", "64", "--seq", "2048"]
    result = CliRunner().invoke(
        app, [*args, "--budget", "20", "--top", "1", "--executor", "serial"], terminal_width=300
    )
    assert result.exit_code == 0, result.output
    assert "measured-run error (hopper): MegatronBridge_perf_summary_25.11" in result.output
