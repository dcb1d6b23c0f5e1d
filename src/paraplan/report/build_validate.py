"""The validation report: predicted vs measured per source (y = x with error bands), the error per source."""

from __future__ import annotations

from typing import TYPE_CHECKING

from paraplan.report.figures import (
    BAD,
    GOOD,
    MUTED,
    PALETTE,
    XY,
    Bars,
    BarSeries,
    Headline,
    Panel,
    RefLine,
    Report,
    Table,
    Trace,
)

if TYPE_CHECKING:
    from paraplan.validate.report import RowResult, ValidationReport

METRIC_LABELS = {
    "step_time_s": "step time (s)",
    "tokens_per_sec_per_gpu": "tokens/s per GPU",
    "memory_gib": "peak memory (GiB)",
}
BANDS_PCT = (10.0, 25.0)
BAND_COLORS = ("rgba(84,162,75,0.12)", "rgba(84,162,75,0.25)")  # wide band, narrow band


def band_traces(lo: float, hi: float, pct: float, color: str) -> tuple[Trace, Trace]:
    """The band predicted = measured * (1 ± pct/100) between x = lo and hi: its lower edge, then its upper
    edge shaded down to it (edges drawn transparent, the shade in `color`)."""
    x, f = (lo, hi), pct / 100
    return (
        Trace(f"-{pct:g}%", x, (lo * (1 - f), hi * (1 - f)), "lines", color, opacity=0.0, legend=False),
        Trace(f"±{pct:g}%", x, (lo * (1 + f), hi * (1 + f)), "lines", color, fill="previous"),
    )


def scatter_panel(metric: str, rows: list[RowResult], colors: dict[str, str]) -> Panel:
    values = [v for r in rows for v in (r.measured, r.predicted) if v > 0]
    lo, hi = (min(values) / 1.3, max(values) * 1.3) if values else (0.1, 10.0)
    traces: list[Trace] = []
    for pct, color in zip(sorted(BANDS_PCT, reverse=True), BAND_COLORS, strict=True):
        traces += band_traces(lo, hi, pct, color)
    traces.append(Trace("y = x", (lo, hi), (lo, hi), "lines", "#333333", dash=True))
    for source, color in colors.items():
        mine = [r for r in rows if r.source == source]
        if not mine:
            continue
        traces.append(
            Trace(
                source,
                tuple(r.measured for r in mine),
                tuple(r.predicted for r in mine),
                "markers",
                color,
                text=tuple(
                    f"{r.id} · {r.source}<br>measured {r.measured:.4g}, predicted {r.predicted:.4g}"
                    f"<br>error {r.error_pct:+.1f}%"
                    for r in mine
                ),
                size=6,
                opacity=0.8,
            )
        )
    label = METRIC_LABELS.get(metric, metric)
    return Panel(
        title=f"{label}: {len(rows)} runs",
        x_label=f"measured {label}",
        y_label=f"predicted {label}",
        traces=tuple(traces),
        log_x=True,
        log_y=True,
        x_range=(lo, hi),
        y_range=(lo, hi),
    )


def source_stats(result: ValidationReport) -> dict[str, dict[str, float]]:
    """Per source: rows, MAPE, mean signed error, worst |error|, share within the narrow band."""
    out: dict[str, dict[str, float]] = {}
    for source, stats in result.per_source().items():
        errors = [r.error_pct for r in result.rows if r.source == source]
        out[source] = {
            "n": stats["n"],
            "mape_pct": stats["mape_pct"],
            "mean_error_pct": sum(errors) / len(errors),
            "worst_pct": max(map(abs, errors)),
            "within_pct": 100 * sum(abs(e) <= BANDS_PCT[0] for e in errors) / len(errors),
        }
    return out


