"""Cost of a block of operators (one layer, the embedding, the head) for one micro-batch on one GPU.

Splits the time into forward (F), input-gradient backward (B, with recompute) and weight-gradient
backward (W), and keeps communication apart: its total and the part left on the compute stream.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Protocol

from paraplan.cost.calibration import Calibration
from paraplan.cost.collectives import SourceKey, record, timed_collective
from paraplan.cost.comm import GroupPlacement
from paraplan.cost.compute import OpClock
from paraplan.cost.offload import host_copy_s
from paraplan.fastinit import fastinit
from paraplan.graph.backward import TP_INPUT_GRAD, TP_REGATHER, backward_ops, is_weightless_gemm
from paraplan.graph.ops import CommAxis, Op, OpKind, Phase
from paraplan.memory.activations import OFFLOAD, recomputed_ops
from paraplan.memory.blocks import BlockMemory, block_memory, weight_params
from paraplan.memory.zero3 import ZERO3_MAX_REUSE_DISTANCE_PARAMS
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec

COMM_LABEL = {
    CommAxis.TP: "tp",
    CommAxis.CP: "cp",
    CommAxis.EP: "ep",
    CommAxis.ETP: "ep",
    CommAxis.PP: "pp",
    CommAxis.DP: "dp",
}
# FLOP accounting counts matmuls only (Megatron convention); a chunked scan's FLOPs are matmuls too (Megatron-Bridge's
# `hybrid_flops` counts the Mamba scan and the Gated DeltaNet core)
MATMUL_KINDS = (OpKind.GEMM, OpKind.ATTENTION, OpKind.SCAN)
CLOCK_BOUND_KINDS = MATMUL_KINDS  # compute-bound kernels, slowed by the slowest chip (`at_scale`)
_COMM, _ATTENTION, _GEMM = OpKind.COMM, OpKind.ATTENTION, OpKind.GEMM  # read once per op in `_phase_times`


class OpTimer(Protocol):
    """Times compute ops from a fitted profile: (seconds, source) for an op it covers, None to use the analytic
    model. A value (`cost.profiled.ProfileRef`): the block costs are cached by it, so equal timers must time
    alike, and the tuner's worker processes receive it pickled."""

    def __call__(self, op: Op) -> tuple[float, str] | None: ...

    def __hash__(self) -> int: ...


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
    # time the GPU waits for the host to launch kernels (inside the times above), recompute's not included: the
    # breakdown reports the recompute whole, its host waits with it
    host_bound_s: float = 0.0
    forward_comm_exposed_s: float = 0.0  # exposed intra-layer communication inside forward_s
    backward_comm_exposed_s: float = 0.0  # inside backward_input_s, recompute's included
    recompute_compute_s: float = 0.0  # recompute_s without its communication
    refetch_params: int = 0  # weights a ZeRO-3 backward fetches again after the recomputed forward used them
    # Time each phase saves when the block follows an identical one in the same launch queue: the host issues
    # ahead instead of starting from an empty queue (forward; backward input with its recompute; weight)
    forward_runahead_s: float = 0.0
    backward_input_runahead_s: float = 0.0
    backward_weight_runahead_s: float = 0.0
    recompute_runahead_s: float = 0.0  # the recompute's part of backward_input_runahead_s
    measured: bool = False  # compute times come from a real run of this block (hybrid projection)
    # compute time that hidden collectives add (`Calibration.overlap_interference`) to the forward, the backward
    # input and the weight gradients (inside the times above; the recompute's stays inside recompute_s)
    interference_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
    # the block's collectives by (axis label, kind, "measured:<regressor>" | "modelled:<why>"): seconds, summing to
    # comm_total_s per label (`cost.collectives`)
    comm_sources: dict[SourceKey, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MeasuredBlock:
    """Measured compute time of one block for one micro-batch at the target's shard shapes (no
    communication: that stays modelled). Recompute, when on, is the forward measured again."""

    forward_s: float
    backward_input_s: float
    backward_weight_s: float
    source: str = "measured"


def with_measured_compute(cost: BlockCost, measured: MeasuredBlock) -> BlockCost:
    """Replace a block's modelled compute by measured compute; keep its modelled communication."""
    # recompute redoes the share of the forward the model says it redoes (all of it under full recompute)
    modelled_forward = cost.forward_s - cost.forward_comm_exposed_s
    share = min(1.0, cost.recompute_compute_s / modelled_forward) if modelled_forward > 0 else 0.0
    recompute_compute = measured.forward_s * share
    recompute_comm = cost.recompute_s - cost.recompute_compute_s
    recompute = recompute_compute + recompute_comm if cost.recompute_s > 0 else 0.0
    # measured alone on one device: the slowdown that the cluster's hidden collectives add stays modelled
    slow_f, slow_b, slow_w = cost.interference_s
    return replace(
        cost,
        forward_s=measured.forward_s + cost.forward_comm_exposed_s + slow_f,
        backward_input_s=measured.backward_input_s + cost.backward_comm_exposed_s - recompute_comm + recompute + slow_b,
        backward_weight_s=measured.backward_weight_s + slow_w,
        recompute_s=recompute,
        recompute_compute_s=recompute_compute,
        profiled_s=0.0,
        host_bound_s=0.0,
        forward_runahead_s=0.0,
        backward_input_runahead_s=0.0,
        backward_weight_runahead_s=0.0,
        recompute_runahead_s=0.0,
        measured=True,
    )


def repeated_s(cost: BlockCost, count: int) -> tuple[float, float, float, float]:
    """(forward, backward input, backward weight, recompute) seconds of `count` identical blocks back-to-back in
    one launch queue: the first from an empty queue, each further one `*_runahead_s` shorter (`_phase_times`)."""
    extra = max(0, count - 1)
    return (
        cost.forward_s * count - cost.forward_runahead_s * extra,
        cost.backward_input_s * count - cost.backward_input_runahead_s * extra,
        cost.backward_weight_s * count - cost.backward_weight_runahead_s * extra,
        cost.recompute_s * count - cost.recompute_runahead_s * extra,
    )


def runahead_s(cost: BlockCost, count: int) -> float:
    """Host-bound time that `count` back-to-back identical blocks save over `count` blocks timed alone (the
    recompute's aside, as in `BlockCost.host_bound_s`)."""
    backward_input = cost.backward_input_runahead_s - cost.recompute_runahead_s
    saved = cost.forward_runahead_s + backward_input + cost.backward_weight_runahead_s
    return saved * max(0, count - 1)


def gathered_params(train: TrainingSpec, max_layer_params: float) -> float:
    """Parameters a GPU holds gathered at once under torch FSDP and Megatron-FSDP (0 when parameters are not
    sharded): they gather a wrapped unit, a transformer layer, and prefetch the next: two layers. DeepSpeed ZeRO-3
    gathers per module (`memory.zero3`)."""
    return 2 * max_layer_params if train.shards_params else 0.0


def refetched_params(redo: Sequence[Op], max_reuse_params: float = ZERO3_MAX_REUSE_DISTANCE_PARAMS) -> int:
    """Weights (parameters on this GPU) that the recomputed forward `redo` gathers and the backward right after it
    must gather again: weight j is next used after the weights that follow it, forward then backward, so its
    reuse distance is twice their parameters; the last weight (distance 0) stays."""
    refetched, after = 0, 0
    for op in reversed(redo):
        n = weight_params(op)
        if n and 2 * after > max_reuse_params:
            refetched += n
        after += n
    return refetched


class PlacedGroups(Mapping[CommAxis, GroupPlacement]):
    """The placed communication groups by axis: read-only and hashable (a block context is a cache key)."""

    __slots__ = ("_by_axis", "_hash")

    def __init__(self, groups: Mapping[CommAxis, GroupPlacement]) -> None:
        self._by_axis = dict(groups)
        self._hash = hash(frozenset(self._by_axis.items()))

    def __getitem__(self, axis: CommAxis) -> GroupPlacement:
        return self._by_axis[axis]

    def __iter__(self) -> Iterator[CommAxis]:
        return iter(self._by_axis)

    def __len__(self) -> int:
        return len(self._by_axis)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PlacedGroups):
            return self._hash == other._hash and self._by_axis == other._by_axis
        return isinstance(other, Mapping) and self._by_axis == dict(other)

    def __repr__(self) -> str:
        return f"PlacedGroups({self._by_axis!r})"


