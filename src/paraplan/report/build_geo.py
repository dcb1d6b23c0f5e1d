"""The multi-datacenter report: placements side by side, WAN link utilisation over a step, and GPU
utilisation with and without BubbleTea's prefill in the bubbles."""

from __future__ import annotations

from typing import TYPE_CHECKING

from paraplan.geo.plan import PLACEMENT_TITLES
from paraplan.geo.summary import placement_row
from paraplan.report.figures import (
    GOOD,
    MUTED,
    PALETTE,
    XY,
    Bars,
    BarSeries,
    Headline,
    Panel,
    Report,
    Table,
    Trace,
    fmt_s,
    pretty,
    time_unit,
    union_coverage,
    weighted_coverage,
    with_alpha,
)

if TYPE_CHECKING:
    from paraplan.geo.geosim import GeoSimResult
    from paraplan.geo.placements import Evaluated
    from paraplan.geo.planner import GeoReport

BINS = 400
WAN_BINS = 160
SHORT_TITLES = {"dp-across": "DP across", "pp-across": "PP across", "atlas": "Atlas"}
WINDOW_STEPS = 3
"""GPU utilisation over time is drawn over the first few training steps (the pattern repeats)."""
SHARE_COLORS = {
    "training_compute": PALETTE[0],
    "training_collectives": PALETTE[5],
    "prefill": PALETTE[1],
    "idle": "#E0E0E0",
}


def _placements(r: GeoReport) -> list[tuple[str, str, Evaluated]]:
    """(kind, title, best) of every placement that has a plan: the three, then the ablations."""
    out = [(k, PLACEMENT_TITLES[k], o.best) for k, o in r.placements.items() if o.best is not None]
    out += [(f"{k}+flows", f"{PLACEMENT_TITLES[k]}, Atlas's flows", o.best) for k, o in r.ablations.items() if o.best]
    return out


def placement_bars(r: GeoReport) -> Bars:
    rows = _placements(r)
    dp = r.placements["dp-across"].best
    steps = [e.step_time_s for _, _, e in rows]
    unit, scale = time_unit(max(steps))
    text = []
    for _, _, e in rows:
        speed = f" · {dp.step_time_s / e.step_time_s:.1f}x DP across" if dp else ""
        text.append(f"{fmt_s(e.step_time_s)} · {e.sim.tokens_per_s:,.0f} tok/s{speed}")
    colors = tuple(GOOD if kind == "atlas" else (PALETTE[0] if "+" not in kind else MUTED) for kind, _, _ in rows)
    missing = [f"{k}: {'; '.join(o.problems) or 'no plan'}" for k, o in r.placements.items() if o.best is None]
    return Bars(
        title="Placements side by side: step time (shorter is better)",
        categories=tuple(title for _, title, _ in rows),
        series=(BarSeries("step time", tuple(s * scale for s in steps), colors, tuple(text)),),
        value_label=f"step time ({unit}{', log scale' if max(steps) > 20 * min(steps) else ''})",
        horizontal=True,
        log=max(steps) > 20 * min(steps),
        caption=("No plan: " + " | ".join(missing)) if missing else "Grey: the baselines given Atlas's TCP flows.",
    )


def breakdown_shares(r: GeoReport) -> Bars:
    rows = _placements(r)
    parts: list[str] = []
    for _, _, e in rows:
        parts += [k for k in e.sim.breakdown_s if k not in parts]
    series = tuple(
        BarSeries(
            pretty(part),
            tuple(100 * e.sim.breakdown_s.get(part, 0.0) / e.step_time_s for _, _, e in rows),
            PALETTE[i % len(PALETTE)],
            tuple(fmt_s(e.sim.breakdown_s.get(part, 0.0)) for _, _, e in rows),
        )
        for i, part in enumerate(parts)
        if any(e.sim.breakdown_s.get(part, 0.0) > 0 for _, _, e in rows)
    )
    return Bars(
        title="Where each placement's step goes (critical stage, share of its step)",
        categories=tuple(title for _, title, _ in rows),
        series=series,
        value_label="share of the step (%)",
        horizontal=True,
    )


