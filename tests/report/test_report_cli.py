"""--html and --png on project, validate and geo; a clear exit 2 without the report extra."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app

runner = CliRunner()
TINY_GEO = Path(__file__).resolve().parents[1] / "geo" / "tiny.yaml"
PROJECT = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--tp", "2", "--pp", "4",
           "--gbs", "16", "--seq", "2048", "--json"]  # fmt: skip


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_project_html_and_png(tmp_path: Path) -> None:
    pytest.importorskip("plotly", reason="plotly is not installed (the 'report' extra)")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the 'report' extra)")
    html, png = tmp_path / "p.html", tmp_path / "p.png"
    result = runner.invoke(app, [*PROJECT, "--html", str(html), "--png", str(png)])
    assert result.exit_code == 0, result.output
    assert html.read_text().count('class="paraplan-plot"') == 3
    assert _is_png(png)
    assert result.stdout.lstrip().startswith("{")  # --json output stays clean: the notes go to stderr


def test_geo_html(tmp_path: Path) -> None:
    pytest.importorskip("plotly", reason="plotly is not installed (the 'report' extra)")
    html = tmp_path / "g.html"
    result = runner.invoke(app, ["geo", "--config", str(TINY_GEO), "--json", "--html", str(html)])
    assert result.exit_code == 0, result.output
    assert html.read_text().count('class="paraplan-plot"') == 5


def test_validate_html(public_csv, tmp_path: Path) -> None:
    pytest.importorskip("plotly", reason="plotly is not installed (the 'report' extra)")
    html = tmp_path / "v.html"
    args = ["validate", "--data", str(public_csv), "--source", "Korthikanti2022_Table5", "--html", str(html)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = html.read_text()
    assert "Korthikanti2022_Table5" in text and text.count('class="paraplan-plot"') == 2


def test_without_the_report_extra_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from paraplan.report import extras

    monkeypatch.setattr(extras, "missing", lambda kind: extras.NEEDS[kind])
    html, png = tmp_path / "p.html", tmp_path / "p.png"
    result = runner.invoke(app, [*PROJECT, "--html", str(html), "--png", str(png)])
    assert result.exit_code == 2
    assert "needs plotly" in result.output and "needs matplotlib" in result.output
    assert "paraplan[report]" in result.output and "Traceback" not in result.output
    assert not html.exists() and not png.exists()
    result = runner.invoke(app, ["geo", "--config", str(TINY_GEO), "--png", str(png)])
    assert result.exit_code == 2 and "needs matplotlib" in result.output


def test_tune_html_and_png(tmp_path: Path) -> None:
    pytest.importorskip("plotly", reason="plotly is not installed (the 'report' extra)")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the 'report' extra)")
    html, png, out_csv = tmp_path / "t.html", tmp_path / "t.png", tmp_path / "all.csv"
    args = ["tune", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--gbs", "16", "--seq", "4096",
            "--max-pp", "2", "--max-cp", "1", "--max-mbs", "2", "--executor", "serial", "--top", "3", "--json",
            "--csv", str(out_csv), "--html", str(html), "--png", str(png)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    text = html.read_text()
    assert text.count('class="paraplan-plot"') == 1
    assert f"{len(out_csv.read_text().splitlines()) - 1:,} configurations evaluated" in text
    for entry in out["top"]:  # the top K with their reproduction commands
        assert f"<code>{entry['command']}</code>" in text
    assert _is_png(png)