@fastinit
@dataclass(frozen=True, slots=True)
class BlockContext:
    """What a block's cost depends on besides its operators. A value: the projection caches block costs by it."""

    system: SystemSpec
    cal: Calibration
    groups: Mapping[CommAxis, GroupPlacement]
    """Stored as `PlacedGroups` (hashable), whatever mapping is given."""
    tp_comm_overlap: bool
    timer: OpTimer | None = None
    """A fitted profile's op times, and its collectives' where it has them (`ProjectionOptions.profile`,
    `cost.collectives`); None: the analytic model only."""
    tp_async_backward: bool = True
    """A column-parallel linear's input-gradient collective runs while its weight-gradient GEMM does, and its input's
    second gather (sequence parallel) while its input-gradient GEMM does (`TrainingSpec.tp_async_backward`)."""
    cuda_graph_scope: str = "none"
    """`TrainingSpec.cuda_graph_scope`: under "layer" the decoder layers' kernels replay from captured CUDA graphs,
    under "full_iteration" every block's (`cuda_graphs`)."""
    graphed_block: bool = True
    """This block is inside the graph scope (`for_block`: the decoder layers, or every block under full_iteration)."""
    moe_host_sync: bool = True
    """MoE layers copy their token counts to the host and wait for them (`TrainingSpec.moe_host_sync`)."""
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    """The hash of the fields above, computed once (the caches look the context up once per stage)."""
    _other_scope: list[BlockContext] = field(default_factory=list, init=False, repr=False, compare=False)
    """`for_block`'s context with `graphed_block` flipped, once built (a replace hashes the whole context again)."""

    def __post_init__(self) -> None:
        if not isinstance(self.groups, PlacedGroups):
            object.__setattr__(self, "groups", PlacedGroups(self.groups))
        values = (self.system, self.cal, self.groups, self.tp_comm_overlap, self.timer)
        knobs = (self.cuda_graph_scope, self.graphed_block, self.moe_host_sync)
        object.__setattr__(self, "_hash", hash((*values, self.tp_async_backward, *knobs)))

    def __hash__(self) -> int:
        return self._hash

    def with_cal(self, cal: Calibration) -> BlockContext:
        """This context under another calibration: `dataclasses.replace(self, cal=cal)`, built directly (the projection
        asks once per projection of a pipeline, for its stages at the chips' typical speed)."""
        return BlockContext(
            self.system, cal, self.groups, self.tp_comm_overlap, self.timer, self.tp_async_backward,
            self.cuda_graph_scope, self.graphed_block, self.moe_host_sync,
        )  # fmt: skip

    @property
    def cuda_graphs(self) -> bool:
        """The block's kernels replay from a CUDA graph: one graph launch per phase instead of one host launch per
        op (but the MoE ops behind a host sync, `_phase_times`)."""
        return self.cuda_graph_scope != "none" and self.graphed_block

    def for_block(self, is_decoder_layer: bool) -> BlockContext:
        """The context of one block kind: Megatron's layer graphs capture the decoder layers only."""
        graphed = is_decoder_layer or self.cuda_graph_scope == "full_iteration"
        if graphed == self.graphed_block:
            return self
        if not self._other_scope:
            self._other_scope.append(replace(self, graphed_block=graphed))
        return self._other_scope[0]


