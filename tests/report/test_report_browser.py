"""Each report in headless Chromium: every plot drawn, no console errors, nothing fetched (offline), and a
screenshot saved. Skipped where no Chromium is installed (CI installs Debian's `chromium`).

Screenshots go to $PARAPLAN_REPORT_SCREENSHOTS when it is set (CI artefacts), else to a temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("plotly", reason="plotly is not installed (the 'report' extra)")

from paraplan.report import html  # noqa: E402
from paraplan.report.browser import Chromium, find_chromium  # noqa: E402

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.slow,  # headless Chromium renders every report
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary (apt-get install chromium)"),
]


@pytest.fixture(scope="module")
def browser():
    with Chromium(CHROMIUM, width=1400, height=1000, timeout_s=60) as b:
        yield b


@pytest.fixture(scope="module")
def reports(tmp_path_factory, projection, tune_rows, validation, geo_report) -> dict[str, tuple[Path, int]]:
    """The four reports as files, with the number of plots each must show."""
    folder = tmp_path_factory.mktemp("reports")
    rows, top = tune_rows
    html.project_report(projection, folder / "project.html")
    html.tune_report(rows, folder / "tune.html", top=top, capacity_gib=80)
    html.validate_report(validation, folder / "validate.html")
    html.geo_report(geo_report, folder / "geo.html")
    plots = {"project": 3, "tune": 1, "validate": 2, "geo": 5}
    return {name: (folder / f"{name}.html", n) for name, n in plots.items()}


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    env = os.environ.get("PARAPLAN_REPORT_SCREENSHOTS")
    if env:
        Path(env).mkdir(parents=True, exist_ok=True)
        return Path(env)
    return tmp_path_factory.mktemp("screenshots")


@pytest.mark.parametrize("name", ["project", "tune", "validate", "geo"])
def test_report_renders_offline_without_errors(browser, reports, shots, name: str) -> None:
    path, plots = reports[name]
    shot = shots / f"{name}.png"
    check = browser.check(path, shot, scale=0.6)
    assert check.problems() == []
    assert check.plots_expected == check.plots_rendered == check.plots_with_svg == check.plots_with_traces == plots
    assert check.ok
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_a_missing_plot_or_a_console_error_fails(browser, reports, tmp_path: Path) -> None:
    path, _ = reports["validate"]
    text = path.read_text(encoding="utf-8")
    broken = text.replace('{"id": "plot-1",', '{"id": "no-such-div",', 1)  # the second plot is never drawn
    broken = broken.replace("</main>", "<script>console.error('boom')</script></main>", 1)
    bad = tmp_path / "broken.html"
    bad.write_text(broken, encoding="utf-8")
    check = browser.check(bad)
    assert not check.ok
    assert check.plots_expected == 2 and check.plots_with_svg < 2
    assert any("boom" in e for e in check.errors)
    assert any("plot-1" in e or "no-such-div" in e for e in check.errors)  # the page says which plot failed
    assert check.load_s < 20  # a failed plot ends the wait at once
