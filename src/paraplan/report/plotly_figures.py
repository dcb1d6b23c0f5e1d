"""`figures` -> plotly figures (needs the `report` extra)."""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from paraplan.report.figures import XY, Bars, Figure, Panel, Timeline, Trace

FONT = dict(family="-apple-system, Segoe UI, Helvetica, Arial, sans-serif", size=13)
DENSE = 4000
RASTER_BINS = 2000
_SYMBOLS = {"circle": "circle", "x": "x", "star": "star", "diamond": "diamond"}


def _layout(fig: go.Figure, height: int) -> None:
    fig.update_layout(
        template="plotly_white",
        font=FONT,
        height=height,
        margin=dict(l=10, r=30, t=40, b=50),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
        hoverlabel=dict(font_size=12),
    )


def _short(v: float) -> float:
    """Six significant digits: the JSON of a timeline of 50,000 segments stays small."""
    return float(f"{v:.6g}")


def raster(t: Timeline, bins: int = RASTER_BINS) -> tuple[list[float], list[list[float | None]]]:
    """The timeline as a grid: per row and time bin, the index (in `t.colors`) of the category that covers
    most of the bin, None where nothing runs. Bin centres and the grid."""
    import numpy as np

    cats = list(t.colors)
    index = {row: i for i, row in enumerate(t.rows)}
    end = max((s.start + s.length for s in t.segments), default=1.0)
    width = end / bins
    cover = np.zeros((len(t.rows), len(cats), bins))
    for s in t.segments:
        r, c = index[s.row], cats.index(s.category)
        a, b = s.start, s.start + s.length
        for k in range(int(a / width), min(bins - 1, int(b / width)) + 1):
            cover[r, c, k] += max(0.0, min(b, (k + 1) * width) - max(a, k * width))
    best = cover.argmax(axis=1).astype(float)
    best[cover.max(axis=1) <= 0] = np.nan
    grid = [[None if v != v else float(v) for v in row] for row in best]
    return [(k + 0.5) * width for k in range(bins)], grid


def _heatmap(t: Timeline) -> list:
    """Dense timelines as an image (one canvas instead of tens of thousands of SVG bars), with legend keys."""
    x, grid = raster(t)
    colors = list(t.colors.values())
    k = len(colors)
    scale = []
    for i, color in enumerate(colors):
        scale += [[i / k, color], [(i + 1) / k, color]]
    names = list(t.colors)
    text = [[names[int(v)] if v is not None else "" for v in row] for row in grid]
    traces: list = [
        go.Heatmap(
            x=[_short(v) for v in x], y=list(range(len(t.rows))), z=grid, zmin=-0.5, zmax=k - 0.5, colorscale=scale,
            showscale=False, text=text, hovertemplate="%{text}<br>%{x:,.2f}<extra></extra>", xgap=0, ygap=3,
        )
    ]  # fmt: skip
    traces += [
        go.Scatter(x=[None], y=[None], mode="markers", name=name, marker=dict(symbol="square", size=10, color=c))
        for name, c in t.colors.items()
    ]
    return traces


def timeline_figure(t: Timeline) -> go.Figure:
    """Rows are numeric positions with the row names as tick labels (smaller JSON than names per segment).
    Up to DENSE segments are bars with a hover label each; more are drawn as a raster of RASTER_BINS time
    bins per row (at or above screen resolution)."""
    fig = go.Figure()
    index = {row: i for i, row in enumerate(t.rows)}
    if len(t.segments) > DENSE:
        fig.add_traces(_heatmap(t))
    for category, color in t.colors.items() if len(t.segments) <= DENSE else ():
        segs = [s for s in t.segments if s.category == category]
        fig.add_trace(
            go.Bar(
                name=category,
                orientation="h",
                y=[index[s.row] for s in segs],
                x=[_short(s.length) for s in segs],
                base=[_short(s.start) for s in segs],
                marker=dict(color=color, line=dict(width=0)),
                hovertext=[s.label for s in segs],
                hovertemplate="%{hovertext}<br>%{base:,.2f} + %{x:,.2f}<extra>" + category + "</extra>",
                width=0.8,
            )
        )
    for k, (x, label) in enumerate(t.markers):  # neighbouring labels point away from each other
        fig.add_vline(x=x, line=dict(color="#333", width=1, dash="dot"))
        side = "center" if len(t.markers) == 1 else ("right" if k < len(t.markers) - 1 else "left")
        fig.add_annotation(
            x=x, y=1.0, yref="paper", text=label, showarrow=False, yanchor="bottom", xanchor=side, font_size=11
        )
    fig.update_yaxes(
        tickmode="array", tickvals=list(range(len(t.rows))), ticktext=list(t.rows), autorange="reversed",
        tickfont_size=11, showgrid=False, zeroline=False,
    )  # fmt: skip
    fig.update_xaxes(title_text=t.x_label, rangemode="tozero")
    fig.update_layout(barmode="overlay", bargap=0.1)
    _layout(fig, 140 + 20 * len(t.rows))
    fig.update_layout(margin=dict(t=60), legend=dict(y=1.06))
    return fig


def _bar_totals(b: Bars) -> list[float]:
    return [sum(s.values[i] for s in b.series) for i in range(len(b.categories))]