def _comm_time(op: Op, ctx: BlockContext) -> tuple[float, str]:
    """(seconds, source) of a block's collective: measured by the profile where it applies, else modelled."""
    comm = op.comm
    assert comm is not None
    group = ctx.groups[comm.axis]
    return timed_collective(
        comm.kind, comm.bytes, group, ctx.system, ctx.cal, axis=comm.axis, routing=comm.routing, timer=ctx.timer
    )


@dataclass(slots=True)
class _PhaseTime:
    compute_s: float = 0.0  # GPU compute time, host-launch floor included
    host_bound_s: float = 0.0  # part of compute_s that is the host failing to keep the GPU fed
    attention_s: float = 0.0
    gemm_s: float = 0.0
    profiled_s: float = 0.0
    comm_total_s: dict[str, float] = field(default_factory=dict)
    comm_exposed_s: dict[str, float] = field(default_factory=dict)
    runahead_s: float = 0.0  # saved when the phase repeats back-to-back (see `_phase_times`)
    # TP collectives left to run beside the weight-gradient GEMMs ("wgrad") or the input-gradient ones ("dgrad")
    async_tp_s: dict[str, float] = field(default_factory=dict)
    interference_s: float = 0.0  # inside compute_s: what the collectives hidden under it add
    comm_sources: dict[SourceKey, float] = field(default_factory=dict)  # comm_total_s by kind and source


