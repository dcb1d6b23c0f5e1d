"""How far apart two projected step times must be before their order can be trusted.

The tuner's question is which layout of one job runs fastest. The measured data answers how often the model orders
two layouts of one job right: over the pairs of measured runs of the same source, model, GPU, GPU count and global
batch (another layout or micro-batch), binned by their projected gap (the slower one's projected step time over the
faster one's, minus one), the share of pairs whose projected-faster run also measured faster. 50% is a coin toss;
a gap the model's errors cannot reverse agrees 100%. `paraplan calibrate` scores the pairs on its held-out
projections (each source projected with the constants fitted without it) and ships the bins in calibration.yaml,
where the tuner reads them to say how sure its ordering of the best configurations is.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# Bin edges of the projected gap, percent; the last bin is open.
GAP_EDGES_PCT = (0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0)


class RankedRun(Protocol):
    source: str
    measured_step_s: float
    predicted_step_s: float

    def group_key(self, fixed_batch: bool = False) -> tuple: ...


@dataclass(frozen=True)
class GapBin:
    """Pairs of runs of one job whose projected gap lies in [low_pct, high_pct)."""

    low_pct: float
    high_pct: float  # math.inf for the last bin
    pairs: int
    agree_pct: float
    """Share of the pairs whose projected-faster run measured faster."""
    sources: dict[str, int]
    """Pairs per source."""

    @property
    def label(self) -> str:
        return f">= {self.low_pct:g}%" if math.isinf(self.high_pct) else f"{self.low_pct:g}-{self.high_pct:g}%"

    def to_dict(self) -> dict[str, Any]:
        return {
            "low_pct": self.low_pct,
            "high_pct": self.high_pct,
            "pairs": self.pairs,
            "agree_pct": round(self.agree_pct, 1),
            "sources": dict(sorted(self.sources.items())),
        }


def gap_pct(smaller: float, larger: float) -> float:
    """How much larger, in percent: of two step times the slower's over the faster's; of two throughputs the
    faster's over the slower's (the same figure for runs of one job)."""
    return 100.0 * (larger / smaller - 1.0)


def _bin_index(gap_pct: float, edges: Sequence[float]) -> int:
    index = 0
    for i, low in enumerate(edges):
        if gap_pct >= low:
            index = i
    return index


def order_agreement(rows: Iterable[RankedRun], edges: Sequence[float] = GAP_EDGES_PCT) -> list[GapBin]:
    """Bins of projected gap over the pairs of runs of one job (same source and ranking group at a fixed global
    batch); pairs tied in either time say nothing and are left out. Empty bins are left out."""
    groups: dict[tuple, list[RankedRun]] = defaultdict(list)
    for row in rows:
        groups[(row.source, *row.group_key(fixed_batch=True))].append(row)
    pairs, agree = [0] * len(edges), [0] * len(edges)
    sources: list[Counter[str]] = [Counter() for _ in edges]
    for (source, *_), members in groups.items():
        for a, b in itertools.combinations(members, 2):
            if a.predicted_step_s == b.predicted_step_s or a.measured_step_s == b.measured_step_s:
                continue
            faster, slower = (a, b) if a.predicted_step_s < b.predicted_step_s else (b, a)
            i = _bin_index(gap_pct(faster.predicted_step_s, slower.predicted_step_s), edges)
            pairs[i] += 1
            agree[i] += faster.measured_step_s < slower.measured_step_s
            sources[i][source] += 1
    highs = [*edges[1:], math.inf]
    return [
        GapBin(edges[i], highs[i], pairs[i], 100.0 * agree[i] / pairs[i], dict(sources[i]))
        for i in range(len(edges))
        if pairs[i]
    ]


def bins_from_table(table: Mapping[str, Any] | None) -> list[GapBin]:
    """The bins a calibration table ships (`ranking_resolution`), or none."""
    entries = (table or {}).get("ranking_resolution", {}).get("bins", [])
    return [
        GapBin(
            float(e["low_pct"]),
            float(e["high_pct"]),
            int(e["pairs"]),
            float(e["agree_pct"]),
            {str(k): int(v) for k, v in (e.get("sources") or {}).items()},
        )
        for e in entries
    ]


def bin_for(gap_pct: float, bins: Sequence[GapBin]) -> GapBin | None:
    """The bin a projected gap falls in, or None when the bins do not cover it."""
    for b in bins:
        if b.low_pct <= gap_pct < b.high_pct:
            return b
    return None


def _pct(value: float) -> str:
    return "<1%" if 0 < value < 0.5 else f"{value:.0f}%"


def evidence_phrase(bins: Sequence[GapBin]) -> str:
    """'N pairs (S: x%, ...)': how many pairs the bins rest on and which sources gave them, the largest first."""
    totals: Counter[str] = Counter()
    for b in bins:
        totals.update(b.sources)
    pairs = sum(b.pairs for b in bins)
    shares = ", ".join(f"{name} {_pct(100.0 * n / pairs)}" for name, n in totals.most_common(3)) if pairs else ""
    return f"{pairs:,} pairs" + (f" ({shares})" if shares else "")


def summary_line(bins: Sequence[GapBin]) -> str:
    """One sentence over the bins: pairs projected so far apart measured in the projected order so often."""
    if not bins:
        return ""
    parts = ", ".join(f"{b.label} apart {b.agree_pct:.0f}%" for b in bins)
    lead = f"Of {evidence_phrase(bins)} of runs of one job (another layout), the projected-faster measured faster"
    return f"{lead}: {parts}."