def placement_table(r: GeoReport) -> Table:
    d = r.to_dict()
    rows = []
    entries = list(d["placements"].values()) + list(d["with_atlas_flows"].values())
    for entry in entries:
        plan = entry["plan"]
        util = "-"
        if plan is not None:
            util = ", ".join(f"{k} {v:.0%}" for k, v in plan["wan_link_utilisation"].items()) or "-"
        rows.append((*placement_row(entry, fmt_s), util))
    return Table(
        title="Placements",
        columns=(
            "placement",
            "datacenters",
            "GPUs",
            "layout",
            "flows",
            "sharing",
            "step",
            "tokens/s",
            "vs DP across",
            "WAN busy",
        ),  # fmt: skip
        rows=tuple(rows),
        numeric_columns=(2, 4, 6, 7, 8),
        emphasis_rows=(2,),
    )


def wan_busy_series(sim: GeoSimResult, bins: int = WAN_BINS) -> tuple[list[float], dict[str, list[float]]]:
    """Bin centres (s) over one step and, per WAN link direction, the fraction of each bin in which a
    transfer is on the wire (an events re-simulation of `sim`'s plan: the step repeats)."""
    step = sim.step_time_s
    edges = [step * k / bins for k in range(bins + 1)]
    per_link: dict[str, list[tuple[float, float]]] = {}
    for e in sim.events:
        if e.process.startswith("WAN "):
            per_link.setdefault(e.process[4:], []).append((e.start_s, e.end_s))
    centres = [(a + b) / 2 for a, b in zip(edges, edges[1:], strict=False)]
    return centres, {k: union_coverage(v, edges) for k, v in sorted(per_link.items())}


def wan_figure(r: GeoReport) -> XY | None:
    from paraplan.geo.geosim import simulate_geo

    panels = []
    links = [f"{lk.a}->{lk.b}" for lk in r.geo.links] + [f"{lk.b}->{lk.a}" for lk in r.geo.links]
    colors = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(links)}
    for kind, _title, best in _placements(r)[:3]:
        sim = simulate_geo(best.plan, r.geo, record_events=True)
        unit, scale = time_unit(sim.step_time_s)
        x, series = wan_busy_series(sim)
        traces = tuple(
            Trace(
                link,
                tuple(t * scale for t in x),
                tuple(100 * u for u in v),
                "lines",
                colors.get(link, MUTED),
                step=True,
                fill="zero",
                fill_color=with_alpha(colors.get(link, MUTED), 0.3),
            )
            for link, v in series.items()
        )
        means = ", ".join(f"{link} {sum(v) / len(v):.0%}" for link, v in series.items())
        if traces:
            panels.append(
                Panel(
                    f"{SHORT_TITLES[kind]}: step {fmt_s(sim.step_time_s)}<br>busy {means}",
                    f"time in the step ({unit})",
                    "link busy (%)",
                    traces,
                    y_range=(0, 105),
                )
            )
    if not panels:
        return None
    return XY(
        "WAN link utilisation over one training step",
        tuple(panels),
        caption="Share of the time a transfer (activations, gradients, or DP's gradient all-reduce) is on the wire, "
        "per link direction; the step repeats.",
    )


def utilisation_series(r: GeoReport, steps: int | None = WINDOW_STEPS, bins: int = BINS) -> tuple[
    list[float], list[float], list[float]
]:  # fmt: skip
    """Bin centres (s), GPU utilisation (0-1) from training alone, and from prefill, over the first `steps`
    steps (None: the whole BubbleTea horizon). Training: compute and gradient collectives of every stage
    (weighted by its GPUs), tiled step after step; prefill: every placed request on its lane's GPUs."""
    bt = r.bubbletea
    assert bt is not None
    sim = r.atlas.sim
    n = bt.steps if steps is None else min(steps, bt.steps)
    end = n * sim.step_time_s
    edges = [end * k / bins for k in range(bins + 1)]
    gpus = sim.plan.num_gpus
    train: list[tuple[float, float, float]] = []
    for slot in sim.slots:
        w = slot.gpus * slot.weight / gpus
        for k in range(n):
            off = k * sim.step_time_s
            train += [(a + off, b + off, w) for a, b in list(sim.busy[slot.index]) + list(sim.reserved[slot.index])]
    cfg = r.config.bubbletea
    lane_gpus = (cfg.serving_tp if cfg is not None and cfg.serving_tp else sim.plan.tp) / gpus
    prefill = [(p.start_s, p.end_s, lane_gpus) for p in bt.placed if p.start_s < end]
    centres = [(a + b) / 2 for a, b in zip(edges, edges[1:], strict=False)]
    return centres, weighted_coverage(train, edges), weighted_coverage(prefill, edges)


