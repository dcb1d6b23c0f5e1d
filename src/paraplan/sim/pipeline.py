"""Play one training step's pipeline through the event simulator and name the parts of the step.

The projection hands per-chunk costs (`ChunkCost`) plus what it knows about where that time came from
(host launch-bound time, profiled time); the simulator (`paraplan.sim.engine.simulate`) plays the
schedule; this module adds the per-step framework overhead and splits the critical rank's busy time
into forward, backward, recompute and host-bound parts so the breakdown sums to the step time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paraplan.fastinit import fastinit
from paraplan.sim.breakdown import COMPUTE_PARTS, close_with_bubble
from paraplan.sim.breakdown import BreakdownPart as Part
from paraplan.sim.costs import ChunkCost, PipelineCosts
from paraplan.sim.engine import simulate
from paraplan.sim.result import Event, SimResult


@fastinit
@dataclass(frozen=True, slots=True)
class ChunkExtras:
    """What the simulator does not need but the breakdown reports, per chunk and micro-batch."""

    host_bound_s: float = 0.0  # host launch-bound time inside the compute times
    profiled_s: float = 0.0  # compute time that came from a fitted profile
    measured_s: float = 0.0  # compute time that came from a real run (hybrid projection)
    forward_comm_exposed_s: float = 0.0  # exposed intra-layer communication inside the forward time
    interference_s: float = 0.0  # compute time that hidden collectives add, inside the compute times
    # the chunk's collectives by (axis label, kind, source) (`cost.collectives.record`): seconds per micro-batch,
    # the data-parallel ones per step
    comm_sources: dict[tuple[str, str, str], float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PipelineOutcome:
    step_time_s: float
    pipeline_time_s: float
    critical_rank: int
    breakdown: dict[str, float]  # named parts of the step (`BreakdownPart`); they sum to step_time_s
    comm_total_s: dict[str, float]
    comm_exposed_s: dict[str, float]
    bubble_s: tuple[float, ...]
    peak_inflight_microbatches: tuple[float, ...]
    peak_activation_bytes: tuple[float, ...]
    profiled_fraction: float = 0.0
    measured_fraction: float = 0.0
    events: tuple[Event, ...] = field(default_factory=tuple)
    simulated: bool = True
    step_overhead_s: float = 0.0
    sim: SimResult | None = None


def play_pipeline(
    costs: PipelineCosts,
    extras: tuple[tuple[ChunkExtras, ...], ...],
    step_overhead_s: float,
    *,
    record_events: bool = False,
    breakdown: bool = True,
) -> PipelineOutcome:
    """breakdown=False: the step time and memory peaks without the named parts (the tuner's figures)."""
    sim = simulate(costs, record_events=record_events, breakdown=breakdown)
    return outcome_from(sim, costs, extras, step_overhead_s)


def outcome_from(
    sim: SimResult, costs: PipelineCosts, extras: tuple[tuple[ChunkExtras, ...], ...], step_overhead_s: float
) -> PipelineOutcome:
    """The outcome with the framework overhead added; the parts of the step re-split when the simulation
    named them (breakdown_s empty: none)."""
    m = costs.num_microbatches
    r = sim.critical_rank
    row: tuple[ChunkCost, ...] = costs.chunks[r]
    extra = extras[r]  # the sums over lists: the same additions as over generators, cheaper
    forward = m * sum([c.forward_s for c in row])
    backward = m * sum([c.backward_input_s + c.backward_weight_s for c in row])
    recompute = m * sum([c.recompute_s for c in row])
    host = m * sum([e.host_bound_s for e in extra])
    interference = m * sum([e.interference_s for e in extra])
    profiled = m * sum([e.profiled_s for e in extra])
    measured = m * sum([e.measured_s for e in extra])
    exposed_inside = m * sum([sum(c.comm_exposed_s.values()) for c in row])
    forward_exposed = m * sum([e.forward_comm_exposed_s for e in extra])
    busy = forward + backward
    step = sim.step_time_s + step_overhead_s
    breakdown = _parts(
        sim, step, step_overhead_s, forward - forward_exposed, busy, recompute, host, interference, exposed_inside
    )
    return PipelineOutcome(
        step_time_s=step,
        pipeline_time_s=sim.pipeline_time_s,
        critical_rank=r,
        breakdown=breakdown,
        comm_total_s=dict(sim.comm_total_s),
        comm_exposed_s=dict(sim.comm_exposed_s),
        bubble_s=sim.bubble_s,
        peak_inflight_microbatches=sim.peak_inflight_microbatches,
        peak_activation_bytes=sim.peak_activation_bytes,
        profiled_fraction=profiled / busy if busy > 0 else 0.0,
        measured_fraction=measured / busy if busy > 0 else 0.0,
        events=sim.events,
        simulated=True,
        step_overhead_s=step_overhead_s,
        sim=sim,
    )


def _parts(
    sim: SimResult,
    step: float,
    step_overhead_s: float,
    forward: float,
    busy: float,
    recompute: float,
    host: float,
    interference: float,
    exposed_inside: float,
) -> dict[str, float]:
    """`forward`: the forward's compute-stream time without its exposed communication; `busy`: forward and backward
    with all of it (`exposed_inside`); `host` and `interference`: the host's launch waits and what hidden collectives
    add to the compute (`Calibration.overlap_interference`), both inside `busy`."""
    if not sim.breakdown_s:
        return {}
    breakdown: dict[str, float] = {}
    sim_parts = dict(sim.breakdown_s)
    # The simulator's compute parts exclude the exposed intra-layer communication (it names that apart)
    # but know nothing of recompute or host-bound time: re-split its compute time on the critical rank.
    compute_total = sum(sim_parts.pop(part) for part in COMPUTE_PARTS)
    paired = sim_parts.pop(Part.COMM_INTERFERENCE, 0.0)  # the F&B pairs' own, beside the chunks' (`interference`)
    own_compute = busy - exposed_inside
    scale = compute_total / own_compute if own_compute > 0 else 1.0
    pure = max(0.0, own_compute - recompute - host - interference)
    fwd_share = forward / own_compute if own_compute > 0 else 0.0  # the forward's share of the compute alone
    breakdown[Part.FORWARD_COMPUTE] = pure * fwd_share * scale
    breakdown[Part.BACKWARD_COMPUTE] = pure * (1 - fwd_share) * scale
    breakdown[Part.RECOMPUTE] = recompute * scale
    breakdown[Part.HOST_LAUNCH_BOUND] = host * scale
    breakdown[Part.COMM_INTERFERENCE] = interference * scale + paired
    breakdown.update(sim_parts)
    breakdown[Part.FRAMEWORK_OVERHEAD] = step_overhead_s
    # the re-split compute parts add up to the simulator's (up to rounding): the bubble is again the rest of the step
    return close_with_bubble(breakdown, step)
