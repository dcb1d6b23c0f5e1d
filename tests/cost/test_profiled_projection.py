"""Profiles in projection: the shipped A100 profile replaces the analytic cost where it covers an op."""

import json

from typer.testing import CliRunner

from paraplan.cli.main import app

runner = CliRunner()
ARGS = ["project", "--model", "llama3.1-8b", "--gpus", "8", "--gbs", "16", "--seq", "2048", "--json"]


def test_shipped_profile_is_used_and_reported() -> None:
    out = runner.invoke(app, [*ARGS, "--gpu", "a100-sxm4-80gb", "--profile", "auto"])
    assert out.exit_code == 0, out.output
    profiled = json.loads(out.output)
    analytic = json.loads(runner.invoke(app, [*ARGS, "--gpu", "a100-sxm4-80gb"]).output)
    assert profiled["cost_sources"]["profiled_fraction"] > 0.5
    assert analytic["cost_sources"]["profiled_fraction"] == 0.0
    # two independent cost paths for the same step agree to within a third
    assert abs(profiled["step_time_s"] / analytic["step_time_s"] - 1) < 0.33


def test_auto_profile_for_a_gpu_without_one_is_bad_input() -> None:
    out = runner.invoke(app, [*ARGS, "--gpu", "b200", "--profile", "auto"])
    assert out.exit_code == 2
    assert "no profile is shipped for b200" in out.output


def test_missing_profile_file_is_bad_input(tmp_path) -> None:
    out = runner.invoke(app, [*ARGS, "--gpu", "a100-sxm4-80gb", "--profile", str(tmp_path / "none.json")])
    assert out.exit_code == 2
    assert "profile not found" in out.output
