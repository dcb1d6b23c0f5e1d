"""Model order of the pipeline stages (a thin alias of `paraplan.sim.schedules.stage_order`)."""

from __future__ import annotations

from paraplan.sim.schedules import stage_order as _stage_order


def stage_order(schedule: str, pp: int, chunks: int) -> list[tuple[int, int]]:
    """(rank, local chunk) of each model stage; `chunks` is vpp for interleaved 1F1B."""
    return _stage_order(schedule, pp, chunks if schedule == "interleaved" else 1)
