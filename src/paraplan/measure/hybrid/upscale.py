"""Upscaling: measured block times back to the target, through the core projection.

The core (`paraplan.projection.project_specs` with `measured_blocks`) multiplies each kind's measured
compute by its layer count per pipeline stage, keeps the modelled TP/CP/EP communication of every layer,
adds PP send/recv, DP gradient reduction and FSDP gather/scatter with their overlap, and plays the full
schedule in the simulator. This module turns measurements into its inputs (B/W split, compute scaling,
an optimizer constant from the measured step), adds the expected wait for the slowest data-parallel rank
(`straggler`), and names the origin of every part of the breakdown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from paraplan.cost.block import BlockCost, MeasuredBlock, block_cost
from paraplan.cost.calibration import Calibration
from paraplan.graph import layers as L
from paraplan.measure.hybrid.commfit import CommFit
from paraplan.measure.hybrid.plan import BenchPlan, block_ops
from paraplan.measure.hybrid.straggler import straggler_wait_s, with_straggler_wait
from paraplan.projection import ProjectionOptions, block_context, project_specs
from paraplan.result import BreakdownPart as Part
from paraplan.result import Projection
from paraplan.specs.system import SystemSpec

MEASURED, SIMULATED = "measured", "simulated"


@dataclass(frozen=True, slots=True)
class BlockTimes:
    """What the upscaler needs of one measured block (seconds, one micro-batch, one rank)."""

    forward_s: float
    backward_s: float  # input + weight gradient
    backward_input_s: float | None = None  # measured apart, when the schedule needs it
    jitter_s: float = 0.0  # run-to-run standard deviation of forward + backward


@dataclass(frozen=True, slots=True)
class Source:
    origin: str  # "measured" | "simulated"
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"origin": self.origin, "detail": self.detail}


def analytic_block(kind: str, plan: BenchPlan, shard: L.Shard, system: SystemSpec, cal: Calibration) -> BlockCost:
    train = plan.train
    ctx = block_context(system, train, cal)
    layer_input = L.ACT_BYTES * shard.tokens * plan.model.hidden_size / shard.sp_div
    return block_cost(block_ops(kind, plan.model, shard), "none", ctx, layer_input)


def _compute_s(cost: BlockCost) -> float:
    return (
        cost.forward_s
        + cost.backward_input_s
        + cost.backward_weight_s
        - cost.forward_comm_exposed_s
        - cost.backward_comm_exposed_s
    )


def measured_blocks(
    plan: BenchPlan, times: Mapping[str, BlockTimes], system: SystemSpec, cal: Calibration, source: str
) -> dict[str, MeasuredBlock]:
    """MeasuredBlock per kind at the target's shard: B/W as measured, or the measured backward split in
    the analytic model's ratio; compute scaled when the benchmark ran a smaller shard (memory)."""
    target = L.Shard.of(plan.train)
    out = {}
    for kind, t in times.items():
        cost = analytic_block(kind, plan, target, system, cal)
        b_compute = cost.backward_input_s - cost.backward_comm_exposed_s
        share = b_compute / (b_compute + cost.backward_weight_s) if b_compute + cost.backward_weight_s > 0 else 1.0
        if t.backward_input_s is not None:
            b = min(t.backward_input_s, t.backward_s)
            w = t.backward_s - b
        else:
            b, w = t.backward_s * share, t.backward_s * (1 - share)
        scale = 1.0
        if plan.shard != target:
            bench = _compute_s(analytic_block(kind, plan, plan.shard, system, cal))
            scale = _compute_s(cost) / bench if bench > 0 else 1.0
        out[kind] = MeasuredBlock(t.forward_s * scale, b * scale, w * scale, source=source)
    return out


def hybrid_calibration(
    base: Calibration,
    system: SystemSpec,
    optimizer_s_per_param: float | None,
    harness_overheads: bool,
) -> Calibration:
    """The optimizer constant that reproduces the measured step time per parameter; with the local
    harness as the target framework, no per-step or per-micro-batch framework time beyond the blocks."""
    values: dict[str, float] = {}
    notes = []
    if optimizer_s_per_param:
        values["optimizer_bytes_per_param"] = (
            optimizer_s_per_param * system.gpu.hbm_bytes_per_s * base.memory_efficiency
        )
        notes.append("optimizer measured")
    if harness_overheads:
        values |= {"step_overhead_s": 0.0, "microbatch_overhead_s": 0.0}
        notes.append("plain PyTorch loop: no framework overhead")
    return replace(base, **values, source=f"{base.source}; hybrid: {', '.join(notes) or 'measured blocks'}")


