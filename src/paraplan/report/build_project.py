"""The projection report: the pipeline timeline (bubbles drawn), where the step time goes, memory per stage."""

from __future__ import annotations

from typing import TYPE_CHECKING

from paraplan.memory.model import GIB
from paraplan.report.figures import (
    BAD,
    MUTED,
    PALETTE,
    Bars,
    BarSeries,
    Headline,
    RefLine,
    Report,
    Segment,
    Timeline,
    fmt_s,
    merge_segments,
    pretty,
    time_unit,
)
from paraplan.sim.breakdown import BreakdownPart
from paraplan.sim.result import STREAMS

if TYPE_CHECKING:
    from paraplan.result import Projection
    from paraplan.sim.result import Event

BUBBLE = "bubble (idle)"
MAX_SEGMENTS = 12_000
"""Beyond this, neighbouring segments closer than 1/4000 of the step are drawn as one."""
TIMELINE_COLORS = {
    "forward": PALETTE[0],
    "backward": PALETTE[1],
    "weight gradient": PALETTE[6],
    "optimizer": PALETTE[3],
    "framework overhead": PALETTE[9],
    "tp/cp/ep comm": PALETTE[5],
    "pp send/recv": PALETTE[2],
    "dp / fsdp": PALETTE[7],
    "other": MUTED,
    BUBBLE: "#F7C6C7",
}
MEMORY_COLORS = {
    "weights": PALETTE[0],
    "quantized_weight_copies": PALETTE[4],
    "gradients": PALETTE[1],
    "optimizer": PALETTE[3],
    "activations": PALETTE[2],
    "recompute_working_set": PALETTE[6],
    "communication_buffers": PALETTE[5],
    "attention_score_buffer": PALETTE[8],
    "framework_overhead": PALETTE[9],
}
_STREAM_CATEGORY = {"tp/cp/ep comm": "tp/cp/ep comm", "pp": "pp send/recv", "dp": "dp / fsdp"}


def event_category(e: Event) -> str:
    if e.stream != "compute":
        return _STREAM_CATEGORY.get(e.stream, "other")
    head = e.name.split(" ", 1)[0]
    if head == "F":
        return "forward"
    if head in ("B", "BW"):
        return "backward"
    if head == "W":
        return "weight gradient"
    if e.name.startswith("optimizer"):
        return "optimizer"
    return "other"


def row_name(rank: int, stream: str) -> str:
    return f"stage {rank} · {stream}"


def compute_gaps(events: list[Event], end_s: float) -> list[tuple[float, float]]:
    """Idle intervals of one rank's compute stream inside [0, end_s]."""
    gaps: list[tuple[float, float]] = []
    at = 0.0
    for e in sorted(events, key=lambda x: x.start_s):
        if e.start_s >= end_s:
            break
        if e.start_s > at + 1e-12:
            gaps.append((at, e.start_s))
        at = max(at, e.end_s)
    if at < end_s - 1e-12:
        gaps.append((at, end_s))
    return gaps


def pipeline_timeline(p: Projection) -> Timeline:
    """Every simulated interval per stage and stream; the compute stream's idle time inside the pipeline
    phase is drawn as bubble segments (they add up to the simulator's per-rank bubble)."""
    sim = p.pipeline.sim
    if sim is None or not sim.events:
        raise ValueError("the projection holds no timeline; project with ProjectionOptions(record_events=True)")
    unit, scale = time_unit(p.step_time_s)
    events = list(sim.events)
    ranks = sorted({e.rank for e in events})
    used = {(e.rank, e.stream) for e in events}
    rows = tuple(row_name(r, s) for r in ranks for s in STREAMS if (r, s) in used or s == "compute")
    segments = [
        Segment(row_name(e.rank, e.stream), e.start_s * scale, e.dur_s * scale, event_category(e), e.name)
        for e in events
        if e.dur_s > 0
    ]
    for r in ranks:
        compute = [e for e in events if e.rank == r and e.stream == "compute" and e.dur_s > 0]
        for a, b in compute_gaps(compute, sim.pipeline_time_s):
            segments.append(Segment(row_name(r, "compute"), a * scale, (b - a) * scale, BUBBLE, f"idle {fmt_s(b - a)}"))
        if p.pipeline.step_overhead_s > 0:
            segments.append(
                Segment(
                    row_name(r, "compute"),
                    sim.step_time_s * scale,
                    p.pipeline.step_overhead_s * scale,
                    "framework overhead",
                    "framework overhead",
                )
            )
    if len(segments) > MAX_SEGMENTS:  # join what no screen can tell apart
        segments = merge_segments(segments, p.step_time_s * scale / 4000)
    present = {s.category for s in segments}
    colors = {k: v for k, v in TIMELINE_COLORS.items() if k in present}
    bubble = p.breakdown.get(BreakdownPart.PIPELINE_BUBBLE, 0.0)
    t = p.train
    return Timeline(
        title=f"Pipeline timeline: {t.pp} stages, {t.num_microbatches} micro-batches, {t.pipeline_schedule}",
        rows=rows,
        segments=tuple(segments),
        colors=colors,
        x_label=f"time ({unit})",
        markers=((sim.pipeline_time_s * scale, "last backward"), (p.step_time_s * scale, "step end")),
        caption=(
            f"Pink = a stage's compute stream idle inside the pipeline phase (the bubble). On the critical "
            f"rank {p.pipeline.critical_rank} the bubble costs {fmt_s(bubble)} "
            f"({bubble / p.step_time_s:.0%} of the step)."
        ),
    )