def utilisation_figures(r: GeoReport) -> tuple[Bars, XY]:
    bt = r.bubbletea
    assert bt is not None
    shares = bt.to_dict()["gpu_time_shares"]
    without = {
        "training_compute": shares["training_compute"],
        "training_collectives": shares["training_collectives"],
        "prefill": 0.0,
        "idle": 1 - bt.utilisation_training,
    }
    bars = Bars(
        title=(
            f"GPU utilisation: {bt.utilisation_training:.0%} training only -> {bt.utilisation:.0%} with prefill "
            f"in the bubbles"
        ),
        categories=("training only", "with BubbleTea prefill"),
        series=tuple(
            BarSeries(
                pretty(part),
                (100 * without[part], 100 * shares[part]),
                color,
                (f"{without[part]:.0%}", f"{shares[part]:.0%}"),
            )
            for part, color in SHARE_COLORS.items()
        ),
        value_label="share of GPU time over the horizon (%)",
        horizontal=True,
        caption=(
            f"{bt.admitted:,} of {bt.requests:,} prompts ({bt.source}) prefilled in the bubbles over {bt.steps} steps; "
            f"the training step is {'unchanged' if bt.check.unchanged else 'SLOWED'} "
            f"({fmt_s(bt.check.baseline_step_s)} -> {fmt_s(bt.check.worst_step_s)})."
        ),
    )
    x, train, prefill = utilisation_series(r)
    unit, scale = time_unit(x[-1] if x else 1.0)
    xs = tuple(t * scale for t in x)
    total = tuple(100 * (a + b) for a, b in zip(train, prefill, strict=True))
    n = min(WINDOW_STEPS, bt.steps)
    lines = XY(
        f"GPU utilisation over the first {n} training steps, with and without prefill filling",
        (
            Panel(
                "",
                f"time ({unit})",
                "GPUs busy (%)",
                (
                    Trace("training", xs, tuple(100 * a for a in train), "lines", PALETTE[0], step=True, fill="zero"),
                    Trace("+ prefill in the bubbles", xs, total, "lines", PALETTE[1], step=True, fill="previous"),
                ),
                y_range=(0, 105),
            ),
        ),
        caption="Blue: GPUs busy with training (compute and gradient collectives); orange: prefill BubbleTea puts in "
        "the bubbles; white: still idle.",
    )
    return bars, lines


def build_geo(r: GeoReport) -> Report:
    atlas = r.atlas
    dp = r.placements["dp-across"].best
    heads = [
        Headline("Atlas step time", fmt_s(atlas.step_time_s)),
        Headline("Atlas tokens/s", f"{atlas.sim.tokens_per_s:,.0f}"),
    ]
    if dp is not None:
        heads.append(Headline("vs DP across datacenters", f"{dp.step_time_s / atlas.step_time_s:.1f}x faster", "good"))
    figures: list = [placement_bars(r), breakdown_shares(r), placement_table(r)]
    wan = wan_figure(r)
    if wan is not None:
        figures.append(wan)
    bt = r.bubbletea
    if bt is not None:
        heads.append(Headline("GPU utilisation", f"{bt.utilisation_training:.0%} -> {bt.utilisation:.0%}", "good"))
        figures += utilisation_figures(r)
    dcs = ", ".join(f"{dc.name} ({dc.gpus} x {dc.system.gpu.name})" for dc in r.geo.datacenters)
    links = "; ".join(f"{lk.a}-{lk.b} {lk.bandwidth_gbps:g} Gb/s, RTT {lk.rtt_ms:g} ms" for lk in r.geo.links)
    s = r.setup
    return Report(
        title=f"{s.model.name} across {len(r.geo.datacenters)} datacenters",
        subtitle=f"{dcs}. WAN: {links or 'none'}. seq {s.seq}, mbs {s.mbs}, gbs {s.gbs}, {s.schedule}. "
        f"Atlas layout: {atlas.plan.describe()}",
        headlines=tuple(heads),
        figures=tuple(figures),
    )
