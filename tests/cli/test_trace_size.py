"""`--trace` and `--chakra` say what they wrote and refuse, before writing, an output over `--trace-max-mib`
(issue 34: 1-2 GB were written without a word)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.api import project
from paraplan.cli.main import app
from paraplan.errors import ConfigError
from paraplan.projection import ProjectionOptions
from paraplan.report.trace import MIB, expected_trace_bytes, write_projection_trace

runner = CliRunner()
PLAN = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--tp", "8", "--pp", "8",
        "--sp", "--gbs", "64"]  # fmt: skip


def refused(args: list[str], fragment: str) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert fragment in result.output, result.output
    return result.output


def test_written_size_is_said_and_true(tmp_path: Path) -> None:
    path = tmp_path / "step.json"
    result = runner.invoke(app, [*PLAN, "--trace", str(path)])
    assert result.exit_code == 0, result.output
    said = re.search(r"wrote .*step\.json: ([\d,]+) events, ([\d.,]+) MiB", result.output)
    assert said, result.output
    assert float(said.group(2)) == pytest.approx(path.stat().st_size / MIB, abs=0.005)


def test_refused_before_the_simulation_when_the_layout_shows_it(tmp_path: Path, monkeypatch) -> None:
    def simulate(*_: object, **__: object) -> None:
        pytest.fail("simulated a step whose trace the layout alone shows too large")

    monkeypatch.setattr("paraplan.projection.play_pipeline", simulate)
    path = tmp_path / "step.json"
    out = refused([*PLAN, "--trace", str(path), "--trace-max-mib", "0.1"], "the trace would be about 0.27 MiB")
    assert "1,024 forward and backward tasks, 896 pipeline sends, 150 bytes an event" in out
    assert "more than --trace-max-mib 0.1" in out
    assert not path.exists()


def test_refused_after_the_simulation_from_the_events(tmp_path: Path) -> None:
    """The layout's estimate (0.27 MiB) leaves out the collectives drawn beside the compute: the events count them."""
    path = tmp_path / "step.json"
    out = refused([*PLAN, "--trace", str(path), "--trace-max-mib", "0.35"], "the trace would be about 0.44 MiB")
    assert re.search(r"\(2,952 events x 1\d\d bytes\)", out), out
    assert not path.exists()


def test_the_estimate_from_the_events_is_within_a_few_percent(tmp_path: Path) -> None:
    p = project("llama3.1-8b", "h100-sxm5-80gb", 16, tp=2, pp=4, vpp=2, pipeline_schedule="interleaved", gbs=32, sp=True, fsdp=True,
                options=ProjectionOptions(record_events=True))  # fmt: skip
    _, nbytes = write_projection_trace(p, tmp_path / "a.json")
    assert expected_trace_bytes(p.train) <= nbytes  # the layout's figure stays below: it refuses no trace wrongly
    write_projection_trace(p, tmp_path / "b.json", max_mib=nbytes * 1.05 / MIB)
    with pytest.raises(ConfigError, match="the trace would be about"):
        write_projection_trace(p, tmp_path / "c.json", max_mib=nbytes * 0.95 / MIB)
    assert not (tmp_path / "c.json").exists()


def test_a_step_at_the_simulators_limit_is_refused_at_once(tmp_path: Path, monkeypatch) -> None:
    """pp 4096 x 256 micro-batches: 650 MB of trace, 120 s and 5.9 GB to simulate before; now refused first."""
    monkeypatch.setattr("paraplan.projection.play_pipeline", lambda *_, **__: pytest.fail("simulated"))
    args = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "4096", "--pp", "4096",
            "--num-layers", "8192", "--gbs", "256", "--trace", str(tmp_path / "t.json")]  # fmt: skip
    refused(args, "the trace would be about 600 MiB")


@pytest.mark.parametrize("limit", ["0", "-1", "nan"])
def test_the_limit_must_be_positive(tmp_path: Path, limit: str) -> None:
    refused([*PLAN, "--trace", str(tmp_path / "t.json"), "--trace-max-mib", limit], "--trace-max-mib must be > 0")


def test_chakra_written_size_is_said_and_true(tmp_path: Path) -> None:
    folder = tmp_path / "et"
    args = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "4", "--pp", "2", "--tp", "2",
            "--sp", "--gbs", "4", "--num-layers", "4", "--chakra", str(folder)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    said = re.search(r"wrote 4 Chakra traces \(([\d,]+) nodes, ([\d.,]+) MiB\)", result.output)
    assert said, result.output
    written = sum(p.stat().st_size for p in folder.glob("*.et"))
    assert float(said.group(2)) == pytest.approx(written / MIB, abs=0.005)


def test_chakra_refused_before_anything_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "et"
    args = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "4", "--pp", "2", "--tp", "2",
            "--sp", "--gbs", "64", "--num-layers", "4", "--chakra", str(folder), "--trace-max-mib", "0.05"]  # fmt: skip
    out = refused(args, "the Chakra traces would be at least")
    assert "more than --trace-max-mib 0.05" in out
    assert not folder.exists() or not any(folder.iterdir())
