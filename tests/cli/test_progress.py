"""Issue 34, "the first hour": long commands tell their progress on stderr (done/total, elapsed, time left) and keep
stdout clean for `--json` and the YAML they print."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from paraplan.cli import progress as cli_progress
from paraplan.cli.main import app
from paraplan.cli.progress import LineProgress, duration, progress_line

runner = CliRunner()
EVERY_UNIT = {"PARAPLAN_PROGRESS_INTERVAL_S": "0", "COLUMNS": "200"}
LINE = re.compile(r"^(\w+): (\d+)/(\d+) ([\w ]+?)( \(.*\))?, (\w+) elapsed(, about (\w+) left)?$")


def small_csv(public_csv: Path, tmp_path: Path, sources: tuple[str, ...], per_source: int) -> Path:
    with public_csv.open() as fh:
        rows = list(csv.DictReader(fh))
    kept = [r for s in sources for r in [r for r in rows if r["source"] == s][:per_source]]
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
    return path


def progress_lines(stderr: str, task: str) -> list[re.Match[str]]:
    matches = [LINE.match(line) for line in stderr.splitlines()]
    return [m for m in matches if m and m.group(1) == task]


def test_duration_and_line() -> None:
    assert [duration(s) for s in (0, 42.4, 130, 3900)] == ["0s", "42s", "2m10s", "1h05m"]
    line = progress_line("calibrate", "fits", 3, 12, 60.0, "without X")
    assert line == "calibrate: 3/12 fits (without X), 1m00s elapsed, about 3m00s left"  # 20 s per fit, 9 left
    assert progress_line("validate", "rows", 5, 5, 2.0) == "validate: 5/5 rows, 2s elapsed"


def test_lines_come_at_most_every_interval_and_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(cli_progress.time, "monotonic", lambda: now[0])
    console = Console(record=True, width=200)
    report = LineProgress(console, "task", "units", interval_s=30.0)
    for done, at in [(1, 101), (2, 106), (3, 120), (4, 130), (5, 140), (6, 141)]:
        now[0] = at
        report(done, 6, f"u{done}")
    lines = console.export_text().splitlines()
    # the first once 5 s have passed (unit 2), the next 30 s later (unit 5 at 140 s), then the end
    assert [line.split(" (")[0] for line in lines] == ["task: 2/6 units", "task: 5/6 units", "task: 6/6 units"]
    quick = Console(record=True, width=200)
    report = LineProgress(quick, "task", "units", interval_s=30.0)
    for done in (1, 2, 3):
        now[0] += 1.0
        report(done, 3, "")
    assert quick.export_text() == ""  # done in 3 s, before the first line was due: a log stays quiet


def test_validate_tells_its_progress_on_stderr_and_json_stays_valid(public_csv: Path, tmp_path: Path) -> None:
    data = small_csv(public_csv, tmp_path, ("Korthikanti2022_Table5", "NeMo_perf_summary_24.07"), 4)
    result = runner.invoke(app, ["validate", "--data", str(data), "--json"], env=EVERY_UNIT)
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["rows"]) == 8  # stdout is the JSON alone
    lines = progress_lines(result.stderr, "validate")
    assert [int(m.group(2)) for m in lines] == list(range(1, 9))
    assert all(m.group(3) == "8" and m.group(4) == "rows" for m in lines)
    assert lines[0].group(8) is not None and lines[-1].group(8) is None  # time left, until the end


def test_tune_tells_its_progress_in_a_log_and_json_stays_valid() -> None:
    args = ["tune", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--gbs", "16", "--seq", "4096",
            "--executor", "serial", "--max-pp", "1", "--json"]  # fmt: skip
    result = runner.invoke(app, args, env=EVERY_UNIT)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["top"]
    lines = progress_lines(result.stderr, "tune")
    assert lines and lines[-1].group(2) == lines[-1].group(3) and lines[-1].group(4) == "candidates"


def test_calibrate_tells_its_progress_on_stderr(public_csv: Path, tmp_path: Path) -> None:
    pytest.importorskip("scipy", reason="scipy is not installed (the 'fit' extra)")
    data = small_csv(public_csv, tmp_path, ("Korthikanti2022_Table5",), 8)
    out = tmp_path / "calibration.yaml"
    args = ["calibrate", "--data", str(data), "--no-cv", "--max-evaluations", "1", "--out", str(out)]
    result = runner.invoke(app, args, env=EVERY_UNIT)
    assert result.exit_code == 0, result.output
    lines = progress_lines(result.stderr, "calibrate")
    assert lines and lines[-1].group(2) == lines[-1].group(3) and lines[0].group(4) == "block searches"
    assert "block searches" not in result.stdout
    table = yaml.safe_load(out.read_text())
    assert "family" in table
    from paraplan.validate.calibrate import fitted_constants

    counts = fitted_constants(table)  # Korthikanti's A100 rows: the Ampere family's constants, none per framework
    assert counts["total"] == counts["family"] + counts["framework"] > 0
    assert f"constants fitted: {counts['total']} ({counts['family']} per GPU family" in result.stdout


@pytest.mark.slow
def test_calibrate_with_cross_validation_counts_every_fit(public_csv: Path, tmp_path: Path) -> None:
    pytest.importorskip("scipy", reason="scipy is not installed (the 'fit' extra)")
    data = small_csv(public_csv, tmp_path, ("Korthikanti2022_Table5", "Narayanan2021_SC21_Table1"), 6)
    args = ["calibrate", "--data", str(data), "--max-evaluations", "1", "--splits", "none"]
    result = runner.invoke(app, args, env=EVERY_UNIT)
    assert result.exit_code == 0, result.output
    lines = progress_lines(result.stderr, "calibrate")
    # one fit without each source, then one on both
    assert [(m.group(2), m.group(3)) for m in lines] == [("1", "3"), ("2", "3"), ("3", "3")]
    assert lines[-1].group(5) == " (on every source)"
    assert "fits" not in result.stdout.split("calibration: error per source")[0]


def test_calibrate_splits_only_fits_once_per_held_out_group(public_csv: Path, tmp_path: Path) -> None:
    """--splits-only scores the splits without leave-one-source-out or the fit on every source: the forward split
    is one fit (on the releases before 2026) scored on Megatron-Bridge 26.02."""
    pytest.importorskip("scipy", reason="scipy is not installed (the 'fit' extra)")
    sources = ("Korthikanti2022_Table5", "MegatronBridge_perf_summary_25.11", "MegatronBridge_perf_summary_26.02")
    data = small_csv(public_csv, tmp_path, sources, 3)
    args = ["calibrate", "--data", str(data), "--max-evaluations", "1", "--splits", "forward", "--splits-only"]
    result = runner.invoke(app, args, env=EVERY_UNIT)
    assert result.exit_code == 0, result.output
    assert [(m.group(2), m.group(3)) for m in progress_lines(result.stderr, "calibrate")] == [("1", "1")]
    assert "held out by forward: source-balanced MAPE" in result.stdout
    assert "MegatronBridge_perf_summary_26.02" in result.stdout
    assert "calibration: error per source" not in result.stdout and "constants fitted" not in result.stdout


def test_calibrate_splits_only_refuses_what_it_cannot_do(public_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "calibration.yaml"
    args = ["calibrate", "--data", str(public_csv), "--splits-only", "--no-cv", "--out", str(out), "--splits", "none"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    for flag in ("--no-cv", "--out", "--splits none"):
        assert f"--splits-only with {flag}" in result.output
    assert "Traceback" not in result.output
