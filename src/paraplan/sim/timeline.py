"""The timeline both engines produce, and the overlap rules they share.

DP stream of a rank, in FIFO order (the order the jobs are issued in):
1. with `overlap_param_gather`: the distributed-optimizer all-gather of each chunk, in order of first use,
   at the start of the step (the previous step's gather, hidden behind the first forwards). Split in
   buckets, the first forward of chunk c may start once the first bucket has arrived and no later bucket
   arrives after the forward needs it: start >= gather start + max(G/n, G - (n-1)F/n)  (`param_lead_s`).
2. FSDP (per task, prefetched one task ahead as FSDP's forward/backward prefetch does): the all-gather for
   task k+1 is issued when task k starts. A task's parameters come in units (one per wrapped layer, or per
   tensor), each used as soon as it has arrived, so task k+1 may start once the first unit has arrived and
   no later unit arrives after the task needs it: the same lead as the bucketed all-gather in 1.
   The reduce-scatter of a task that makes weight gradients (W or BW) runs unit by unit as the gradients
   are made: the first unit's once 1/u of the task has run, the last unit's after the task ends
   (`scatter_done_s`).
3. gradient buckets: with `overlap_grad_reduce`, the weight gradients of a chunk's last weight-gradient
   task become ready evenly over that task, bucket b at start + (b+1)/n of it, and each bucket is reduced
   as soon as it is ready and the stream is free (Megatron DDP bucketing); without, every chunk's
   reduction starts after the rank's last backward.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from paraplan.sim.result import Event


@dataclass
class Timeline:
    start_s: list[float]  # [1 + n] per task (the compiled loops give float64 arrays for the three)
    end_s: list[float]  # [1 + n] per task
    slots_s: list[float]  # every time slot of the plan (task ends, send arrivals, releases)
    rank_done_s: list[float]  # per rank: last backward and gradient reduction both done
    gates: Mapping[int, tuple[float, str]] = field(default_factory=dict)
    """Task -> (time a DP-stream job let it start, kind "fsdp" or "dp"), besides release slots."""
    events: list[Event] = field(default_factory=list)
    tail_kind: list[str] = field(default_factory=list)
    """Per rank: what finished last after its last backward, "dp" (gradient buckets) or "fsdp"."""


def param_lead_s(gather_s: float, forward_s: float, buckets: float) -> float:
    """How long after its parameter all-gather (in `buckets` equal parts) starts the first forward of a chunk,
    or the task an FSDP gather is for, can start."""
    return max(gather_s / buckets, gather_s - (buckets - 1) * forward_s / buckets)


def scatter_done_s(stream_free_s: float, start_s: float, task_s: float, scatter_s: float, units: float) -> float:
    """When a task's FSDP reduce-scatter is done: its `units` equal parts become ready evenly over the task
    and go out one after another on the DP stream (free from `stream_free_s`): max(start of the first + all
    of it, end of the task + the last part)."""
    ready = start_s + task_s / units
    at = (stream_free_s if stream_free_s > ready else ready) + scatter_s
    last = start_s + task_s + scatter_s / units
    return at if at > last else last


def bucket_delays_s(task_s: float, buckets: int) -> list[float]:
    """When each gradient bucket of a chunk is ready, after its last weight-gradient task starts."""
    return [(bucket + 1) * task_s / buckets for bucket in range(buckets)]