def _exposed_fraction(label: str, ctx: BlockContext) -> float | None:
    """Exposed share of a collective known before the phase is timed (None: decided after, from the
    compute it overlaps). The EP all-to-all is exposed in full within its own phase: EP overlap hides it behind
    another micro-batch's compute, in the F&B pairs of the schedule (`sim.tables._pair_entries`), never behind the
    phase that waits for it."""
    if label == "tp":
        return ctx.cal.tp_overlap_exposed if ctx.tp_comm_overlap else 1.0
    if label == "cp":
        return None
    return 1.0


def _async_tp_pool(op: Op, label: str, ctx: BlockContext) -> str:
    """The GEMMs a backward TP collective runs beside ("" when it is waited for in the stream): Megatron's column-
    parallel linear (`LinearWithGradAccumulationAndAsyncCommunication`, `--async-tensor-model-parallel-allreduce`)
    and TransformerEngine's Linear launch the input gradient's all-reduce (reduce-scatter under sequence
    parallelism) asynchronously before the weight-gradient GEMM and wait after it, and the second gather of the
    sequence-parallel input before the input-gradient GEMM."""
    if label != "tp" or op.phase is Phase.FORWARD or not ctx.tp_async_backward or not TP_INPUT_GRAD <= op.tags:
        return ""
    return "dgrad" if TP_REGATHER <= op.tags else "wgrad"


