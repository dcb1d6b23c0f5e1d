"""What the pipeline simulator consumes: per rank, per model chunk, per micro-batch durations.

The costing layer (`paraplan.cost`) turns operators into these numbers; the simulator knows nothing of
layers or GPUs. One `ChunkCost` describes one micro-batch of one virtual model chunk on one pipeline rank;
`PipelineCosts` holds them for every rank plus the few per-step facts (schedule, micro-batches, p2p time,
optimizer time, overlap switches).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from paraplan.fastinit import fastinit
from paraplan.specs.schedule import SCHEDULES
from paraplan.specs.schedule import schedule as schedule_named

COMM_KINDS_INTRA = ("tp", "cp", "ep")
"""Intra-layer communication kinds whose exposed part is already inside the compute times (any other key a
ChunkCost carries, such as "etp", is reported the same way)."""


@fastinit
@dataclass(frozen=True, slots=True)
class ChunkCost:
    """Durations for ONE micro-batch of ONE virtual model chunk on ONE pipeline rank."""

    forward_s: float
    """F: compute-stream time of the forward (includes the exposed part of TP/CP/EP communication)."""
    backward_input_s: float
    """B: input-gradient compute (+ the recomputed forward, if activation recompute is on)."""
    backward_weight_s: float
    """W: weight-gradient compute. Zero-bubble schedules run it apart from B; the others right after B."""
    comm_total_s: Mapping[str, float]
    """Per kind ("tp", "cp", "ep"): total communication time of F+B+W for this micro-batch."""
    comm_exposed_s: Mapping[str, float]
    """The part of `comm_total_s` that could not overlap and is already included in the times above."""
    activation_bytes: float
    """Activation bytes this chunk keeps per in-flight micro-batch (from F until its last backward pass)."""
    dp_grad_reduce_s: float
    """Reduce-scatter (distributed optimizer) or all-reduce of this chunk's gradients over DP, once a step."""
    dp_param_gather_s: float
    """Distributed-optimizer all-gather of this chunk's updated parameters, once a step; 0 if none."""
    fsdp_gather_s: float
    """FSDP/ZeRO-3: per micro-batch all-gather of this chunk's parameters, before F and again before B."""
    fsdp_reduce_scatter_s: float
    """FSDP: per micro-batch reduce-scatter of this chunk's gradients after its weight gradients; 0 if none."""
    recompute_s: float = 0.0
    """The part of `backward_input_s` that recomputes the forward, its compute alone: the recomputed forward's
    exposed communication is in `comm_exposed_s` with the rest (only used to name parts of the step)."""
    fsdp_refetch_s: float = 0.0
    """ZeRO-3 under recompute: the all-gather again, before B, of the parameters the recomputed forward released."""
    fsdp_units: int = 1
    """FSDP/ZeRO-3 units of this chunk (one per wrapped layer, or per parameter tensor): each gathers and
    reduce-scatters on its own, so a task can start once its first unit has arrived and the reduce-scatter
    of a unit starts when that unit's gradients are made (`paraplan.sim.timeline`)."""
    fsdp_on_demand: bool = False
    """FSDP/ZeRO-3 without prefetch: a task's gather is issued only once the rank is ready for it, and its
    reduce-scatter holds the rank until done (DeepSpeed ZeRO-3, `TrainingSpec.gathers_on_demand`)."""

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_input_s + self.backward_weight_s


DEFAULT_DP_BUCKETS_PER_CHUNK = 8
"""Buckets per chunk when the spec leaves the DDP bucket size to the framework."""


