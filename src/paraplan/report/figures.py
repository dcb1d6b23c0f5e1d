"""Figures as plain data, shared by the HTML (plotly) and PNG (matplotlib) renderers.

A report is a title, a few headline numbers (the answer at a glance) and a list of figures of four kinds:
`Timeline` (horizontal segments per row: a pipeline step), `Bars` (stacked bars), `XY` (panels of scatter
and line traces) and `Table`. The builders (`build_*`) turn paraplan's results into these; the renderers
know nothing of paraplan. Nothing here imports plotly or matplotlib, so the builders work and are tested
without the `report` extra.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Okabe-Ito / Tableau-like colours that stay apart for colour-blind readers and in greyscale print.
PALETTE = (
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#B279A2",
    "#E45756",
    "#72B7B2",
    "#EECA3B",
    "#9D755D",
    "#FF9DA6",
    "#BAB0AC",
)
GOOD = "#2E7D32"
BAD = "#C62828"
MUTED = "#9E9E9E"


@dataclass(frozen=True, slots=True)
class Headline:
    """One number of the answer, shown large at the top of the report."""

    label: str
    value: str
    tone: str = ""  # "" | "good" | "bad"


@dataclass(frozen=True, slots=True)
class Segment:
    row: str
    start: float
    length: float
    category: str
    label: str = ""


@dataclass(frozen=True)
class Timeline:
    """Segments on named rows (top to bottom in `rows` order), coloured by category."""

    title: str
    rows: tuple[str, ...]
    segments: tuple[Segment, ...]
    colors: dict[str, str]
    """Category -> colour, in legend order."""
    x_label: str
    markers: tuple[tuple[float, str], ...] = ()
    """Vertical lines (x, label): the end of the step, ..."""
    caption: str = ""


@dataclass(frozen=True)
class BarSeries:
    name: str
    values: tuple[float, ...]
    color: str | tuple[str, ...]
    """One colour, or one per bar."""
    text: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RefLine:
    value: float
    label: str
    color: str = BAD
    dash: bool = False


@dataclass(frozen=True)
class Bars:
    """Bars named by `categories`; several series stack. Horizontal bars list the first category on top."""

    title: str
    categories: tuple[str, ...]
    series: tuple[BarSeries, ...]
    value_label: str
    horizontal: bool = False
    lines: tuple[RefLine, ...] = ()
    totals: tuple[str, ...] = ()
    """Per bar: a label at its end (the stack's total)."""
    log: bool = False
    caption: str = ""


@dataclass(frozen=True)
class Trace:
    name: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    mode: str = "markers"  # markers | lines | lines+markers
    color: str = PALETTE[0]
    text: tuple[str, ...] = ()
    """Per point: hover text."""
    labels: tuple[str, ...] = ()
    """Per point: a short label drawn beside it."""
    symbol: str = "circle"  # circle | x | star | diamond
    size: float = 7.0
    dash: bool = False
    step: bool = False
    """Lines only: draw as steps (value holds until the next x)."""
    fill: str = ""
    """Lines only: "zero" shades down to y = 0, "previous" down to the trace before it (same x)."""
    fill_color: str = ""
    """The shade's colour (default: `color`)."""
    opacity: float = 1.0
    legend: bool = True


@dataclass(frozen=True)
class Panel:
    title: str
    x_label: str
    y_label: str
    traces: tuple[Trace, ...]
    log_x: bool = False
    log_y: bool = False
    y_range: tuple[float, float] | None = None
    x_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class XY:
    """Scatter and line panels side by side."""

    title: str
    panels: tuple[Panel, ...]
    caption: str = ""


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    code_columns: tuple[int, ...] = ()
    """Columns shown in a fixed-width font (commands), wrapped in the PNG."""
    numeric_columns: tuple[int, ...] = ()
    """Right-aligned columns."""
    emphasis_rows: tuple[int, ...] = ()
    caption: str = ""


Figure = Timeline | Bars | XY | Table


@dataclass(frozen=True)
class Report:
    title: str
    subtitle: str
    headlines: tuple[Headline, ...]
    figures: tuple[Figure, ...] = field(default_factory=tuple)

    @property
    def plot_count(self) -> int:
        """Figures drawn as plots (tables are plain HTML): what a browser must have rendered."""
        return sum(not isinstance(f, Table) for f in self.figures)


# ----------------------------------------------------------------------------- helpers
def time_unit(seconds: float) -> tuple[str, float]:
    """("ms", 1e3) below 10 s, else ("s", 1): the unit to draw a span of `seconds` in."""
    return ("ms", 1e3) if seconds < 10 else ("s", 1.0)


def fmt_s(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds in (float("inf"), float("-inf")):
        return "-"
    if seconds < 1:
        return f"{seconds * 1e3:,.1f} ms"
    return f"{seconds:,.3f} s" if seconds < 100 else f"{seconds:,.1f} s"


def with_alpha(color: str, alpha: float) -> str:
    """ "#RRGGBB" -> "rgba(r,g,b,alpha)"; other colour strings are returned unchanged."""
    if len(color) != 7 or not color.startswith("#"):
        return color
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha:g})"


def pretty(name: str) -> str:
    return name.replace("_", " ")


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points not dominated when minimising x and maximising y, in increasing x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    best_y = float("-inf")
    for i in order:
        if points[i][1] > best_y:
            front.append(i)
            best_y = points[i][1]
    return front


def merge_segments(segments: list[Segment], gap: float) -> list[Segment]:
    """Join segments of one row and category that are less than `gap` apart (runs of sub-pixel pieces in a
    long timeline); a joined segment is labelled with how many it stands for."""
    out: list[Segment] = []
    count: list[int] = []
    last: dict[tuple[str, str], int] = {}
    for s in sorted(segments, key=lambda x: (x.row, x.category, x.start)):
        key = (s.row, s.category)
        k = last.get(key)
        if k is not None and s.start - (out[k].start + out[k].length) < gap:
            prev = out[k]
            end = max(prev.start + prev.length, s.start + s.length)
            out[k] = Segment(prev.row, prev.start, end - prev.start, prev.category, prev.label)
            count[k] += 1
            continue
        last[key] = len(out)
        out.append(s)
        count.append(1)
    return [s if n == 1 else Segment(s.row, s.start, s.length, s.category, f"{n} x {s.category}") for s, n in
            zip(out, count, strict=True)]  # fmt: skip


def union_coverage(intervals: list[tuple[float, float]], edges: list[float]) -> list[float]:
    """Fraction of each bin [edges[k], edges[k+1]) covered by the union of `intervals`."""
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return weighted_coverage([(a, b, 1.0) for a, b in merged], edges)


def weighted_coverage(intervals: list[tuple[float, float, float]], edges: list[float]) -> list[float]:
    """Per bin: sum over intervals (a, b, weight) of weight * overlap / bin width."""
    n = len(edges) - 1
    out = [0.0] * n
    if n <= 0:
        return out
    lo, width = edges[0], (edges[-1] - edges[0]) / n
    if width <= 0:
        return out
    for a, b, w in intervals:
        a, b = max(a, lo), min(b, edges[-1])
        if b <= a:
            continue
        k0 = min(n - 1, int((a - lo) / width))
        k1 = min(n - 1, int((b - lo) / width))
        for k in range(k0, k1 + 1):
            overlap = min(b, edges[k + 1]) - max(a, edges[k])
            if overlap > 0:
                out[k] += w * overlap / width
    return out