def _phase_times(
    ops: Sequence[Op],
    ctx: BlockContext,
    host_s_per_op: float,
    known_s: dict[int, float] | None = None,
    clock: OpClock | None = None,
) -> _PhaseTime:
    """Time of one phase of a block.

    The host issues kernels asynchronously into the stream queue: a kernel starts when the host has issued
    it and the one before has finished (finish = max(previous finish, issue) + GPU time). Small kernels
    make a phase launch-bound (PyTorch eager), and a phase that mixes both pays the host time of the ops
    before its long kernels as well. MoE layers after the token-count device-to-host sync of Megatron's
    all-to-all dispatcher cannot run ahead: there the host waits for the GPU before each op. That is a fitted
    stand-in, not the dispatcher's literal behaviour: megatron-core 0.16.1 (`MoEAlltoAllTokenDispatcher`,
    `cuda_sync_point`) waits once per forward and never in backward. Modelled literally (one wait at the EP
    dispatch, then the usual queue), the Megatron-Bridge MoE rows came out faster and more scattered, and refitting
    `host_launch_s` alone (20-60 us) did not recover them: best at 30 us, MoE MAPE 17.9% on 25.11 (15.2% with this
    rule) and 23.5% on 26.02 (20.1%); waiting per op in forward only scored 15.1% / 21.3% at 30 us. The host work
    the per-op wait stands for is not in the graph (TE GroupedLinear's per-expert Python, the router's small ops).

    The phase is timed from an empty queue. When n identical phases follow each other in one queue (the layers
    of a pipeline stage), the last finishes at T1 + (n - 1) * max(host, GPU) (the max-plus closed form of the
    rule above), so each repeat saves `runahead_s` = T1 - max(host, GPU): the host issues the next layer's
    kernels while this layer's long ones run. Nothing is saved when the host waits for the GPU (MoE).

    `known_s`: the analytic seconds of compute ops by `id(op)`, filled in here (the recompute's ops are the forward's,
    timed under the same context: `block_cost` times each once). `clock`: the context's `OpClock`, when the caller
    times several phases.

    Under CUDA graphs (`BlockContext.cuda_graphs`) the phase is one graph launch (one op's host time) and its ops
    cost the host nothing, but for the MoE ops of a layer that syncs with the host: megatron-core captures those
    only with drop-and-pad (TransformerConfig: the `moe` graph scope needs `moe_pad_expert_input_to_capacity`), so
    from the sync on they launch eagerly. Without the sync (drop-and-pad) MoE ops queue like any other.
    """
    out = _PhaseTime()
    # the context read once per phase, not per op
    graphs, host_sync, timer, cal = ctx.cuda_graphs, ctx.moe_host_sync, ctx.timer, ctx.cal
    issued = finish = gpu = exposed_in_queue = 0.0
    if graphs:
        issued = host_s_per_op  # the graph launch
    synced = False
    deferred: dict[str, float] = {}
    if clock is None:
        clock = OpClock(ctx.system.gpu, cal)
    gemm_time = clock.gemm_s  # most of a block's compute ops: called without the dispatch
    attention_s = gemm_s = profiled_s = 0.0  # added up per op, in op order, then stored
    for op in ops:
        kind = op.kind
        behind_sync = host_sync and "moe" in op.tags  # an MoE op after the token counts' host sync
        captured = graphs and not behind_sync  # replays in the graph
        if kind is _COMM:
            label = COMM_LABEL[op.comm.axis]
            seconds, source = _comm_time(op, ctx)
            out.comm_total_s[label] = out.comm_total_s.get(label, 0.0) + seconds
            record(out.comm_sources, label, op.comm.kind, source, seconds)
            issued += 0.0 if captured else host_s_per_op
            beside = _async_tp_pool(op, label, ctx)
            if beside:
                out.async_tp_s[beside] = out.async_tp_s.get(beside, 0.0) + seconds
                continue
            share = _exposed_fraction(label, ctx)
            if share is None:
                deferred[label] = deferred.get(label, 0.0) + seconds
                continue
            out.comm_exposed_s[label] = out.comm_exposed_s.get(label, 0.0) + seconds * share
            exposed_in_queue += seconds * share
            finish = (issued if issued > finish else finish) + seconds * share  # max(finish, issued)
            continue
        timed = timer(op) if timer is not None else None
        if timed is None:
            if known_s is None:
                seconds = gemm_time(op) if kind is _GEMM else clock(op)
            else:
                seconds = known_s.get(id(op))
                if seconds is None:
                    seconds = known_s[id(op)] = gemm_time(op) if kind is _GEMM else clock(op)
        else:  # a kernel measured on one chip: compute-bound ones run at the pace of the job's slowest chip
            seconds = timed[0] * (cal.compute_slowdown if kind in CLOCK_BOUND_KINDS else 1.0)
            profiled_s += seconds
        host_s = 0.0 if captured else host_s_per_op * op.host_ops
        gpu += seconds
        if behind_sync:  # the host waits for the GPU, then issues: max(GPU, host) per op
            synced = True
            issued = finish = max(finish, issued) + max(seconds, host_s)
        else:
            issued += host_s
            finish = (issued if issued > finish else finish) + seconds  # max(finish, issued)
        if kind is _GEMM:
            if is_weightless_gemm(op):  # the attention's batched matmuls
                attention_s += seconds
            else:
                gemm_s += seconds
        elif kind is _ATTENTION:
            attention_s += seconds
    out.attention_s, out.gemm_s, out.profiled_s = attention_s, gemm_s, profiled_s
    compute = finish - exposed_in_queue
    hidden = 0.0
    for label, total in deferred.items():  # the CP ring exchange, overlapped with the attention blocks it feeds
        exposed = max(0.0, total - out.attention_s)
        out.comm_exposed_s[label] = out.comm_exposed_s.get(label, 0.0) + exposed
        hidden += total - exposed
    out.host_bound_s = max(0.0, compute - gpu)
    out.interference_s = ctx.cal.overlap_interference * hidden
    out.compute_s = compute + out.interference_s
    out.runahead_s = 0.0 if synced else max(0.0, finish - max(issued, gpu + exposed_in_queue))
    return out


def _offload_copies(nbytes: float, ctx: BlockContext, fwd: _PhaseTime, bwd: _PhaseTime, weight_s: float) -> None:
    """Megatron's activation CPU offloading (TransformerEngine `get_cpu_offload_context`): the layer's saved tensors
    go to host memory on a side stream while the next layer's forward runs, and come back while the backward of the
    layer after it runs; what outlasts that compute (one layer's, the same as this one's) is exposed, as "host"."""
    copy_s = host_copy_s(nbytes, ctx.system.gpu)
    fwd.comm_total_s["host"] = copy_s
    fwd.comm_exposed_s["host"] = max(0.0, copy_s - fwd.compute_s)
    bwd.comm_total_s["host"] = copy_s
    bwd.comm_exposed_s["host"] = max(0.0, copy_s - bwd.compute_s - weight_s)