@dataclass(frozen=True, slots=True)
class PipelineCosts:
    """Everything one training step's pipeline simulation needs."""

    schedule: str
    """A name in `paraplan.specs.schedule.SCHEDULES`."""
    num_microbatches: int
    chunks: tuple[tuple[ChunkCost, ...], ...]
    """chunks[rank][local_chunk]; local chunk c of rank r holds the model stage given by
    `PipelineSchedule.chunk_model_stage` (`stage_order` lists them in model order)."""
    p2p_s: float
    """Time to send one micro-batch's boundary activation (or its gradient) to the neighbour stage; 0 if pp=1."""
    optimizer_s: float | Sequence[float]
    """Optimizer step time per rank (or one value for all), run after every gradient is reduced."""
    overlap_grad_reduce: bool = False
    """Bucketed DP gradient reduction overlaps the backward of the last micro-batch (Megatron
    `overlap_grad_reduce`): a bucket is reduced as soon as all its gradients are ready."""
    overlap_param_gather: bool = False
    """Distributed-optimizer parameter all-gather overlaps the first forward of each chunk (Megatron
    `overlap_param_gather`); otherwise it runs after the optimizer step, exposed."""
    ep_overlap: bool | None = None
    """Overlap EP all-to-all of one micro-batch with another micro-batch's compute by running a forward and
    a backward as one fused pair (DualPipe, DeepSeek-V3 report section 3.2.1; Megatron-LM's interleaved
    schedule with `overlap_moe_expert_parallel_comm`). None: on where the schedule always pairs them
    (`PipelineSchedule.pairs_forward_backward`: DualPipe, DualPipeV), off otherwise. Schedules without such pairs
    (gpipe, 1f1b, zb-h1, zb-v) ignore it."""
    pair_interference: float = 0.0
    """Seconds of compute an F&B pair adds per second of EP all-to-all it hides (`Calibration.overlap_interference`:
    the collective's kernels take SMs and memory bandwidth from the compute beside them, as every hidden collective
    does in the projection)."""
    dp_buckets_per_chunk: int = DEFAULT_DP_BUCKETS_PER_CHUNK
    """Gradient (and parameter) buckets per chunk for the DP overlap model: each chunk's reduction (and gather)
    in this many equal parts. Megatron's bucket holds max(40M, 1M x dp) parameters by default
    (`--ddp-bucket-size`); the projection sets ceil(params / size) when the spec gives `ddp_bucket_size`."""

    @property
    def pp(self) -> int:
        return len(self.chunks)

    @property
    def chunks_per_rank(self) -> int:
        return len(self.chunks[0]) if self.chunks else 0

    def optimizer_per_rank_s(self) -> tuple[float, ...]:
        if isinstance(self.optimizer_s, (int, float)):  # a tuple of types: `int | float` built a union per call
            return (float(self.optimizer_s),) * self.pp
        return tuple(map(float, self.optimizer_s))

    def intra_kinds(self) -> tuple[str, ...]:
        """ "tp", "cp", "ep", then any other communication kind the chunks carry."""
        extra = {k for row in self.chunks for c in row for k in (*c.comm_total_s, *c.comm_exposed_s)}
        return COMM_KINDS_INTRA + tuple(sorted(extra - set(COMM_KINDS_INTRA)))

    def ep_overlap_on(self) -> bool:
        if self.ep_overlap is None:
            spec = SCHEDULES.get(self.schedule)
            return spec is not None and spec.pairs_forward_backward
        return bool(self.ep_overlap)


def uniform_chunk(
    forward_s: float,
    backward_input_s: float,
    backward_weight_s: float = 0.0,
    *,
    activation_bytes: float = 1.0,
    comm_total_s: Mapping[str, float] | None = None,
    comm_exposed_s: Mapping[str, float] | None = None,
    dp_grad_reduce_s: float = 0.0,
    dp_param_gather_s: float = 0.0,
    fsdp_gather_s: float = 0.0,
    fsdp_reduce_scatter_s: float = 0.0,
    fsdp_units: int = 1,
    fsdp_on_demand: bool = False,
) -> ChunkCost:
    """A `ChunkCost` with the given times (tests, benchmarks, what-if studies)."""
    return ChunkCost(
        forward_s=forward_s,
        backward_input_s=backward_input_s,
        backward_weight_s=backward_weight_s,
        comm_total_s=dict(comm_total_s or {}),
        comm_exposed_s=dict(comm_exposed_s or {}),
        activation_bytes=activation_bytes,
        dp_grad_reduce_s=dp_grad_reduce_s,
        dp_param_gather_s=dp_param_gather_s,
        fsdp_gather_s=fsdp_gather_s,
        fsdp_reduce_scatter_s=fsdp_reduce_scatter_s,
        fsdp_units=fsdp_units,
        fsdp_on_demand=fsdp_on_demand,
    )


def uniform_costs(
    schedule: str,
    pp: int,
    num_microbatches: int,
    chunk: ChunkCost,
    *,
    vpp: int = 1,
    p2p_s: float = 0.0,
    optimizer_s: float = 0.0,
    overlap_grad_reduce: bool = False,
    overlap_param_gather: bool = False,
    ep_overlap: bool | None = None,
) -> PipelineCosts:
    """The same chunk on every rank and local chunk."""
    n_chunks = schedule_named(schedule).chunks_per_rank(vpp)
    return PipelineCosts(
        schedule=schedule,
        num_microbatches=num_microbatches,
        chunks=tuple(tuple(chunk for _ in range(n_chunks)) for _ in range(pp)),
        p2p_s=p2p_s,
        optimizer_s=optimizer_s,
        overlap_grad_reduce=overlap_grad_reduce,
        overlap_param_gather=overlap_param_gather,
        ep_overlap=ep_overlap,
    )
