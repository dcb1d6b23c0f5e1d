"""The tuning report: throughput vs memory of every evaluated configuration, the Pareto front, the top K
with the commands that reproduce them.

Input is plain rows, as the tuner writes them: the CSV rows of `paraplan tune --csv` (strings are fine) or
the entries of its JSON `top` list (`memory: {peak_gib, fits}`, `command`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from paraplan.report.figures import (
    BAD,
    MUTED,
    PALETTE,
    XY,
    Headline,
    Panel,
    Report,
    Table,
    Trace,
    fmt_s,
    pareto_front,
)

MAX_POINTS = 10_000
"""Most candidates drawn one by one (the front and the top K are always drawn; the rest thinned evenly)."""
_METRICS = {
    "step_time_s", "tokens_per_sec_per_gpu", "mfu", "peak_gib", "fits", "source", "memory", "command", "megatron_args",
}  # fmt: skip


@dataclass(frozen=True)
class TunePoint:
    label: str
    step_time_s: float
    tokens_per_sec_per_gpu: float
    mfu: float
    peak_gib: float
    fits: bool
    command: str
    key: tuple

    @property
    def hover(self) -> str:
        verdict = "fits" if self.fits else "OOM"
        return (
            f"{self.label}<br>{self.tokens_per_sec_per_gpu:,.0f} tokens/s/GPU, step {fmt_s(self.step_time_s)}, "
            f"MFU {self.mfu:.1%}<br>{self.peak_gib:,.1f} GiB ({verdict})"
        )


def _float(v: object) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")


def _bool(v: object) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "fits")
    return bool(v)


def _int(row: Mapping, key: str) -> int | None:
    v = _float(row.get(key))
    return int(v) if v == v else None


def describe(row: Mapping) -> str:
    """A short name of a configuration from its axis values (the tuner's `Candidate.describe` on a row)."""
    parts: list[str] = []
    for axis in ("tp", "pp", "vpp", "cp"):
        v = _int(row, axis)
        if v is not None and (axis in ("tp", "pp", "cp") or v > 1):
            parts.append(f"{axis}{v}")
    ep, etp, tp = _int(row, "ep"), _int(row, "etp"), _int(row, "tp")
    if ep is not None and (ep > 1 or (etp is not None and etp != tp)):
        parts += [f"ep{ep}"] + ([f"etp{etp}"] if etp is not None else [])
    dp = _int(row, "dp")
    gpus = _int(row, "num_gpus")
    if dp is None and gpus and tp and _int(row, "pp") and _int(row, "cp"):
        dp = gpus // (tp * (_int(row, "pp") or 1) * (_int(row, "cp") or 1))
    if dp is not None:
        parts.append(f"dp{dp}")
    if _int(row, "mbs") is not None:
        parts.append(f"mbs{_int(row, 'mbs')}")
    if (_int(row, "pp") or 1) > 1 and row.get("schedule"):
        parts.append(str(row["schedule"]))
    if row.get("precision"):
        parts.append(str(row["precision"]))
    recompute = row.get("recompute")
    if recompute:
        layers = _int(row, "recompute_layers")
        parts.append(f"rc:{recompute}" + (f":{layers}" if recompute == "full" and layers is not None else ""))
    if row.get("sharding"):
        parts.append(str(row["sharding"]))
    if _bool(row.get("sp", False)):
        parts.append("sp")
    if gpus is not None:
        parts.insert(0, f"{gpus} GPUs")
    return " ".join(parts) or str(row.get("configuration", "?"))


def config_key(row: Mapping) -> tuple:
    """The configuration's identity: its axis values as text (CSV rows and JSON entries compare equal)."""
    return tuple(sorted((k, "" if v is None else str(v)) for k, v in row.items() if k not in _METRICS))


def point(row: Mapping) -> TunePoint | None:
    memory = row.get("memory") if isinstance(row.get("memory"), Mapping) else {}
    peak = _float(row.get("peak_gib", memory.get("peak_gib")))  # type: ignore[union-attr]
    tps = _float(row.get("tokens_per_sec_per_gpu"))
    if peak != peak or tps != tps:
        return None
    return TunePoint(
        label=describe(row),
        step_time_s=_float(row.get("step_time_s")),
        tokens_per_sec_per_gpu=tps,
        mfu=_float(row.get("mfu")),
        peak_gib=peak,
        fits=_bool(row.get("fits", memory.get("fits", True))),  # type: ignore[union-attr]
        command=str(row.get("command", "")),
        key=config_key(row),
    )


def _ranked(points: list[TunePoint]) -> list[TunePoint]:
    return sorted((p for p in points if p.fits), key=lambda p: (-p.tokens_per_sec_per_gpu, p.step_time_s, p.label))


def _thin(points: list[TunePoint], limit: int) -> tuple[list[TunePoint], int]:
    """Every k-th point, so that at most about `limit` are drawn; and how many were left out."""
    if len(points) <= limit:
        return points, 0
    every = -(-len(points) // limit)
    kept = points[::every]
    return kept, len(points) - len(kept)


def rank_labels(top: list[TunePoint]) -> tuple[str, ...]:
    """ "#i" beside each top point; points drawn on the same spot share one label ("#1-3"), the others none."""
    spots: dict[tuple[float, float], list[int]] = {}
    for i, p in enumerate(top, 1):
        spots.setdefault((round(p.peak_gib, 2), round(p.tokens_per_sec_per_gpu)), []).append(i)
    labels = []
    for i, p in enumerate(top, 1):
        ranks = spots[(round(p.peak_gib, 2), round(p.tokens_per_sec_per_gpu))]
        if ranks[0] != i:
            labels.append("")
        elif len(ranks) == 1:
            labels.append(f"#{i}")
        else:
            labels.append(f"#{ranks[0]}-{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) else
                          "#" + ",".join(map(str, ranks)))  # fmt: skip
    return tuple(labels)


def scatter(points: list[TunePoint], top: list[TunePoint], capacity_gib: float | None) -> XY:
    fitting = [p for p in points if p.fits]
    front_idx = pareto_front([(p.peak_gib, p.tokens_per_sec_per_gpu) for p in fitting])
    front = [fitting[i] for i in front_idx]
    drawn, thinned = _thin(points, MAX_POINTS)
    ok = [p for p in drawn if p.fits]
    oom = [p for p in drawn if not p.fits]
    traces = [
        Trace(
            f"does not fit ({sum(not p.fits for p in points):,})",
            tuple(p.peak_gib for p in oom),
            tuple(p.tokens_per_sec_per_gpu for p in oom),
            color=MUTED,
            text=tuple(p.hover for p in oom),
            symbol="x",
            size=5,
            opacity=0.6,
        ),
        Trace(
            f"fits ({len(fitting):,})",
            tuple(p.peak_gib for p in ok),
            tuple(p.tokens_per_sec_per_gpu for p in ok),
            color=PALETTE[0],
            text=tuple(p.hover for p in ok),
            size=6,
            opacity=0.55,
        ),
        Trace(
            "Pareto front (less memory or more throughput)",
            tuple(p.peak_gib for p in front),
            tuple(p.tokens_per_sec_per_gpu for p in front),
            "lines+markers",
            PALETTE[1],
            text=tuple(p.hover for p in front),
            size=7,
            step=True,
        ),
        Trace(
            f"top {len(top)}",
            tuple(p.peak_gib for p in top),
            tuple(p.tokens_per_sec_per_gpu for p in top),
            color=BAD,
            text=tuple(f"#{i} {p.hover}" for i, p in enumerate(top, 1)),
            labels=rank_labels(top),
            symbol="star",
            size=13,
        ),
    ]
    if capacity_gib:
        ys = [p.tokens_per_sec_per_gpu for p in points] or [0.0, 1.0]
        traces.append(
            Trace(
                f"HBM {capacity_gib:,.0f} GiB",
                (capacity_gib, capacity_gib),
                (min(ys), max(ys)),
                "lines",
                BAD,
                dash=True,
            )
        )
    caption = "Each point is one evaluated configuration; stars are the top configurations that fit (#1 fastest)."
    if thinned:
        caption += f" {thinned:,} points thinned out of the drawing (not of the front or the top)."
    return XY(
        title="Throughput vs memory of every evaluated configuration",
        panels=(Panel("", "peak memory per GPU (GiB)", "tokens/s per GPU", tuple(traces)),),
        caption=caption,
    )


def top_table(top: list[TunePoint]) -> Table:
    return Table(
        title=f"Top {len(top)}: the fastest configurations that fit, and how to reproduce them",
        columns=("#", "configuration", "step time", "tokens/s/GPU", "MFU", "memory GiB", "command"),
        rows=tuple(
            (
                str(i),
                p.label,
                fmt_s(p.step_time_s),
                f"{p.tokens_per_sec_per_gpu:,.0f}",
                f"{p.mfu:.1%}",
                f"{p.peak_gib:,.1f}",
                p.command or "-",
            )
            for i, p in enumerate(top, 1)
        ),
        code_columns=(6,),
        numeric_columns=(0, 2, 3, 4, 5),
        emphasis_rows=(0,) if top else (),
    )


def build_tune(
    evaluated: Sequence[Mapping],
    top: Sequence[Mapping] | None = None,
    *,
    top_k: int = 10,
    title: str = "",
    capacity_gib: float | None = None,
    elapsed_s: float | None = None,
) -> Report:
    """`evaluated`: every candidate (CSV rows or dicts); `top`: the tuner's ranked top entries (their order
    and commands win; without them the top K are the fastest that fit)."""
    points = [p for p in map(point, evaluated) if p is not None]
    if top:
        top_points = [p for p in map(point, top) if p is not None][:top_k]
        known = {p.key for p in points}
        points += [p for p in top_points if p.key not in known]
    else:
        top_points = _ranked(points)[:top_k]
    heads: list[Headline] = []
    if top_points:
        win = top_points[0]
        heads += [
            Headline("winner", win.label),
            Headline("tokens/s per GPU", f"{win.tokens_per_sec_per_gpu:,.0f}"),
            Headline("step time", fmt_s(win.step_time_s)),
            Headline("MFU", f"{win.mfu:.1%}"),
            Headline("memory", f"{win.peak_gib:,.1f} GiB", "good"),
        ]
    else:
        heads.append(Headline("winner", "no configuration fits", "bad"))
    searched = f"{len(points):,} configurations evaluated"
    if elapsed_s is not None:
        searched += f" in {elapsed_s:,.1f} s"
    return Report(
        title=title or "Tuning result",
        subtitle=f"{searched}; {sum(p.fits for p in points):,} fit in memory",
        headlines=tuple(heads),
        figures=(scatter(points, top_points, capacity_gib), top_table(top_points)),
    )
