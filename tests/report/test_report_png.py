"""PNG reports through matplotlib: one image per report, every figure drawn."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="matplotlib is not installed (the 'report' extra)")

from paraplan.report import png  # noqa: E402
from paraplan.report.build_tune import build_tune  # noqa: E402
from paraplan.report.png import is_dark, mpl_color, table_lines  # noqa: E402


def _size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_all_four_pngs(projection, tune_rows, validation, geo_report, tmp_path: Path) -> None:
    rows, top = tune_rows
    png.project_report(projection, tmp_path / "project.png")
    png.tune_report(rows, tmp_path / "tune.png", top=top, capacity_gib=80)
    png.validate_report(validation, tmp_path / "validate.png")
    png.geo_report(geo_report, tmp_path / "geo.png")
    for name in ("project", "tune", "validate", "geo"):
        width, height = _size(tmp_path / f"{name}.png")
        assert width == 1400 and height > 600, name


def test_table_lines_wrap_commands(tune_rows) -> None:
    rows, top = tune_rows
    table = build_tune(rows, [dict(top[0], command="paraplan project " + "--flag " * 60)]).figures[1]
    lines = table_lines(table)
    assert all(len(text) <= 200 for text, _ in lines)
    assert lines[0][1] and lines[2][1]  # header and the winner in bold
    assert len(lines) > 3  # the long command wrapped onto continuation lines


def test_colours() -> None:
    assert mpl_color("rgba(255,0,0,0.5)") == (1.0, 0.0, 0.0, 0.5)
    assert mpl_color("#123456") == "#123456"
    assert is_dark("#4C78A8") and not is_dark("#E0E0E0")
