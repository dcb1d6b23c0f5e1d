"""Chrome trace (Perfetto / chrome://tracing) of a geo step: one process per pipeline stage and per WAN link
direction, one thread per stream (compute, prefill, pp send, dp; one per link stream), times in us."""

from __future__ import annotations

import json
from pathlib import Path

from paraplan.geo.bubbletea import BubbleTeaResult
from paraplan.geo.geosim import GeoEvent, GeoSimResult, simulate_geo
from paraplan.geo.topology import GeoSystem

STREAM_ORDER = ("compute", "prefill", "pp send", "dp")


def prefill_events(sim: GeoSimResult, bubbletea: BubbleTeaResult, step: int) -> list[GeoEvent]:
    """The prefills BubbleTea placed in step `step`, as events on their stage's "prefill" stream."""
    offset = step * sim.step_time_s
    by_slot = {s.index: s for s in sim.slots}
    out = []
    for p in bubbletea.placed:
        if p.step != step:
            continue
        slot = by_slot[bubbletea.lane_slots[p.lane]]
        tokens = int(bubbletea.prompt_tokens[p.request])
        out.append(GeoEvent(slot.name, "prefill", f"prefill {tokens} tok", p.start_s - offset, p.actual_s))
    return out


def chrome_trace(events: list[GeoEvent], meta: dict | None = None) -> dict:
    """Trace Event Format JSON (the layout of `paraplan.report.trace`, with named processes and streams)."""
    processes: dict[str, int] = {}
    threads: dict[tuple[str, str], int] = {}
    trace: list[dict] = []
    for ev in sorted(events, key=lambda e: e.process.startswith("WAN")):  # stable: stages in model order, WAN last
        if ev.process not in processes:
            pid = len(processes) + 1
            processes[ev.process] = pid
            trace.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": ev.process}})
            trace.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        key = (ev.process, ev.stream)
        if key not in threads:
            tid = (
                STREAM_ORDER.index(ev.stream) + 1 if ev.stream in STREAM_ORDER else len(STREAM_ORDER) + len(threads) + 1
            )
            threads[key] = tid
            trace.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": processes[ev.process],
                    "tid": tid,
                    "args": {"name": ev.stream},
                }
            )
            trace.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": processes[ev.process],
                    "tid": tid,
                    "args": {"sort_index": tid},
                }
            )
    for ev in events:
        args = {"microbatch": ev.microbatch} if ev.microbatch >= 0 else {}
        trace.append(
            {
                "ph": "X",
                "name": ev.name,
                "cat": ev.stream,
                "pid": processes[ev.process],
                "tid": threads[(ev.process, ev.stream)],
                "ts": ev.start_s * 1e6,
                "dur": ev.dur_s * 1e6,
                "args": args,
            }
        )
    return {"traceEvents": trace, "displayTimeUnit": "ms", "otherData": meta or {}}


def write_trace(
    path: str | Path, sim: GeoSimResult, geo: GeoSystem, bubbletea: BubbleTeaResult | None = None, step: int = 0
) -> int:
    """Re-simulate `sim`'s plan with events recorded and write its Chrome trace (plus BubbleTea's prefills of
    step `step`); returns the number of events."""
    recorded = simulate_geo(sim.plan, geo, record_events=True)
    events = list(recorded.events)
    if bubbletea is not None:
        events += prefill_events(recorded, bubbletea, step)
    meta = {
        "placement": sim.plan.placement,
        "layout": sim.plan.describe(),
        "step_time_s": recorded.step_time_s,
        "breakdown_s": recorded.breakdown_s,
        "wan_bytes_per_step": recorded.link_bytes,
    }
    if bubbletea is not None:
        meta["prefill_step"] = step
    Path(path).write_text(json.dumps(chrome_trace(events, meta)))
    return len(events)
