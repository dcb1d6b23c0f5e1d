"""Chrome trace (Trace Event Format JSON) of a simulated step: opens in Perfetto and chrome://tracing.

One process per pipeline rank ("pipeline rank i"), one thread per stream (compute, tp/cp/ep comm, pp, dp),
complete events ("ph": "X") with ts and dur in microseconds. Events on one thread never partially overlap
(the simulator runs one job at a time per stream, and hidden intra-layer communication is drawn inside the
compute task it overlaps), which Perfetto needs to nest slices. Format reference: "Trace Event Format",
Google, https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from paraplan.sim.result import STREAMS, SimResult

if TYPE_CHECKING:
    from paraplan.result import Projection

_US_PER_S = 1e6


def chrome_trace(result: SimResult, *, title: str = "") -> dict:
    """The trace as a dict; needs a result simulated with record_events=True."""
    if not result.events:
        raise ValueError("the result holds no events; simulate with record_events=True")
    ranks = sorted({e.rank for e in result.events})
    tid = {stream: i for i, stream in enumerate(STREAMS)}
    out: list[dict] = []
    for rank in ranks:
        out.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"pipeline rank {rank}"}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}})
        for stream, t in tid.items():
            out.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": t, "args": {"name": stream}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": t, "args": {"sort_index": t}})
    for e in result.events:
        start_us = e.start_s * _US_PER_S
        args: dict[str, int | str] = {}
        if e.microbatch >= 0:
            args["microbatch"] = e.microbatch
        if e.chunk >= 0:
            args["chunk"] = e.chunk
        out.append(
            {
                "name": e.name,
                "cat": e.stream,
                "ph": "X",
                "ts": start_us,
                "dur": (e.start_s + e.dur_s) * _US_PER_S - start_us,
                "pid": e.rank,
                "tid": tid[e.stream],
                "args": args,
            }
        )
    meta = {
        "step_time_s": result.step_time_s,
        "pipeline_time_s": result.pipeline_time_s,
        "critical_rank": result.critical_rank,
        "breakdown_s": result.breakdown_s,
    }
    if title:
        meta["title"] = title
    return {"traceEvents": out, "displayTimeUnit": "ms", "otherData": meta}


def write_chrome_trace(result: SimResult, path: str | Path, *, title: str = "") -> None:
    """Write `chrome_trace(result)` as JSON to `path`."""
    Path(path).write_text(json.dumps(chrome_trace(result, title=title)))


def projection_trace(projection: Projection) -> dict:
    """The simulated step of a projection, with the per-step framework overhead drawn after the
    optimizer on every rank so that the events end at the projected step time."""
    sim = projection.pipeline.sim
    if sim is None or not sim.events:
        raise ValueError("the projection holds no timeline; project with record_events=True")
    title = f"{projection.model.name} on {projection.system.num_gpus} x {projection.system.gpu.name}"
    trace = chrome_trace(sim, title=title)
    overhead_s = projection.pipeline.step_overhead_s
    if overhead_s > 0:
        for rank in sorted({e.rank for e in sim.events}):
            trace["traceEvents"].append(
                {
                    "name": "framework overhead",
                    "cat": "compute",
                    "ph": "X",
                    "ts": sim.step_time_s * _US_PER_S,
                    "dur": overhead_s * _US_PER_S,
                    "pid": rank,
                    "tid": STREAMS.index("compute"),
                    "args": {},
                }
            )
    trace["otherData"]["step_time_s"] = projection.step_time_s
    trace["otherData"]["breakdown_s"] = projection.breakdown
    return trace


def write_projection_trace(projection: Projection, path: str | Path) -> None:
    Path(path).write_text(json.dumps(projection_trace(projection)))
