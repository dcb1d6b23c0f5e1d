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

from paraplan.errors import ConfigError
from paraplan.sim.result import STREAMS, Event, SimResult
from paraplan.textfiles import MIB, mib_text
from paraplan.textfiles import OUTPUT_MAX_MIB as DEFAULT_MAX_MIB

if TYPE_CHECKING:
    from paraplan.result import Projection
    from paraplan.specs.training import TrainingSpec

_US_PER_S = 1e6
EVENT_BYTES = 150
"""JSON bytes of one complete event as `chrome_trace` writes it (measured: 150-190, the name and the two times
most of it), for the estimate made before simulating."""
_SAMPLE_EVENTS = 1000


def _expected_events(train: TrainingSpec) -> tuple[int, int]:
    """(compute tasks, pipeline sends) of a step: every micro-batch's forward and backward of every chunk (fewer
    counted than run, so that the estimate stays below the size), and the activation or gradient each sends on
    except at the ends of the pipeline."""
    chunks = train.pp * train.schedule.chunks_per_rank(train.vpp)
    # DualPipe(V) runs most forwards paired with another micro-batch's backward, as one task
    tasks = (1 if train.schedule.pairs_forward_backward else 2) * chunks * train.num_microbatches
    return tasks, tasks * (chunks - 1) // chunks if train.pp > 1 else 0


def expected_trace_bytes(train: TrainingSpec) -> int:
    """Before simulating: about how many bytes the step's trace takes, from the spec alone (`train` checked): its
    compute tasks and pipeline sends at `EVENT_BYTES` each (collectives drawn besides come on top; zero-bubble
    schedules split the backward in two tasks)."""
    return sum(_expected_events(train)) * EVENT_BYTES


def expected_trace_basis(train: TrainingSpec) -> str:
    """What `expected_trace_bytes` counted, in words."""
    tasks, sends = _expected_events(train)
    return f"{tasks:,} forward and backward tasks, {sends:,} pipeline sends, {EVENT_BYTES} bytes an event"


def check_trace_size(nbytes: float, limit_mib: float, what: str, basis: str, *, at_least: bool = False) -> None:
    """Refuse (ConfigError: exit 2) an output of `nbytes` over `limit_mib`, naming the estimate, what it rests on,
    and the way to write it anyway."""
    if nbytes > limit_mib * MIB:
        size = f"{'at least' if at_least else 'about'} {mib_text(nbytes)} MiB"
        raise ConfigError(
            f"{what} would be {size} ({basis}), more than --trace-max-mib {limit_mib:g}: raise the limit to write "
            "it, or trace fewer micro-batches (lower gbs)"
        )


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
    out += (_complete_event(e, tid[e.stream]) for e in result.events)
    meta = {
        "step_time_s": result.step_time_s,
        "pipeline_time_s": result.pipeline_time_s,
        "critical_rank": result.critical_rank,
        "breakdown_s": result.breakdown_s,
    }
    if title:
        meta["title"] = title
    return {"traceEvents": out, "displayTimeUnit": "ms", "otherData": meta}


def _complete_event(e: Event, tid: int) -> dict:
    """One event of the simulator as a complete ("X") trace event."""
    start_us = e.start_s * _US_PER_S
    args: dict[str, int | str] = {}
    if e.microbatch >= 0:
        args["microbatch"] = e.microbatch
    if e.chunk >= 0:
        args["chunk"] = e.chunk
    return {
        "name": e.name,
        "cat": e.stream,
        "ph": "X",
        "ts": start_us,
        "dur": (e.start_s + e.dur_s) * _US_PER_S - start_us,
        "pid": e.rank,
        "tid": tid,
        "args": args,
    }


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


def write_projection_trace(
    projection: Projection, path: str | Path, max_mib: float = DEFAULT_MAX_MIB
) -> tuple[int, int]:
    """Write `projection_trace` as JSON to `path`, unless its estimated size (events x their mean bytes, a sample
    serialized) is over `max_mib`: then a ConfigError, and nothing is written. Returns (events, bytes written)."""
    sim = projection.pipeline.sim
    events = sim.events if sim is not None else ()
    sample = events[:_SAMPLE_EVENTS]
    if sample:  # each event's JSON and its ", " separator
        mean = sum(len(json.dumps(_complete_event(e, STREAMS.index(e.stream)))) + 2 for e in sample) / len(sample)
        check_trace_size(mean * len(events), max_mib, "the trace", f"{len(events):,} events x {mean:,.0f} bytes")
    text = json.dumps(projection_trace(projection))
    Path(path).write_text(text)
    return len(events), len(text.encode())