def backward_phases(forward: Sequence[Op]) -> tuple[list[Op], list[Op]]:
    """The backward of a block's forward ops: (input-gradient ops, weight-gradient ops), each in op order."""
    backward = [b for op in forward for b in backward_ops(op)]
    b_ops = [op for op in backward if op.phase is Phase.BACKWARD_INPUT]
    w_ops = [op for op in backward if op.phase is Phase.BACKWARD_WEIGHT]
    return b_ops, w_ops


@dataclass(frozen=True, slots=True)
class BlockPhases:
    """A block's forward, input-gradient and weight-gradient phases timed under one context, and its forward compute
    ops' seconds by `id(op)`: what every recompute mode of the block shares (`block_phases`; read them only)."""

    forward: _PhaseTime
    backward_input: _PhaseTime
    backward_weight: _PhaseTime
    op_seconds: dict[int, float]


def block_phases(
    forward: Sequence[Op], ctx: BlockContext, backward: tuple[Sequence[Op], Sequence[Op]] | None = None
) -> BlockPhases:
    """The three phases of a block as `block_cost` times them (the forward's op seconds kept, as for a recompute:
    the same seconds as without, `compute_time_s` of each op)."""
    b_ops, w_ops = backward if backward is not None else backward_phases(forward)
    host = ctx.cal.host_launch_s
    op_seconds: dict[int, float] = {}
    clock = OpClock(ctx.system.gpu, ctx.cal)
    return BlockPhases(
        _phase_times(forward, ctx, host, op_seconds, clock),
        _phase_times(b_ops, ctx, host * ctx.cal.host_backward_factor, None, clock),
        _phase_times(w_ops, ctx, host * ctx.cal.host_backward_factor, None, clock),
        op_seconds,
    )


def _own_copy(phase: _PhaseTime) -> _PhaseTime:
    """A phase `block_cost` may change (its dictionaries too), from a shared one (positionally, in field order:
    `dataclasses.replace` cost a fifth of `block_cost`)."""
    return _PhaseTime(
        phase.compute_s, phase.host_bound_s, phase.attention_s, phase.gemm_s, phase.profiled_s,
        dict(phase.comm_total_s), dict(phase.comm_exposed_s), phase.runahead_s, dict(phase.async_tp_s),
        phase.interference_s, dict(phase.comm_sources),
    )  # fmt: skip


_PHASE_FIELDS = ("compute_s", "host_bound_s", "attention_s", "gemm_s", "profiled_s", "comm_total_s", "comm_exposed_s",
                 "runahead_s", "async_tp_s", "interference_s", "comm_sources")  # fmt: skip
if tuple(f.name for f in fields(_PhaseTime)) != _PHASE_FIELDS:  # `_own_copy` copies them positionally
    raise AssertionError("_PhaseTime's fields changed: update _own_copy")


