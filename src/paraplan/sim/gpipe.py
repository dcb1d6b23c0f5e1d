"""GPipe (Huang et al. 2019): every rank runs all forwards, then all backwards."""

from __future__ import annotations

from paraplan.sim.program import BW, F, RankProgram


def gpipe(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> tuple[RankProgram, ...]:
    """One chunk per rank (vpp unused), no F&B pairs (overlap_pairs unused). The backwards run in reverse
    micro-batch order: the last forward's activations are used first."""
    return tuple(
        RankProgram(tuple((F, 0, i) for i in range(m)) + tuple((BW, 0, i) for i in reversed(range(m))))
        for _ in range(pp)
    )
