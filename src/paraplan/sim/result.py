"""What one pipeline simulation returns."""

from __future__ import annotations

from dataclasses import dataclass, field

STREAMS = ("compute", "tp/cp/ep comm", "pp", "dp")
"""Streams per rank, in the order a trace draws them."""


@dataclass(frozen=True, slots=True)
class Event:
    """One interval on one stream of one rank (only recorded on request)."""

    rank: int
    stream: str  # one of STREAMS
    name: str
    start_s: float
    dur_s: float
    microbatch: int = -1  # -1 when the event belongs to no single micro-batch
    chunk: int = -1

    @property
    def end_s(self) -> float:
        return self.start_s + self.dur_s


@dataclass(frozen=True)
class SimResult:
    """Step time and its parts.

    Step rule: every rank's backward ends (pipeline_time_s = the last one), then its gradient reduction
    ends; all ranks synchronise there (the global gradient-norm all-reduce before the optimizer), so the
    step is max over ranks of that point, plus the slowest rank's optimizer step and, without
    `overlap_param_gather`, its distributed-optimizer parameter all-gather:
        step_time_s = pipeline_time_s + dp tail + max_r(optimizer_r + param gather_r).
    `breakdown_s` names those parts and sums to step_time_s: the pipeline part as seen from the critical
    rank (its compute split into forward, backward, recompute and exposed intra-layer communication, then
    its idle time split into the sends, FSDP gathers and parameter gathers the critical path waited for,
    and the bubble), then the DP tail, the optimizer and the parameter all-gather after it.
    """

    step_time_s: float
    pipeline_time_s: float
    bubble_s: tuple[float, ...]
    """Per rank: idle compute time within [0, pipeline_time_s]."""
    compute_busy_s: tuple[float, ...]
    comm_total_s: dict[str, float]
    """Per kind ("tp", "cp", "ep", "pp", "dp", "fsdp", and any other kind the chunks carry): all of it on
    the critical rank; "pp", "dp" and "fsdp": every pipeline rank's (their exposed parts are waits on the
    critical path, which crosses the ranks: `summary._parts`)."""
    comm_exposed_s: dict[str, float]
    """Per kind: what stayed on the critical path (the same numbers as the *_exposed parts of breakdown_s)."""
    optimizer_s: float
    peak_inflight_microbatches: tuple[float, ...]
    """Per rank, in micro-batches of the whole rank's layers: live (chunk, micro-batch) activations divided
    by the chunks per rank (for DualPipe, whose micro-batches cross one of a rank's two chunks, a unit is
    two stage-activations)."""
    peak_activation_bytes: tuple[float, ...]
    """Per rank: the largest sum of activation_bytes over the chunk activations alive at once."""
    critical_rank: int
    """The rank whose last backward and gradient reduction end last (it gates the optimizer)."""
    events: tuple[Event, ...] = ()
    """Only with record_events=True."""
    breakdown_s: dict[str, float] = field(default_factory=dict)
    dp_done_s: tuple[float, ...] = ()
    """Per rank: when its last backward and its gradient reduction have both finished."""
    peak_inflight_chunks: tuple[int, ...] = ()
    """Per rank: most (chunk, micro-batch) activations alive at once."""