def breakdown_bars(p: Projection) -> Bars:
    unit, scale = time_unit(p.step_time_s)
    parts = [(k, v) for k, v in p.breakdown.items() if v > 0]
    colors = tuple(BAD if k == BreakdownPart.PIPELINE_BUBBLE else PALETTE[0] for k, _ in parts)
    return Bars(
        title=f"Where the step time goes: {fmt_s(p.step_time_s)} per step (critical rank {p.pipeline.critical_rank})",
        categories=tuple(pretty(k) for k, _ in parts),
        series=(
            BarSeries(
                "time",
                tuple(v * scale for _, v in parts),
                colors,
                tuple(f"{fmt_s(v)} ({v / p.step_time_s:.1%})" for _, v in parts),
            ),
        ),
        value_label=f"time per step ({unit})",
        horizontal=True,
        caption="The parts add up to the step time.",
    )


def memory_bars(p: Projection) -> Bars:
    mem = p.memory
    ranks = sorted(mem.ranks, key=lambda r: r.rank)
    names = list(ranks[0].parts) if ranks else []
    series = tuple(
        BarSeries(
            pretty(name),
            tuple(r.parts.get(name, 0.0) / GIB for r in ranks),
            MEMORY_COLORS.get(name, MUTED),
        )
        for name in names
        if any(r.parts.get(name, 0.0) > 0 for r in ranks)
    )
    verdict = "FITS" if mem.fits else "OOM"
    totals = tuple(f"{r.total_bytes / GIB:,.1f} GiB" for r in ranks)
    return Bars(
        title=(
            f"Memory per GPU by pipeline stage: peak {mem.peak_gib:,.1f} GiB of "
            f"{mem.usable_bytes / GIB:,.1f} GiB usable: {verdict}"
        ),
        categories=tuple(f"stage {r.rank}" for r in ranks),
        series=series,
        value_label="GiB per GPU",
        totals=totals,
        lines=(
            RefLine(mem.capacity_bytes / GIB, f"HBM {mem.capacity_bytes / GIB:,.0f} GiB"),
            RefLine(mem.usable_bytes / GIB, f"usable ({mem.headroom:.0%} kept free)", dash=True),
        ),
    )


def headlines(p: Projection) -> tuple[Headline, ...]:
    bubble = p.breakdown.get(BreakdownPart.PIPELINE_BUBBLE, 0.0)
    mem = p.memory
    return (
        Headline("step time", fmt_s(p.step_time_s)),
        Headline("tokens/s per GPU", f"{p.tokens_per_sec_per_gpu:,.0f}"),
        Headline(f"MFU ({p.peak_precision.upper()} peak)", f"{p.mfu:.1%}"),
        Headline("pipeline bubble", f"{fmt_s(bubble)} ({bubble / p.step_time_s:.0%})", "bad" if bubble else ""),
        Headline(
            "peak memory per GPU",
            f"{mem.peak_gib:,.1f} / {mem.usable_bytes / GIB:,.0f} GiB {'FITS' if mem.fits else 'OOM'}",
            "good" if mem.fits else "bad",
        ),
    )


def build_project(p: Projection) -> Report:
    t = p.train
    layout = (
        f"tp={t.tp} pp={t.pp} vpp={t.vpp} cp={t.cp} ep={t.ep} dp={t.dp}, mbs {t.mbs}, gbs {t.gbs}, seq {t.seq}, "
        f"{t.pipeline_schedule}, {t.precision}, recompute {t.recompute_granularity}"
    )
    return Report(
        title=f"{p.model.name} on {p.system.num_gpus} x {p.system.gpu.name}",
        subtitle=layout,
        headlines=headlines(p),
        figures=(pipeline_timeline(p), breakdown_bars(p), memory_bars(p)),
    )
