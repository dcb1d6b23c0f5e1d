"""The (schedule, pp, vpp, micro-batches) cases the compiled-simulation tests sweep (shared by the plan and loop
tests): every schedule at each shape it accepts, DualPipe's micro-batch count rounded up to even."""

from __future__ import annotations

from paraplan.specs.schedule import SCHEDULES, validate_schedule


def schedule_cases(shapes: list[tuple[int, int, int]]) -> list[tuple[str, int, int, int]]:
    out = []
    for schedule in SCHEDULES:
        for pp, vpp, m in shapes:
            v = vpp if schedule == "interleaved" else 1
            if schedule in ("dualpipe", "dualpipev") and m % 2:
                m += 1
            if not validate_schedule(schedule, pp, v, m):
                out.append((schedule, pp, v, m))
    return out
