"""The same reports as one PNG each, through matplotlib (for papers and chat; needs the `report` extra).

`project_report`, `tune_report`, `validate_report` and `geo_report` take the arguments of their namesakes in
`paraplan.report.html` and write `path`. Every figure of the report is drawn, one under the other, below
the headline numbers; tables are drawn as fixed-width text.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paraplan.report.figures import XY, Bars, Figure, Report, Table, Timeline, Trace

if TYPE_CHECKING:
    from paraplan.geo.planner import GeoReport
    from paraplan.result import Projection
    from paraplan.validate.report import ValidationReport

WIDTH_IN = 14.0
DPI = 100
TABLE_CHARS = 200
"""Characters per line of a table drawn at 8 pt in the figure width."""
_MARKERS = {"circle": "o", "x": "x", "star": "*", "diamond": "D"}
_TONES = {"good": "#2E7D32", "bad": "#C62828", "": "#222222"}


def mpl_color(color: str) -> Any:
    """Plotly colour strings ("#RRGGBB", "rgba(r,g,b,a)") as matplotlib colours."""
    if color.startswith("rgba("):
        r, g, b, a = (float(v) for v in color[5:-1].split(","))
        return (r / 255, g / 255, b / 255, a)
    return color


def is_dark(color: str) -> bool:
    """Whether white text reads better than black on `color` (relative luminance below one half)."""
    c = mpl_color(color)
    if isinstance(c, str) and c.startswith("#") and len(c) == 7:
        c = tuple(int(c[i : i + 2], 16) / 255 for i in (1, 3, 5))
    if not isinstance(c, tuple):
        return True
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2] < 0.5


def _plain(text: str) -> str:
    return text.replace("<br>", "\n")


# ----------------------------------------------------------------------------- heights (inches)
def figure_height(f: Figure) -> float:
    if isinstance(f, Timeline):
        return min(16.0, 1.6 + 0.2 * len(f.rows))
    if isinstance(f, Bars):
        return max(2.8, 1.4 + 0.34 * len(f.categories)) if f.horizontal else 4.2
    if isinstance(f, XY):
        return 4.8
    return 0.9 + 0.17 * len(table_lines(f))


# ----------------------------------------------------------------------------- drawing
def draw_header(sf: Any, report: Report) -> None:
    sf.text(0.01, 0.88, report.title, fontsize=17, fontweight="bold", va="top")
    sf.text(0.01, 0.6, textwrap.shorten(report.subtitle, 230), fontsize=9.5, color="#555555", va="top")
    weights = [max(len(h.label), len(h.value)) + 6 for h in report.headlines]
    total = sum(weights) or 1
    x = 0.01
    for h, w in zip(report.headlines, weights, strict=True):
        sf.text(x, 0.34, h.label.upper(), fontsize=8.5, color="#666666", va="top")
        sf.text(x, 0.2, h.value, fontsize=13, fontweight="bold", color=_TONES.get(h.tone, "#222222"), va="top")
        x += 0.98 * w / total


def draw_timeline(sf: Any, t: Timeline) -> None:
    ax = sf.subplots()
    index = {row: i for i, row in enumerate(t.rows)}
    for category, color in t.colors.items():
        by_row: dict[str, list[tuple[float, float]]] = {}
        for s in t.segments:
            if s.category == category:
                by_row.setdefault(s.row, []).append((s.start, s.length))
        for row, spans in by_row.items():
            # a thin edge keeps sub-pixel segments (short transfers) visible
            c = mpl_color(color)
            ax.broken_barh(spans, (index[row] - 0.4, 0.8), facecolors=c, edgecolors=c, linewidth=0.4)
        ax.bar(0, 0, color=mpl_color(color), label=category)  # legend entry
    for k, (x, label) in enumerate(t.markers):  # neighbouring labels point away from each other
        ax.axvline(x, color="#333333", linewidth=0.8, linestyle=":")
        side = "center" if len(t.markers) == 1 else ("right" if k < len(t.markers) - 1 else "left")
        ax.text(x, -0.7, f" {label} ", fontsize=7.5, ha=side, va="bottom")
    ax.set_yticks(range(len(t.rows)), t.rows, fontsize=7.5)
    ax.set_ylim(len(t.rows) - 0.5, -1.2)
    ax.set_xlim(left=0)
    ax.set_xlabel(t.x_label)
    ax.legend(loc="upper left", bbox_to_anchor=(0, 1.0), ncol=min(10, len(t.colors)), fontsize=8, frameon=False,
              borderaxespad=-2.2)  # fmt: skip
    ax.spines[["top", "right"]].set_visible(False)


def draw_bars(sf: Any, b: Bars) -> None:
    ax = sf.subplots()
    n = len(b.categories)
    positions = list(range(n))
    base = [0.0] * n
    totals = [sum(s.values[i] for s in b.series) for i in range(n)]
    span = max(totals + [line.value for line in b.lines] + [1e-12])
    single = len(b.series) == 1
    for s in b.series:
        colors = [mpl_color(c) for c in s.color] if isinstance(s.color, tuple) else mpl_color(s.color)
        if b.horizontal:
            bars = ax.barh(positions, s.values, left=base, color=colors, label=s.name, height=0.7)
        else:
            bars = ax.bar(positions, s.values, bottom=base, color=colors, label=s.name, width=0.6)
        for i, (bar, text) in enumerate(zip(bars, s.text, strict=False)):
            if not text:
                continue
            if single:
                end = base[i] + s.values[i]
                if b.horizontal:
                    ax.text(end, i, " " + text, va="center", ha="left", fontsize=8)
                else:
                    ax.text(i, end, text, va="bottom", ha="center", fontsize=8)
            elif s.values[i] >= 0.07 * span and not b.log:
                cx, cy = bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height() / 2
                ink = "white" if is_dark(s.color if isinstance(s.color, str) else s.color[i]) else "#222222"
                ax.text(cx, cy, text, va="center", ha="center", fontsize=7.5, color=ink)
        base = [a + v for a, v in zip(base, s.values, strict=True)]
    for i, label in enumerate(b.totals):
        if b.horizontal:
            ax.text(totals[i], i, " " + label, va="center", ha="left", fontsize=8)
        else:
            ax.text(i, totals[i], label, va="bottom", ha="center", fontsize=8)
    for k, line in enumerate(b.lines):
        style = dict(color=mpl_color(line.color), linewidth=1.2, linestyle="--" if line.dash else "-")
        if b.horizontal:
            ax.axvline(line.value, **style)
            ax.text(
                line.value, -0.6, line.label, fontsize=7.5, color=style["color"], ha="left" if k % 2 == 0 else "right"
            )
        else:
            ax.axhline(line.value, **style)
            ax.text(n - 0.5, line.value, line.label, fontsize=7.5, color=style["color"], ha="right",
                    va="bottom" if k % 2 == 0 else "top")  # fmt: skip
    if b.horizontal:
        ax.set_yticks(positions, b.categories, fontsize=8.5)
        ax.invert_yaxis()
        ax.set_xlabel(b.value_label)
        if b.log:
            ax.set_xscale("log")
            ax.set_xlim(min(v for v in totals if v > 0) / 2, span * (12 if single else 1.5))
        else:
            ax.set_xlim(0, span * (1.35 if single else 1.1))
    else:
        ax.set_xticks(positions, b.categories, fontsize=8.5)
        ax.set_ylabel(b.value_label)
        ax.set_ylim(0, span * 1.12)
    if not single:
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=min(8, len(b.series)), fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)


def _draw_trace(ax: Any, tr: Trace, previous: Trace | None, zorder: int) -> Any:
    color = mpl_color(tr.color)
    x, y = list(tr.x), list(tr.y)
    handle = None
    if "lines" in tr.mode:
        if tr.fill:
            low = list(previous.y) if tr.fill == "previous" and previous is not None else [0.0] * len(y)
            shade = mpl_color(tr.fill_color or tr.color)
            handle = ax.fill_between(x, low, y, step="post" if tr.step else None, color=shade, linewidth=0,
                                     zorder=zorder)  # fmt: skip
        if tr.opacity > 0:
            handle = ax.plot(x, y, color=color, linestyle="--" if tr.dash else "-", linewidth=1.2,
                             drawstyle="steps-post" if tr.step else "default",
                             marker=_MARKERS.get(tr.symbol) if "markers" in tr.mode else None,
                             markersize=tr.size * 0.6, zorder=zorder)[0]  # fmt: skip
    elif "markers" in tr.mode:
        handle = ax.scatter(x, y, s=tr.size**2 * 0.6, c=[color], marker=_MARKERS.get(tr.symbol, "o"), alpha=tr.opacity,
                            linewidths=0 if tr.symbol not in ("x",) else 1.0, zorder=zorder)  # fmt: skip
    for xi, yi, label in zip(x, y, tr.labels, strict=False):
        if label:
            ax.annotate(label, (xi, yi), xytext=(4, 4), textcoords="offset points", fontsize=8, color=color)
    return handle


def draw_xy(sf: Any, xy: XY) -> None:
    axes = sf.subplots(1, len(xy.panels), squeeze=False)[0]
    handles: dict[str, Any] = {}
    for ax, panel in zip(axes, xy.panels, strict=True):
        previous = None
        for z, tr in enumerate(panel.traces, 2):  # later traces on top, as in plotly
            handle = _draw_trace(ax, tr, previous, z)
            if tr.legend and handle is not None and tr.name not in handles:
                handles[tr.name] = handle
            previous = tr
        if panel.log_x:
            ax.set_xscale("log")
        if panel.log_y:
            ax.set_yscale("log")
        if panel.x_range:
            ax.set_xlim(*panel.x_range)
        if panel.y_range:
            ax.set_ylim(*panel.y_range)
        ax.set_title(_plain(panel.title), fontsize=9.5)
        ax.set_xlabel(panel.x_label)
        ax.set_ylabel(panel.y_label)
        ax.grid(True, color="#eeeeee", linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
    if handles:
        sf.legend(list(handles.values()), list(handles), loc="outside upper right", ncol=min(6, len(handles)),
                  fontsize=8, frameon=False)  # fmt: skip


def table_lines(t: Table) -> list[tuple[str, bool]]:
    """The table as fixed-width lines (text, emphasised); code columns wrap onto continuation lines."""
    widths = [max([len(c)] + [len(r[j]) for r in t.rows]) for j, c in enumerate(t.columns)]
    fixed = sum(w for j, w in enumerate(widths) if j not in t.code_columns) + 2 * len(widths)
    for j in t.code_columns:
        widths[j] = max(30, min(widths[j], TABLE_CHARS - fixed))

    def fmt(cells: list[str]) -> str:
        out = []
        for j, (cell, w) in enumerate(zip(cells, widths, strict=True)):
            out.append(cell.rjust(w) if j in t.numeric_columns else cell.ljust(w))
        return "  ".join(out).rstrip()

    lines = [(fmt(list(t.columns)), True), ("-" * min(TABLE_CHARS, sum(widths) + 2 * len(widths)), False)]
    for i, row in enumerate(t.rows):
        wrapped = [textwrap.wrap(c, widths[j]) or [""] if j in t.code_columns else [c] for j, c in enumerate(row)]
        for k in range(max(map(len, wrapped))):
            cells = [w[k] if k < len(w) else "" for w in wrapped]
            lines.append((fmt(cells), i in t.emphasis_rows))
    return lines


def draw_table(sf: Any, t: Table) -> None:
    ax = sf.subplots()
    ax.axis("off")
    lines = table_lines(t)
    step = 1 / max(len(lines), 1)
    for i, (text, bold) in enumerate(lines):
        ax.text(0, 1 - (i + 0.5) * step, text, family="monospace", fontsize=8, va="center",
                fontweight="bold" if bold else "normal")  # fmt: skip


def render(report: Report, path: str | Path) -> None:
    from matplotlib.figure import Figure as MplFigure

    heights = [1.3] + [figure_height(f) + 0.5 for f in report.figures]
    fig = MplFigure(figsize=(WIDTH_IN, sum(heights)), layout="constrained")
    subfigs = fig.subfigures(len(heights), 1, height_ratios=heights)
    draw_header(subfigs[0], report)
    draw = {Timeline: draw_timeline, Bars: draw_bars, XY: draw_xy, Table: draw_table}
    for sf, f in zip(subfigs[1:], report.figures, strict=True):
        draw[type(f)](sf, f)
        sf.suptitle(f.title, x=0.01, ha="left", fontsize=12, fontweight="bold")
        if f.caption:
            sf.supxlabel(textwrap.fill(f.caption, 190), x=0.01, ha="left", fontsize=8, color="#555555")
    fig.savefig(path, dpi=DPI, facecolor="white")


# ----------------------------------------------------------------------------- the four reports
def project_report(projection: Projection, path: str | Path) -> None:
    """Needs a projection made with `ProjectionOptions(record_events=True)` (the timeline)."""
    from paraplan.report.build_project import build_project

    render(build_project(projection), path)


def validate_report(result: ValidationReport, path: str | Path, *, title: str = "") -> None:
    from paraplan.report.build_validate import build_validate

    render(build_validate(result, title), path)


def geo_report(report: GeoReport, path: str | Path) -> None:
    from paraplan.report.build_geo import build_geo

    render(build_geo(report), path)


def tune_report(
    evaluated: Sequence[Mapping],
    path: str | Path,
    *,
    top: Sequence[Mapping] | None = None,
    top_k: int = 10,
    title: str = "",
    capacity_gib: float | None = None,
    elapsed_s: float | None = None,
) -> None:
    """See `paraplan.report.html.tune_report`."""
    from paraplan.report.build_tune import build_tune

    render(build_tune(evaluated, top, top_k=top_k, title=title, capacity_gib=capacity_gib, elapsed_s=elapsed_s), path)