def bars_figure(b: Bars) -> go.Figure:
    fig = go.Figure()
    single = len(b.series) == 1
    for s in b.series:
        values, cats = list(s.values), list(b.categories)
        fig.add_trace(
            go.Bar(
                name=s.name,
                orientation="h" if b.horizontal else "v",
                x=values if b.horizontal else cats,
                y=cats if b.horizontal else values,
                marker=dict(color=list(s.color) if isinstance(s.color, tuple) else s.color),
                text=list(s.text) or None,
                textposition="outside" if single else "inside",
                insidetextanchor="middle",
                cliponaxis=False,
                hoverinfo="x+y+name" if not single else "x+y",
                showlegend=not single,
            )
        )
    totals = _bar_totals(b)
    if b.totals:
        for cat, total, label in zip(b.categories, totals, b.totals, strict=True):
            pos = dict(x=total, y=cat, xanchor="left", xshift=4) if b.horizontal else dict(x=cat, y=total, yshift=10)
            fig.add_annotation(text=label, showarrow=False, font_size=11, **pos)
    for i, line in enumerate(b.lines):  # labels alternate sides so that close lines stay readable
        style = dict(color=line.color, width=1.5, dash="dash" if line.dash else "solid")
        font = dict(size=11, color=line.color)
        if b.horizontal:
            fig.add_vline(x=line.value, line=style)
            side = "left" if i % 2 == 0 else "right"
            fig.add_annotation(
                x=line.value, y=1, yref="paper", text=line.label, showarrow=False, yanchor="bottom", xanchor=side,
                font=font,
            )  # fmt: skip
        else:
            fig.add_hline(y=line.value, line=style)
            fig.add_annotation(
                y=line.value, x=1, xref="paper", text=line.label, showarrow=False, xanchor="right",
                yanchor="bottom" if i % 2 == 0 else "top", font=font,
            )  # fmt: skip
    top = max(totals + [line.value for line in b.lines] + [1e-12])
    value_axis = dict(title_text=b.value_label)
    if b.log:
        low = min(v for v in totals if v > 0)
        value_axis.update(
            type="log", dtick="D2", range=[math.log10(low) - 0.3, math.log10(top) + (1.0 if single else 0.2)]
        )
    else:
        value_axis.update(range=[0, top * (1.45 if single and b.horizontal else 1.12)])
    if b.horizontal:
        fig.update_xaxes(**value_axis)
        fig.update_yaxes(autorange="reversed", automargin=True)
    else:
        fig.update_yaxes(**value_axis)
    fig.update_layout(barmode="stack", uniformtext=dict(minsize=10, mode="hide"), bargap=0.25)
    rows = len(b.categories)
    _layout(fig, max(260, 90 + 34 * rows) if b.horizontal else 420)
    return fig


def _scatter(tr: Trace, legend_seen: set[str]) -> go.Scatter:
    mode = tr.mode + ("+text" if tr.labels else "")
    show = tr.legend and tr.name not in legend_seen
    if show:
        legend_seen.add(tr.name)
    lines = "lines" in tr.mode
    return go.Scatter(
        name=tr.name,
        x=list(tr.x),
        y=list(tr.y),
        mode=mode,
        legendgroup=tr.name,
        showlegend=show,
        marker=dict(color=tr.color, symbol=_SYMBOLS.get(tr.symbol, "circle"), size=tr.size, opacity=tr.opacity),
        line=dict(
            color=tr.color,
            dash="dash" if tr.dash else "solid",
            shape="hv" if tr.step else "linear",
            width=0 if lines and tr.opacity == 0 else 2,
        ),
        fill={"zero": "tozeroy", "previous": "tonexty"}.get(tr.fill),
        fillcolor=(tr.fill_color or tr.color) if tr.fill else None,
        text=list(tr.labels) if tr.labels else None,
        textposition="top right",
        hovertext=list(tr.text) if tr.text else None,
        hoverinfo="text" if tr.text else "x+y+name",
    )


def _axis(log: bool, rng: tuple[float, float] | None) -> dict:
    out: dict = {"type": "log"} if log else {}
    if rng is not None:
        out["range"] = [math.log10(rng[0]), math.log10(rng[1])] if log else list(rng)
    return out


def xy_figure(xy: XY) -> go.Figure:
    n = len(xy.panels)
    titles = [p.title for p in xy.panels]
    fig = make_subplots(rows=1, cols=n, subplot_titles=titles if any(titles) else None, horizontal_spacing=0.07)
    seen: set[str] = set()
    for col, panel in enumerate(xy.panels, 1):
        _add_panel(fig, panel, col, seen)
    _layout(fig, 500)
    title_lines = max((p.title.count("<br>") + 1 for p in xy.panels if p.title), default=0)
    fig.update_layout(
        margin=dict(t=30 + 18 * title_lines, b=120), legend=dict(y=-0.2, yanchor="top", x=0, xanchor="left")
    )
    return fig


def _add_panel(fig: go.Figure, panel: Panel, col: int, seen: set[str]) -> None:
    for tr in panel.traces:
        fig.add_trace(_scatter(tr, seen), row=1, col=col)
    fig.update_xaxes(title_text=panel.x_label, row=1, col=col, **_axis(panel.log_x, panel.x_range))
    fig.update_yaxes(title_text=panel.y_label, row=1, col=col, **_axis(panel.log_y, panel.y_range))


def plotly_figure(f: Figure) -> go.Figure:
    if isinstance(f, Timeline):
        return timeline_figure(f)
    if isinstance(f, Bars):
        return bars_figure(f)
    if isinstance(f, XY):
        return xy_figure(f)
    raise TypeError(f"no plotly figure for {type(f).__name__}")
