"""Self-contained HTML reports: plotly.js inline (no CDN: they open offline), one file per report.

`project_report`, `tune_report`, `validate_report` and `geo_report` build a report from paraplan's results,
write it to `path` when one is given, and return the HTML. The page marks each plot `data-rendered` once
plotly has drawn it and, once every plot is drawn or has failed, sets `<body data-plots-rendered="N"
data-plots-failed="K">` (what the browser test waits for); a plot that fails logs a console error.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from paraplan.report.figures import Report, Table

if TYPE_CHECKING:
    from paraplan.geo.planner import GeoReport
    from paraplan.result import Projection
    from paraplan.validate.report import ValidationReport

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0; color: #222;
       background: #fafafa; }
main { max-width: 1360px; margin: 0 auto; padding: 18px 24px 40px; }
h1 { font-size: 24px; margin: 4px 0; }
.subtitle { color: #555; margin: 0 0 14px; font-size: 14px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin-bottom: 8px; }
.card { background: #fff; border: 1px solid #e2e2e2; border-radius: 8px; padding: 10px 16px; min-width: 150px; }
.card .label { font-size: 12px; color: #666; text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 22px; font-weight: 600; margin-top: 2px; }
.card.good .value { color: #2E7D32; } .card.bad .value { color: #C62828; }
section { background: #fff; border: 1px solid #e2e2e2; border-radius: 8px; margin: 14px 0; padding: 10px 14px; }
h2 { font-size: 17px; margin: 4px 0 6px; }
.caption { color: #555; font-size: 13px; margin: 4px 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid #eee; padding: 5px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; white-space: nowrap; }
tr.emphasis td { font-weight: 600; background: #f4faf4; }
code { font-size: 12px; word-break: break-all; }
.js-plotly-plot .plotly .modebar { opacity: 0; } .js-plotly-plot:hover .plotly .modebar { opacity: 1; }
footer { color: #888; font-size: 12px; margin-top: 18px; }
"""
ERROR_HOOK = (
    "window.__paraplanErrors = [];"
    "window.addEventListener('error', function (e) { window.__paraplanErrors.push(String(e.message)); });"
)
RENDER = """
(function () {
  var figs = %s;
  var done = 0, failed = 0;
  function settle() {
    if (done + failed < figs.length) { return; }
    document.body.setAttribute('data-plots-failed', String(failed));
    document.body.setAttribute('data-plots-rendered', String(done));
  }
  function fail(f, err) { failed += 1; console.error('plot ' + f.id + ' not drawn: ' + err); settle(); }
  figs.forEach(function (f) {
    try {
      Plotly.newPlot(f.id, f.fig.data, f.fig.layout, {displaylogo: false, responsive: true}).then(function (gd) {
        gd.setAttribute('data-rendered', 'true');
        done += 1;
        settle();
      }, function (err) { fail(f, err); });
    } catch (err) { fail(f, err); }
  });
  settle();
})();
"""


def _table_html(t: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
    body = []
    for i, row in enumerate(t.rows):
        cells = []
        for j, value in enumerate(row):
            text = html.escape(value)
            if j in t.code_columns and value not in ("", "-"):
                text = f"<code>{text}</code>"
            cls = ' class="num"' if j in t.numeric_columns else ""
            cells.append(f"<td{cls}>{text}</td>")
        cls = ' class="emphasis"' if i in t.emphasis_rows else ""
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _script_json(text: str) -> str:
    """JSON safe inside <script>: no '</' can close the element."""
    return text.replace("</", "<\\/")


def render(report: Report) -> str:
    """The report as one HTML document with plotly.js inline."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    from paraplan.report.plotly_figures import plotly_figure

    sections, figs = [], []
    for i, f in enumerate(report.figures):
        parts = [f"<h2>{html.escape(f.title)}</h2>"]
        if isinstance(f, Table):
            parts.append(_table_html(f))
        else:
            div_id = f"plot-{i}"
            parts.append(f'<div id="{div_id}" class="paraplan-plot"></div>')
            figs.append(f'{{"id": "{div_id}", "fig": {pio.to_json(plotly_figure(f), validate=False)}}}')
        if f.caption:
            parts.append(f'<p class="caption">{html.escape(f.caption)}</p>')
        sections.append(f"<section>{''.join(parts)}</section>")
    cards = "".join(
        f'<div class="card {h.tone}"><div class="label">{html.escape(h.label)}</div>'
        f'<div class="value">{html.escape(h.value)}</div></div>'
        for h in report.headlines
    )
    from paraplan import __version__

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(report.title)}</title>"
        '<link rel="icon" href="data:,">'
        f"<style>{CSS}</style><script>{ERROR_HOOK}</script>"
        f"<script>{get_plotlyjs()}</script></head>\n"
        f'<body data-plots="{report.plot_count}"><main>'
        f'<h1>{html.escape(report.title)}</h1><p class="subtitle">{html.escape(report.subtitle)}</p>'
        f'<div class="cards">{cards}</div>{"".join(sections)}'
        f"<footer>paraplan {__version__}: a projection, not a measurement.</footer></main>\n"
        f"<script>{RENDER % _script_json('[' + ','.join(figs) + ']')}</script></body></html>\n"
    )


def write(report: Report, path: str | Path | None) -> str:
    text = render(report)
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


# ----------------------------------------------------------------------------- the four reports
def project_report(projection: Projection, path: str | Path | None = None) -> str:
    """Needs a projection made with `ProjectionOptions(record_events=True)` (the timeline)."""
    from paraplan.report.build_project import build_project

    return write(build_project(projection), path)


def validate_report(result: ValidationReport, path: str | Path | None = None, *, title: str = "") -> str:
    from paraplan.report.build_validate import build_validate

    return write(build_validate(result, title), path)


def geo_report(report: GeoReport, path: str | Path | None = None) -> str:
    from paraplan.report.build_geo import build_geo

    return write(build_geo(report), path)


def tune_report(
    evaluated: Sequence[Mapping],
    path: str | Path | None = None,
    *,
    top: Sequence[Mapping] | None = None,
    top_k: int = 10,
    title: str = "",
    capacity_gib: float | None = None,
    elapsed_s: float | None = None,
) -> str:
    """`evaluated`: every evaluated candidate as a dict (the rows of `paraplan tune --csv`, or dicts with
    the same keys); `top`: the tuner's ranked top entries (`{config..., step_time_s, tokens_per_sec_per_gpu,
    mfu, memory: {peak_gib, fits}, command}`); without them the top K are the fastest that fit."""
    from paraplan.report.build_tune import build_tune

    report = build_tune(evaluated, top, top_k=top_k, title=title, capacity_gib=capacity_gib, elapsed_s=elapsed_s)
    return write(report, path)


__all__ = ["render", "write", "project_report", "validate_report", "geo_report", "tune_report"]