def block_cost(
    forward: Sequence[Op],
    recompute: str,
    ctx: BlockContext,
    layer_input_bytes: float = 0.0,
    memory: BlockMemory | None = None,
    backward: tuple[Sequence[Op], Sequence[Op]] | None = None,
    phases: BlockPhases | None = None,
) -> BlockCost:
    """`recompute`: "none", "selective" (ops tagged selective are recomputed) or "full" (only the block
    input, `layer_input_bytes`, is kept). `memory`: the block's parameters and saved bytes when the caller
    has them (`memory.blocks.block_memory` of these operators, or the embedding's with its table). `backward`:
    the input- and weight-gradient ops (`backward_phases` of `forward`) when the caller keeps them. `phases`:
    `block_phases` of these operators under `ctx`, shared by the block's recompute modes (the same figures)."""
    host = ctx.cal.host_launch_s
    redo = recomputed_ops(forward, recompute)
    known_s: dict[int, float] | None = {} if redo else None  # the forward ops' seconds, for the recompute
    if phases is None:
        b_ops, w_ops = backward if backward is not None else backward_phases(forward)
        fwd = _phase_times(forward, ctx, host, known_s)
        bwd = _phase_times(b_ops, ctx, host * ctx.cal.host_backward_factor)
        wgt = _phase_times(w_ops, ctx, host * ctx.cal.host_backward_factor)
    else:
        fwd, bwd, wgt = phases.forward, phases.backward_input, phases.backward_weight
        if bwd.async_tp_s or recompute == OFFLOAD:  # changed below: copies of their own (else read only)
            fwd, bwd, wgt = _own_copy(fwd), _own_copy(bwd), _own_copy(wgt)
        known_s = dict(phases.op_seconds) if redo else None
    memory = memory if memory is not None else block_memory(forward, recompute, layer_input_bytes)
    if len(redo) == len(forward) and all(a is b for a, b in zip(redo, forward, strict=True)):
        rec = fwd  # the whole forward again, as timed (read only: nothing below changes `fwd` when there is a redo)
    else:
        rec = _phase_times(redo, ctx, host, known_s) if redo else _PhaseTime()
    if bwd.async_tp_s:
        # the backward's asynchronous TP collectives run while the stream does the weight gradients (and, for the
        # second gathers, the input gradients) or waits for the host; the stream waits for what outlasts that
        gemms = wgt.compute_s + (bwd.gemm_s if "dgrad" in bwd.async_tp_s else 0.0)
        total = sum(bwd.async_tp_s.values())
        exposed = max(0.0, total - gemms - bwd.host_bound_s)
        bwd.comm_exposed_s["tp"] = bwd.comm_exposed_s.get("tp", 0.0) + exposed
        # the GEMMs they run beside share the SMs and HBM with NCCL's kernels; TransformerEngine's userbuffers
        # (`tp_comm_overlap`) run them on 2-16 SMs or the copy engines instead (NeMo's `userbuffers_*` configs)
        if not ctx.tp_comm_overlap:
            wgt.interference_s = ctx.cal.overlap_interference * min(total, gemms)
            wgt.compute_s += wgt.interference_s
    if recompute == OFFLOAD:
        _offload_copies(memory.full_saved_bytes, ctx, fwd, bwd, wgt.compute_s)
    comm_total: dict[str, float] = {}
    comm_exposed: dict[str, float] = {}
    comm_sources: dict[SourceKey, float] = {}
    for phase in (fwd, bwd, rec):
        for label, value in phase.comm_total_s.items():
            comm_total[label] = comm_total.get(label, 0.0) + value
            comm_exposed[label] = comm_exposed.get(label, 0.0) + phase.comm_exposed_s[label]
        for key, value in phase.comm_sources.items():
            comm_sources[key] = comm_sources.get(key, 0.0) + value
    recompute_s = rec.compute_s + sum(rec.comm_exposed_s.values())
    return BlockCost(
        forward_s=fwd.compute_s + sum(fwd.comm_exposed_s.values()),
        backward_input_s=bwd.compute_s + sum(bwd.comm_exposed_s.values()) + recompute_s,
        backward_weight_s=wgt.compute_s,
        recompute_s=recompute_s,
        comm_total_s=comm_total,
        comm_exposed_s=comm_exposed,
        saved_bytes=memory.saved_bytes,
        full_saved_bytes=memory.full_saved_bytes,
        forward_flops=sum(op.flops for op in forward if op.kind in MATMUL_KINDS),
        recompute_flops=sum(op.flops for op in redo if op.kind in MATMUL_KINDS),
        dense_params=memory.dense_params,
        expert_params=memory.expert_params,
        profiled_s=fwd.profiled_s + bwd.profiled_s + wgt.profiled_s,
        host_bound_s=fwd.host_bound_s + bwd.host_bound_s + wgt.host_bound_s,
        forward_comm_exposed_s=sum(fwd.comm_exposed_s.values()),
        backward_comm_exposed_s=sum(bwd.comm_exposed_s.values()) + sum(rec.comm_exposed_s.values()),
        recompute_compute_s=rec.compute_s,
        refetch_params=refetched_params(redo) if redo else 0,
        forward_runahead_s=fwd.runahead_s,
        backward_input_runahead_s=bwd.runahead_s + rec.runahead_s,
        backward_weight_runahead_s=wgt.runahead_s,
        recompute_runahead_s=rec.runahead_s,
        interference_s=(fwd.interference_s, bwd.interference_s, wgt.interference_s),
        comm_sources=comm_sources,
    )
