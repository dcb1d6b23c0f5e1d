"""HTML reports: one self-contained file each, plotly.js inline, one plot element per figure."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("plotly", reason="plotly is not installed (the 'report' extra)")

from paraplan.report import html  # noqa: E402
from paraplan.report.build_project import build_project  # noqa: E402


def _check_page(text: str, plots: int) -> None:
    assert text.startswith("<!DOCTYPE html>")
    assert len(text) > 1_000_000  # plotly.js is inline
    # nothing to load: no script with a src, no link but the inline favicon (the browser test also watches
    # the network; plotly.js names cdn.plot.ly for map data, which these plots never ask for)
    assert not re.search(r"<script[^>]+src=", text)
    assert re.findall(r"<link[^>]*>", text) == ['<link rel="icon" href="data:,">']
    assert text.count('class="paraplan-plot"') == plots
    assert f'data-plots="{plots}"' in text
    figures = re.search(r"var figs = (\[.*?\]);\n", text, re.S)
    assert figures is not None
    parsed = json.loads(figures.group(1).replace("<\\/", "</"))
    assert [f["id"] for f in parsed] == re.findall(r'<div id="(plot-\d+)" class="paraplan-plot">', text)
    assert all(f["fig"]["data"] for f in parsed)


def test_project_html(projection, tmp_path: Path) -> None:
    path = tmp_path / "project.html"
    text = html.project_report(projection, path)
    assert path.read_text(encoding="utf-8") == text
    _check_page(text, 3)
    assert "pipeline bubble" in text and "Pipeline timeline" in text


def test_tune_html(tune_rows, tmp_path: Path) -> None:
    rows, top = tune_rows
    text = html.tune_report(rows, tmp_path / "tune.html", top=top, title="tuning", capacity_gib=80)
    _check_page(text, 1)
    assert "<code>paraplan project --model llama3.1-8b" in text  # the reproduction commands, copyable


def test_validate_html(validation) -> None:
    text = html.validate_report(validation, title="validation <test>")
    _check_page(text, 2)
    assert "validation &lt;test&gt;" in text  # escaped
    assert "source-balanced" in text


def test_geo_html(geo_report) -> None:
    _check_page(html.geo_report(geo_report), 5)


def test_script_text_cannot_close_the_script_element(projection) -> None:
    report = build_project(projection)
    hostile = type(report)("x", "y", report.headlines, report.figures[1:2])
    bars = hostile.figures[0]
    object.__setattr__(bars, "categories", ("</script><script>alert(1)</script>",) + bars.categories[1:])
    text = html.render(hostile)
    body = text.split("</head>", 1)[1]
    assert "</script><script>alert(1)" not in body


def test_dense_timelines_are_drawn_as_a_raster() -> None:
    from paraplan.report import plotly_figures
    from paraplan.report.figures import Segment, Timeline

    segments = tuple(
        Segment(f"row {i % 2}", 0.01 * i, 0.01, "a" if i % 3 else "b") for i in range(plotly_figures.DENSE + 1)
    )
    t = Timeline("t", ("row 0", "row 1"), segments, {"a": "#111111", "b": "#222222"}, "time")
    x, grid = plotly_figures.raster(t, bins=100)
    assert len(x) == 100 and len(grid) == 2 and all(len(row) == 100 for row in grid)
    assert {v for row in grid for v in row} <= {0.0, 1.0, None}
    fig = plotly_figures.timeline_figure(t)
    assert fig.data[0].type == "heatmap" and [d.name for d in fig.data[1:]] == ["a", "b"]  # legend keys
    small = Timeline("t", ("row 0", "row 1"), segments[:3], {"a": "#111111", "b": "#222222"}, "time")
    assert {d.type for d in plotly_figures.timeline_figure(small).data} == {"bar"}
