"""Model order of the virtual pipeline stages: which rank and local chunk hold virtual stage v."""

from __future__ import annotations


def stage_order(schedule: str, pp: int, chunks: int) -> list[tuple[int, int]]:
    """Interleaved (Megatron): virtual stage v is chunk v // pp of rank v % pp. V-shaped schedules
    (ZB-V, DualPipeV, and DualPipe's two directions): ranks 0..p-1 hold the first half, p-1..0 the second."""
    if schedule in ("zb-v", "dualpipev", "dualpipe"):
        return [(v, 0) for v in range(pp)] + [(pp - 1 - v, 1) for v in range(pp)]
    return [(v % pp, v // pp) for v in range(pp * chunks)]
