"""Play one training step's pipeline: per-chunk costs in, step time, breakdown and peak memory out."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class StageChunk:
    """One micro-batch of one model chunk on one pipeline rank."""

    forward_s: float
    backward_input_s: float  # includes recompute
    backward_weight_s: float
    recompute_s: float
    comm_total_s: dict[str, float]
    comm_exposed_s: dict[str, float]  # already inside the compute times above
    activation_bytes: float
    dp_grad_reduce_s: float  # once per step
    dp_param_gather_s: float  # once per step
    fsdp_gather_s: float  # per micro-batch, before F and again before B
    fsdp_reduce_scatter_s: float  # per micro-batch, after B
    profiled_s: float = 0.0
    host_bound_s: float = 0.0  # host launch-bound time inside the compute times

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_input_s + self.backward_weight_s


@dataclass(frozen=True, slots=True)
class PipelineInput:
    schedule: str
    num_microbatches: int
    chunks: tuple[tuple[StageChunk, ...], ...]  # [rank][local chunk]
    p2p_s: float
    optimizer_s: tuple[float, ...]
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    step_overhead_s: float

    @property
    def pp(self) -> int:
        return len(self.chunks)


@dataclass(frozen=True, slots=True)
class PipelineOutcome:
    step_time_s: float
    pipeline_time_s: float
    critical_rank: int
    breakdown: dict[str, float]  # named parts of the step on the critical rank; they sum to step_time_s
    comm_total_s: dict[str, float]
    comm_exposed_s: dict[str, float]
    bubble_s: tuple[float, ...]
    peak_inflight_microbatches: tuple[float, ...]
    peak_activation_bytes: tuple[float, ...]
    profiled_fraction: float = 0.0
    events: tuple = field(default_factory=tuple)
    simulated: bool = False


def _exposed_dp(rank_chunks: tuple[StageChunk, ...], pin: PipelineInput) -> tuple[float, float, float]:
    """(exposed grad reduction, exposed param gather, exposed FSDP per step) for one rank."""
    grad = sum(c.dp_grad_reduce_s for c in rank_chunks)
    gather = sum(c.dp_param_gather_s for c in rank_chunks)
    if pin.overlap_grad_reduce and grad > 0:
        # buckets of each chunk start while the last micro-batch's backward of earlier layers runs
        window = sum(c.backward_input_s + c.backward_weight_s for c in rank_chunks)
        last_bucket = max(c.dp_grad_reduce_s for c in rank_chunks) / 4.0
        grad = max(last_bucket, grad - window)
    if pin.overlap_param_gather and gather > 0:
        window = sum(c.forward_s for c in rank_chunks)
        gather = max(0.0, gather - window)
    m = pin.num_microbatches
    fsdp = 0.0
    for c in rank_chunks:
        # prefetch of the next unit overlaps this unit's compute (FSDP backward_prefetch / forward_prefetch)
        fsdp += m * (
            max(0.0, c.fsdp_gather_s - c.forward_s)
            + max(0.0, c.fsdp_gather_s + c.fsdp_reduce_scatter_s - c.backward_input_s - c.backward_weight_s)
        )
    return grad, gather, fsdp


def play_pipeline(pin: PipelineInput, *, record_events: bool = False) -> PipelineOutcome:
    """Closed form for 1F1B-family schedules (m + (p-1)/v stage-times per step)."""
    p, m = pin.pp, pin.num_microbatches
    v = len(pin.chunks[0])
    per_rank = [sum(c.total_s for c in row) for row in pin.chunks]
    slowest = max(per_rank)
    critical = per_rank.index(slowest)
    if pin.schedule == "gpipe":
        pipeline = m * slowest + (sum(per_rank) - slowest)
    else:
        pipeline = m * slowest + (sum(per_rank) - slowest) / (v if pin.schedule == "interleaved" else 1)
    if pin.schedule in ("zb-h1",):
        w = sum(c.backward_weight_s for c in pin.chunks[critical])
        pipeline -= min((p - 1) * w, (sum(per_rank) - slowest) * 2 / 3)
    pipeline += 2 * (p - 1) * pin.p2p_s
    tails = []
    for r, row in enumerate(pin.chunks):
        grad, gather, fsdp = _exposed_dp(row, pin)
        tails.append((grad + gather + fsdp + pin.optimizer_s[r], grad, gather, fsdp))
    tail_rank = max(range(p), key=lambda r: tails[r][0])
    _, grad, gather, fsdp = tails[tail_rank]
    row = pin.chunks[critical]
    comm_total: dict[str, float] = {}
    comm_exposed: dict[str, float] = {}
    for c in row:
        for k, val in c.comm_total_s.items():
            comm_total[k] = comm_total.get(k, 0.0) + m * val
        for k, val in c.comm_exposed_s.items():
            comm_exposed[k] = comm_exposed.get(k, 0.0) + m * val
    exposed_inside = sum(comm_exposed.values())
    recompute = m * sum(c.recompute_s for c in row)
    forward = m * sum(c.forward_s for c in row)
    backward = m * sum(c.backward_input_s + c.backward_weight_s for c in row) - recompute
    busy = forward + backward + recompute
    fwd_share = forward / max(busy, 1e-30)
    host = m * sum(c.host_bound_s for c in row)
    breakdown = {
        "forward_compute": forward - (exposed_inside + host) * fwd_share,
        "backward_compute": backward - (exposed_inside + host) * (1 - fwd_share),
        "recompute": recompute,
        "host_launch_bound": host,
    }
    for k, val in comm_exposed.items():
        breakdown[f"{k}_comm_exposed"] = val
    breakdown["pp_p2p_exposed"] = 2 * (p - 1) * pin.p2p_s
    breakdown["pipeline_bubble"] = max(0.0, pipeline - busy - breakdown["pp_p2p_exposed"])
    breakdown["dp_grad_reduce_exposed"] = grad
    breakdown["dp_param_gather_exposed"] = gather
    breakdown["fsdp_exposed"] = fsdp
    breakdown["optimizer"] = pin.optimizer_s[tail_rank]
    breakdown["framework_overhead"] = pin.step_overhead_s
    step = pipeline + tails[tail_rank][0] + pin.step_overhead_s
    comm_total["pp"] = 2 * m * v * pin.p2p_s if p > 1 else 0.0
    comm_exposed["pp"] = breakdown["pp_p2p_exposed"]
    dp_total = sum(c.dp_grad_reduce_s + c.dp_param_gather_s for c in pin.chunks[tail_rank])
    comm_total["dp"] = dp_total
    comm_exposed["dp"] = grad + gather
    fsdp_total = m * sum(2 * c.fsdp_gather_s + c.fsdp_reduce_scatter_s for c in pin.chunks[tail_rank])
    if fsdp_total:
        comm_total["fsdp"] = fsdp_total
        comm_exposed["fsdp"] = fsdp
    inflight = []
    peaks = []
    for r, row in enumerate(pin.chunks):
        mean_chunk = sum(c.activation_bytes for c in row) / len(row)
        if pin.schedule == "gpipe":
            n_chunks = m * len(row)
        elif pin.schedule == "interleaved":
            n_chunks = min(m * v, (p - r - 1) * 2 + (v - 1) * p + 1)
        elif pin.schedule in ("zb-v", "dualpipev", "dualpipe"):
            n_chunks = min(2 * m, 2 * p)
        else:
            n_chunks = min(m, p - r)
        inflight.append(n_chunks / len(row))
        peaks.append(n_chunks * mean_chunk)
    profiled = sum(c.profiled_s for c in row) * m
    return PipelineOutcome(
        step_time_s=step,
        pipeline_time_s=pipeline,
        critical_rank=critical,
        breakdown=breakdown,
        comm_total_s=comm_total,
        comm_exposed_s=comm_exposed,
        bubble_s=tuple(max(0.0, pipeline - m * t) for t in per_rank),
        peak_inflight_microbatches=tuple(inflight),
        peak_activation_bytes=tuple(peaks),
        profiled_fraction=profiled / max(busy, 1e-30),
    )
