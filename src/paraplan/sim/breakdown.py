"""The named parts of a projected step: where its time goes, on the critical pipeline rank.

Every writer (`sim.summary`, `sim.pipeline`, `hybrid.straggler`) and reader (reports, the CLI, the hybrid
sources, `measure.e2e`) names a part by this enumeration; its values are the JSON keys (`Projection.to_dict`).
The parts sum to the step time (DESIGN.md section 8): `close_with_bubble` makes the pipeline bubble the one
part defined as the rest, the step less every other part, so the sum holds by construction.
"""

from __future__ import annotations

from enum import StrEnum


class DocumentedPart(StrEnum):
    """A named part of a time: members are declared as (JSON key, what the part holds); the key is the value, the
    description the member's `__doc__`."""

    def __new__(cls, value: str, doc: str) -> DocumentedPart:
        part = str.__new__(cls, value)
        part._value_ = value
        part.__doc__ = doc
        return part


class BreakdownPart(DocumentedPart):
    """One named part of the step time, in the order the breakdown lists them."""

    FORWARD_COMPUTE = (
        "forward_compute",
        "Forward kernels on the compute stream, without the host's launch waits, the interference of "
        "hidden collectives and the exposed intra-layer communication (those are parts of their own).",
    )
    BACKWARD_COMPUTE = (
        "backward_compute",
        "Backward kernels (input and weight gradients), without recompute, launch waits, interference and "
        "the exposed intra-layer communication.",
    )
    RECOMPUTE = (
        "recompute",
        "The forward work activation recomputation runs again inside the backward.",
    )
    HOST_LAUNCH_BOUND = (
        "host_launch_bound",
        "Time the GPU waits for the host to launch kernels (small kernels, eager PyTorch, MoE syncs).",
    )
    COMM_INTERFERENCE = (
        "comm_interference",
        "Compute slowed by the collectives hidden under it (`Calibration.overlap_interference`).",
    )
    TP_COMM_EXPOSED = (
        "tp_comm_exposed",
        "Tensor-parallel collectives inside the layers that the compute does not hide.",
    )
    CP_COMM_EXPOSED = (
        "cp_comm_exposed",
        "Context-parallel K/V exchange that the attention does not hide.",
    )
    EP_COMM_EXPOSED = (
        "ep_comm_exposed",
        "Expert-parallel all-to-all (dispatch and combine) that the compute does not hide.",
    )
    PP_P2P_EXPOSED = (
        "pp_p2p_exposed",
        "Waits on the critical path for pipeline sends and receives of activations and their gradients.",
    )
    FSDP_EXPOSED = (
        "fsdp_exposed",
        "FSDP/ZeRO-3 parameter gathers and gradient reduce-scatters that lengthen the step (inside the "
        "pipeline and in its tail).",
    )
    DP_PARAM_GATHER_WAIT = (
        "dp_param_gather_wait",
        "Forwards waiting for the distributed optimizer's overlapped parameter all-gather.",
    )
    PIPELINE_BUBBLE = (
        "pipeline_bubble",
        "The critical rank's compute stream idle inside the pipeline phase beyond the waits named above: "
        "the schedule's fill and drain, and stalls on slower stages. Defined as the rest: the step less "
        "every other part (`close_with_bubble`).",
    )
    DP_GRAD_REDUCE_EXPOSED = (
        "dp_grad_reduce_exposed",
        "The data-parallel gradient reduction left after the last backward (not hidden by the overlap).",
    )
    OPTIMIZER = (
        "optimizer",
        "The optimizer step over the parameters the rank updates.",
    )
    DP_PARAM_GATHER_EXPOSED = (
        "dp_param_gather_exposed",
        "The distributed optimizer's parameter all-gather after the optimizer step, when it is not overlapped.",
    )
    FRAMEWORK_OVERHEAD = (
        "framework_overhead",
        "A fixed per-step cost of the framework (`Calibration.step_overhead_s`).",
    )
    STRAGGLER_WAIT = (
        "straggler_wait",
        "Hybrid projection: the expected wait for the slowest data-parallel rank, from measured "
        "run-to-run variation (`hybrid.straggler`).",
    )

    @classmethod
    def comm_exposed(cls, kind: str) -> str:
        """The part of a communication kind's exposed time inside the layers: "tp" -> TP_COMM_EXPOSED. A kind the
        enumeration does not name (the simulator passes any kind its costs carry) is "<kind>_comm_exposed"."""
        name = f"{kind}_comm_exposed"
        return cls(name) if name in _VALUES else name


_VALUES = frozenset(part.value for part in BreakdownPart)

COMPUTE_PARTS = (BreakdownPart.FORWARD_COMPUTE, BreakdownPart.BACKWARD_COMPUTE, BreakdownPart.RECOMPUTE)
"""The parts the simulator names for the compute stream's own work (`sim.pipeline` splits them further)."""


def close_with_bubble(parts: dict[str, float], step_s: float) -> dict[str, float]:
    """Set the pipeline bubble to the step less every other part, in its place in the order (added last if new):
    the parts then sum to the step, and no other part absorbs a rounding difference."""
    others = sum(seconds for part, seconds in parts.items() if part != BreakdownPart.PIPELINE_BUBBLE)
    rest = step_s - others
    # a rest below zero by floating-point rounding (-4e-16 s: the parts are sums of the same numbers in another
    # order) is no time at all; anything further below is a model error and is left to show
    if -ROUNDING_REL * abs(step_s) <= rest < 0.0:
        rest = 0.0
    parts[BreakdownPart.PIPELINE_BUBBLE] = rest
    return parts


ROUNDING_REL = 1e-9
"""The parts sum to the step up to this relative difference (`close_with_bubble` rounds a bubble this far below
zero up to zero): a few hundred additions of float64 values lose about 1e-14 of their size."""