def upscale(
    plan: BenchPlan,
    system: SystemSpec,
    times: Mapping[str, BlockTimes],
    base: Calibration,
    *,
    optimizer_s_per_param: float | None,
    comm: CommFit | None,
    comm_scale_out: bool,
    harness_overheads: bool,
    device: str,
    record_events: bool = False,
) -> tuple[Projection, dict[str, Source], SystemSpec]:
    """The projection at the target with measured compute, and the origin of each breakdown part."""
    cal = base
    if comm is not None:
        system, cal = comm.apply(system, cal, scale_out=comm_scale_out)
    cal = hybrid_calibration(cal, system, optimizer_s_per_param, harness_overheads)
    blocks = measured_blocks(plan, times, system, cal, f"measured on {device}")
    options = ProjectionOptions(calibration=cal, measured_blocks=blocks, record_events=record_events)
    projection = project_specs(plan.model, system, plan.train, options)
    jitter = {kind: t.jitter_s for kind, t in times.items()}
    projection = with_straggler_wait(projection, straggler_wait_s(plan.train, plan.layer_counts, jitter))
    sources = breakdown_sources(projection, plan, comm, optimizer_s_per_param, harness_overheads, device)
    return projection, sources, system


def breakdown_sources(
    projection: Projection,
    plan: BenchPlan,
    comm: CommFit | None,
    optimizer_s_per_param: float | None,
    harness_overheads: bool,
    device: str,
) -> dict[str, Source]:
    """Each breakdown part: measured (a real run on the local device) or simulated (the models)."""
    fraction = projection.pipeline.measured_fraction
    train = projection.train
    kinds = ", ".join(plan.kinds)
    if fraction >= 0.999:
        compute = Source(MEASURED, f"{kinds} blocks run at the target's shard shapes on {device}, x layer counts")
    elif fraction > 0:
        compute = Source(MEASURED, f"{fraction:.0%} measured on {device}; the rest from the analytic model")
    else:
        compute = Source(SIMULATED, "analytic model")
    network = f"communication model fitted to {comm.source}" if comm else "communication model (system preset)"
    sources: dict[str, Source] = {}
    for part in projection.breakdown:
        if part in (Part.FORWARD_COMPUTE, Part.BACKWARD_COMPUTE):
            sources[part] = compute
        elif part == Part.RECOMPUTE:
            sources[part] = Source(compute.origin, "the measured forward, run again in backward")
        elif part == Part.COMM_INTERFERENCE:
            sources[part] = Source(SIMULATED, "compute slowed by the collectives hidden under it (calibrated constant)")
        elif part == Part.HOST_LAUNCH_BOUND:
            sources[part] = Source(SIMULATED, "analytic host-launch model (inside the measured times when measured)")
        elif part in (Part.TP_COMM_EXPOSED, Part.CP_COMM_EXPOSED, Part.EP_COMM_EXPOSED):
            sources[part] = Source(SIMULATED, f"{part.split('_')[0].upper()} collectives: {network}")
        elif part == Part.PIPELINE_BUBBLE:
            sources[part] = Source(
                SIMULATED, f"{train.pipeline_schedule} over {train.pp} stages, {train.num_microbatches} micro-batches"
            )
        elif part == Part.OPTIMIZER:
            per_param = f"{(optimizer_s_per_param or 0) * 1e9:.2f} ns/param"
            sources[part] = (
                Source(MEASURED, f"AdamW step, {per_param} on {device}, x the rank's parameters")
                if optimizer_s_per_param
                else Source(SIMULATED, "memory-bound optimizer model")
            )
        elif part == Part.STRAGGLER_WAIT:
            ranks = train.dp * train.cp
            detail = f"slowest of {ranks} data-parallel ranks, from the blocks' run-to-run variation on {device}"
            sources[part] = Source(SIMULATED, detail)
        elif part == Part.FRAMEWORK_OVERHEAD:
            sources[part] = (
                Source(MEASURED, "plain PyTorch loop: nothing beyond the measured blocks")
                if harness_overheads
                else Source(SIMULATED, f"framework default ({train.framework})")
            )
        else:  # pp, dp, fsdp parts: communication and its overlap, played by the simulator
            sources[part] = Source(SIMULATED, f"{network}; overlap by the schedule simulator")
    return sources
