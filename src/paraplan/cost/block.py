"""Cost of a block of operators (one layer, the embedding, the head) for one micro-batch on one GPU.

Splits the time into forward (F), input-gradient backward (B, with recompute) and weight-gradient
backward (W), and keeps communication apart: its total and the part left on the compute stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from paraplan.cost.calibration import Calibration
from paraplan.cost.comm import GroupPlacement, collective_time_s
from paraplan.cost.compute import compute_time_s
from paraplan.graph.backward import backward_ops
from paraplan.graph.ops import CommAxis, Op, OpKind, Phase
from paraplan.memory.activations import recomputed_ops, saved_bytes
from paraplan.specs.system import SystemSpec

COMM_LABEL = {
    CommAxis.TP: "tp",
    CommAxis.CP: "cp",
    CommAxis.EP: "ep",
    CommAxis.ETP: "ep",
    CommAxis.PP: "pp",
    CommAxis.DP: "dp",
}
WEIGHT_PARAMS_EXEMPT = frozenset({"attn_scores", "attn_context"})
MATMUL_KINDS = (OpKind.GEMM, OpKind.ATTENTION)  # FLOP accounting counts matmuls only (Megatron convention)

OpTimer = Callable[[Op], tuple[float, str]]
"""Returns (seconds, source) for a compute op: source is "analytic" or the profile regressor's name."""


@dataclass(frozen=True, slots=True)
class BlockCost:
    forward_s: float
    backward_input_s: float
    backward_weight_s: float
    recompute_s: float  # forward work redone in backward (already inside backward_input_s)
    comm_total_s: dict[str, float]
    comm_exposed_s: dict[str, float]
    saved_bytes: float  # activations kept per in-flight micro-batch, under the block's recompute mode
    full_saved_bytes: float  # what it would keep without recompute (the working set while recomputing)
    forward_flops: float  # executed forward FLOPs (model FLOPs of one micro-batch on this GPU)
    recompute_flops: float
    dense_params: int  # parameters on this GPU, replicated over DP
    expert_params: int  # expert parameters on this GPU, replicated over expert DP
    profiled_s: float = 0.0  # time that came from a fitted profile rather than the analytic model
    sources: dict[str, float] = field(default_factory=dict)


def weight_params(op: Op) -> int:
    if op.kind is not OpKind.GEMM or op.gemm is None or op.name.removeprefix("mtp_") in WEIGHT_PARAMS_EXEMPT:
        return 0
    return op.gemm.k * op.gemm.n * op.gemm.count


@dataclass(frozen=True, slots=True)
class BlockContext:
    system: SystemSpec
    cal: Calibration
    groups: dict[CommAxis, GroupPlacement]
    tp_comm_overlap: bool
    ep_overlap: bool
    timer: OpTimer | None = None


def _comm_time(op: Op, ctx: BlockContext) -> float:
    comm = op.comm
    assert comm is not None
    return collective_time_s(comm.kind, comm.bytes, ctx.groups[comm.axis], ctx.system, ctx.cal)


def _phase_times(
    ops: Sequence[Op], ctx: BlockContext
) -> tuple[float, dict[str, float], dict[str, float], float, float]:
    """(compute seconds, comm totals, comm exposed, attention compute seconds, profiled seconds)."""
    compute = attention = profiled = 0.0
    totals: dict[str, float] = {}
    for op in ops:
        if op.kind is OpKind.COMM:
            label = COMM_LABEL[op.comm.axis]
            totals[label] = totals.get(label, 0.0) + _comm_time(op, ctx)
            continue
        if ctx.timer is not None:
            seconds, source = ctx.timer(op)
            if source != "analytic":
                profiled += seconds
        else:
            seconds = compute_time_s(op, ctx.system.gpu, ctx.cal)
        compute += seconds
        if op.kind is OpKind.ATTENTION or op.name in WEIGHT_PARAMS_EXEMPT:
            attention += seconds
    exposed: dict[str, float] = {}
    for label, total in totals.items():
        if label == "tp":
            exposed[label] = total * (ctx.cal.tp_overlap_exposed if ctx.tp_comm_overlap else 1.0)
        elif label == "cp":  # ring exchange overlapped with the attention blocks it feeds
            exposed[label] = max(0.0, total - attention)
        elif label == "ep" and ctx.ep_overlap:  # hidden behind another micro-batch's compute
            exposed[label] = max(0.0, total - 0.8 * (compute - attention))
        else:
            exposed[label] = total
    return compute, totals, exposed, attention, profiled


def block_cost(forward: Sequence[Op], recompute: str, ctx: BlockContext, layer_input_bytes: float = 0.0) -> BlockCost:
    """`recompute`: "none", "selective" (ops tagged selective are recomputed) or "full" (only the block
    input, `layer_input_bytes`, is kept)."""
    backward = [b for op in forward for b in backward_ops(op)]
    b_ops = [op for op in backward if op.phase is Phase.BACKWARD_INPUT]
    w_ops = [op for op in backward if op.phase is Phase.BACKWARD_WEIGHT]
    f_compute, f_tot, f_exp, _, f_prof = _phase_times(forward, ctx)
    b_compute, b_tot, b_exp, _, b_prof = _phase_times(b_ops, ctx)
    w_compute, _, _, _, w_prof = _phase_times(w_ops, ctx)
    full_saved = sum(op.saved_bytes for op in forward)
    redo = recomputed_ops(forward, recompute)
    saved = saved_bytes(forward, recompute, layer_input_bytes)
    r_compute, r_tot, r_exp, _, _ = _phase_times(redo, ctx) if redo else (0.0, {}, {}, 0.0, 0.0)
    comm_total = dict(f_tot)
    comm_exposed = dict(f_exp)
    for src_tot, src_exp in ((b_tot, b_exp), (r_tot, r_exp)):
        for label, value in src_tot.items():
            comm_total[label] = comm_total.get(label, 0.0) + value
            comm_exposed[label] = comm_exposed.get(label, 0.0) + src_exp[label]
    dense_params = expert_params = 0
    for op in forward:
        n = weight_params(op)
        if op.name.removeprefix("mtp_").startswith("expert_"):
            expert_params += n
        else:
            dense_params += n
    return BlockCost(
        forward_s=f_compute + sum(f_exp.values()),
        backward_input_s=b_compute + sum(b_exp.values()) + r_compute + sum(r_exp.values()),
        backward_weight_s=w_compute,
        recompute_s=r_compute + sum(r_exp.values()),
        comm_total_s=comm_total,
        comm_exposed_s=comm_exposed,
        saved_bytes=saved,
        full_saved_bytes=full_saved,
        forward_flops=sum(op.flops for op in forward if op.kind in MATMUL_KINDS),
        recompute_flops=sum(op.flops for op in redo if op.kind in MATMUL_KINDS),
        dense_params=dense_params,
        expert_params=expert_params,
        profiled_s=f_prof + b_prof + w_prof,
    )