def error_table(result: ValidationReport, stats: dict[str, dict[str, float]]) -> Table:
    rows = [
        (
            s,
            f"{v['n']:.0f}",
            f"{v['mape_pct']:.1f}",
            f"{v['mean_error_pct']:+.1f}",
            f"{v['worst_pct']:.1f}",
            f"{v['within_pct']:.0f}%",
        )
        for s, v in stats.items()
    ]
    rows.append(("source-balanced", str(len(result.rows)), f"{result.mape_pct:.1f}", "", "", ""))
    return Table(
        title="Error per source",
        columns=("source", "rows", "MAPE %", "mean error %", "worst |error| %", f"within ±{BANDS_PCT[0]:g}%"),
        rows=tuple(rows),
        numeric_columns=(1, 2, 3, 4, 5),
        emphasis_rows=(len(rows) - 1,),
        caption="Mean error > 0: paraplan predicts more than was measured (slower steps, or higher throughput).",
    )


def mape_bars(result: ValidationReport, stats: dict[str, dict[str, float]]) -> Bars:
    names = list(stats)
    mapes = [stats[s]["mape_pct"] for s in names]
    colors = tuple(GOOD if m <= BANDS_PCT[0] else (PALETTE[1] if m <= BANDS_PCT[1] else BAD) for m in mapes)
    return Bars(
        title=f"MAPE per source (source-balanced: {result.mape_pct:.1f}%)",
        categories=tuple(names),
        series=(
            BarSeries(
                "MAPE",
                tuple(mapes),
                colors,
                tuple(f"{m:.1f}% ({stats[s]['n']:.0f} runs)" for s, m in zip(names, mapes, strict=True)),
            ),
        ),
        value_label="mean absolute percentage error (%)",
        horizontal=True,
        lines=(RefLine(BANDS_PCT[0], f"{BANDS_PCT[0]:g}%", MUTED, dash=True),),
    )


def memory_table(result: ValidationReport) -> Table:
    """Measured peak memory per GPU, scored apart from step time (`paraplan.validate.memory`)."""
    rows = tuple(
        (s, f"{v['n']:.0f}", f"{v['mape_pct']:.1f}", f"{v['mean_error_pct']:+.1f}")
        for s, v in result.memory_per_source().items()
    )
    return Table(
        title="Peak memory per GPU, per source (scored apart from step time)",
        columns=("source", "rows", "MAPE %", "mean error %"),
        rows=rows,
        numeric_columns=(1, 2, 3),
        caption="Each row is compared with the projected GPU its notes name: the last pipeline rank for a last-rank "
        "figure, else the peak over the ranks, in the figure's own quantity: projected allocated bytes for a "
        "peak-allocated figure, reserved bytes (plus what the caching allocator holds idle) for a peak-reserved one.",
    )


def build_validate(result: ValidationReport, title: str = "") -> Report:
    sources = sorted({r.source for r in result.rows})
    colors = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(sources)}
    metrics = [m for m in METRIC_LABELS if any(r.metric == m for r in result.rows)]
    metrics += sorted({r.metric for r in result.rows} - set(metrics))
    panels = tuple(scatter_panel(m, [r for r in result.rows if r.metric == m], colors) for m in metrics)
    stats = source_stats(result)
    within = 100 * sum(abs(r.error_pct) <= BANDS_PCT[0] for r in result.rows) / len(result.rows) if result.rows else 0
    tau = result.kendall_tau()
    figures: list = []
    if panels:
        figures.append(
            XY(
                "Predicted vs measured, per source",
                panels,
                caption=f"On the dashed line the projection is exact; shaded: within ±{BANDS_PCT[0]:g}% and "
                f"±{BANDS_PCT[1]:g}%.",
            )
        )
        figures.append(mape_bars(result, stats))
    figures.append(error_table(result, stats))
    if result.memory_rows:
        figures.append(memory_table(result))
    return Report(
        title=title or "Validation against measured runs",
        subtitle=(
            f"{len(result.rows)} runs projected from {len(sources)} sources; {len(result.skipped)} rows skipped"
            + "".join(
                f"; {row.id} flagged by its notes, not scored ({row.error_pct:+.1f}%: {flag})"
                for row, flag in result.flagged
            )
        ),
        headlines=(
            Headline("source-balanced MAPE", f"{result.mape_pct:.1f}%"),
            Headline(f"runs within ±{BANDS_PCT[0]:g}%", f"{within:.0f}%"),
            Headline("Kendall tau (ranking)", "-" if tau != tau else f"{tau:.2f}"),
            Headline("sources", str(len(sources))),
        ),
        figures=tuple(figures),
    )
