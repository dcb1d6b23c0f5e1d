"""Where a benchmark's CPU time goes, by phase (issue 35 item 1): cProfile's cumulative time of the functions that
make up each phase, as shares of the whole profiled run. cProfile adds a constant per call, so small, frequent
functions weigh more than they do unprofiled: read the shares, not the seconds."""

from __future__ import annotations

import pstats

Phase = tuple[str, tuple[tuple[str, str], ...]]
"""(label, ((file suffix, function name), ...)): the functions whose cumulative times add up to the phase (a label
indented by two spaces is a part of the phase above it)."""


def phase_shares(
    stats: pstats.Stats, phases: tuple[Phase, ...], of_first: bool = False
) -> list[tuple[str, float, float]]:
    """(label, cumulative seconds, share) of each phase: of the profiled total, or of the first phase (`of_first`: a
    run profiled around each call of one function, which the profiler's own time in it makes the larger)."""
    table = stats.stats  # type: ignore[attr-defined]
    out = []
    for label, keys in phases:
        cum = sum(
            ct
            for (file, _, name), (_, _, _, ct, _) in table.items()
            if any(file.endswith(suffix) and name == fn for suffix, fn in keys)
        )
        out.append((label, cum))
    total = out[0][1] if of_first and out else sum(tt for _, _, tt, _, _ in table.values())
    return [(label, cum, cum / total if total else 0.0) for label, cum in out]


def print_phases(stats: pstats.Stats, phases: tuple[Phase, ...], top: int = 12, of_first: bool = False) -> None:
    """The phases' shares (`phase_shares`), then the `top` functions by their own time."""
    for label, cum, share in phase_shares(stats, phases, of_first):
        print(f"{label:<60} {cum:7.2f} s  {share:6.1%}")
    stats.sort_stats("tottime").print_stats(top)
