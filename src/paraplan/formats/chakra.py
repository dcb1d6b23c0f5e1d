"""Chakra execution traces of one training step, one file per rank, for ASTRA-sim.

Each rank's trace is its operator graph for the whole step, in the order its pipeline schedule runs the
micro-batches (Megatron's 1F1B, interleaved 1F1B or GPipe): per micro-batch and model chunk the forward
operators of every layer, then (in backward) the recomputed operators and the input- and weight-gradient
operators. Compute operators become COMP_NODEs (`num_ops` = FLOPs, `tensor_size` = bytes moved,
`duration_micros` from `paraplan.cost.compute`); the communication the plan inserts becomes COMM_COLL_NODEs
(TP, CP, EP, expert-TP, and the DP gradient reduction and parameter gather, with `comm_type`, `comm_size` in
bytes and `pg_name`, the id of the process group in `comm_group.json`, which ASTRA-sim reads with
`--comm-group-configuration`); pipeline activations and gradients become COMM_SEND_NODE/COMM_RECV_NODE
pairs with `comm_src`, `comm_dst` and a `comm_tag` shared by both ends. Dependencies are `data_deps`: each
node waits for the one before it on its rank's compute stream (receives block, as Megatron's do), sends
and overlapped DP collectives hang off the node that produces their data.

Ranks follow Megatron's order (tp fastest, then cp, dp, pp; experts as etp, ep, edp within a stage).
Schedules of Megatron's stage layout are exported (`Layout.LOOP`: not ZB-V and DualPipe(V)); ZB-H1 is written
in 1F1B order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from paraplan.cost.block import refetched_params, weight_params
from paraplan.cost.calibration import Calibration, at_scale, calibration_for
from paraplan.cost.comm import collective_time_s, place_group
from paraplan.cost.compute import compute_time_s
from paraplan.errors import ConfigError
from paraplan.formats.chakra_pb import (
    Attr,
    CollectiveCommType,
    GlobalMetadata,
    Node,
    NodeType,
    attr_field,
    encode_node,
    write_trace,
)
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.backward import backward_ops
from paraplan.graph.ops import CommAxis, CommKind, Op, OpKind, Phase
from paraplan.graph.partition import chunks_per_rank, model_stage_ranks, virtual_stages
from paraplan.memory.activations import FULL_INNER, layer_modes, recomputed_ops
from paraplan.projection import group_placements, is_bf16_layer, part_shard
from paraplan.specs.model import ModelSpec
from paraplan.specs.schedule import SCHEDULES, Layout
from paraplan.specs.schedule import schedule as schedule_named
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import LOW_PRECISIONS, TrainingSpec
from paraplan.specs.validate import check
from paraplan.textfiles import MIB, OUTPUT_MAX_MIB, mib_text

COLL_TYPE = {
    CommKind.ALL_REDUCE: CollectiveCommType.ALL_REDUCE,
    CommKind.ALL_GATHER: CollectiveCommType.ALL_GATHER,
    CommKind.REDUCE_SCATTER: CollectiveCommType.REDUCE_SCATTER,
    CommKind.ALL_TO_ALL: CollectiveCommType.ALL_TO_ALL,
}
AXIS_GROUP = {CommAxis.TP: "tp", CommAxis.CP: "cp", CommAxis.EP: "ep", CommAxis.ETP: "etp"}
EXPORTED_SCHEDULES = tuple(name for name, s in SCHEDULES.items() if s.layout is Layout.LOOP)
"""Schedules whose stages sit as Megatron's do (stage s on rank s % pp); played in GPipe's order or 1F1B's."""


# ----------------------------------------------------------------------------- schedule order
def schedule_items(schedule: str, pp: int, rank: int, m: int, chunks: int) -> list[tuple[str, int, int]]:
    """(F or B, micro-batch, local chunk) in the order pipeline rank `rank` runs them (Megatron-core's
    `forward_backward_pipelining_with(out)_interleaving`, micro-batch groups of pp; GPipe's all forwards first)."""
    if schedule_named(schedule).all_forwards_first:
        return [("F", mb, 0) for mb in range(m)] + [("B", mb, 0) for mb in range(m)]
    if chunks == 1:
        warmup = min(pp - rank - 1, m)
        items = [("F", mb, 0) for mb in range(warmup)]
        for i in range(m - warmup):
            items += [("F", warmup + i, 0), ("B", i, 0)]
        return items + [("B", mb, 0) for mb in range(m - warmup, m)]
    total = m * chunks

    def forward(k: int) -> tuple[str, int, int]:
        return "F", (k // (pp * chunks)) * pp + k % pp, (k // pp) % chunks

    def backward(k: int) -> tuple[str, int, int]:
        return "B", (k // (pp * chunks)) * pp + k % pp, chunks - 1 - (k // pp) % chunks

    warmup = min((pp - rank - 1) * 2 + (chunks - 1) * pp, total)
    items = [forward(k) for k in range(warmup)]
    for i in range(total - warmup):
        items += [forward(warmup + i), backward(i)]
    return items + [backward(k) for k in range(total - warmup, total)]


# ----------------------------------------------------------------------------- ranks and groups
@dataclass(frozen=True, slots=True)
class RankGrid:
    tp: int
    cp: int
    dp: int
    pp: int
    ep: int
    etp: int

    @property
    def stage_size(self) -> int:
        return self.tp * self.cp * self.dp

    @property
    def world(self) -> int:
        return self.stage_size * self.pp

    def coords(self, rank: int) -> tuple[int, int, int, int]:
        """(tp, cp, dp, pp) index of a rank (Megatron order, tp fastest)."""
        return rank % self.tp, rank // self.tp % self.cp, rank // (self.tp * self.cp) % self.dp, rank // self.stage_size

    def rank(self, tp_i: int, cp_i: int, dp_i: int, pp_i: int) -> int:
        return tp_i + self.tp * (cp_i + self.cp * (dp_i + self.dp * pp_i))

    def members(self, rank: int, axis: str) -> tuple[int, ...]:
        t, c, d, p = self.coords(rank)
        if axis == "tp":
            return tuple(self.rank(i, c, d, p) for i in range(self.tp))
        if axis == "cp":
            return tuple(self.rank(t, i, d, p) for i in range(self.cp))
        if axis == "dp":  # gradients reduce over data and context parallel ranks together
            return tuple(self.rank(t, i % self.cp, i // self.cp, p) for i in range(self.cp * self.dp))
        base, local = p * self.stage_size, rank % self.stage_size
        e_t, e_p, e_d = local % self.etp, local // self.etp % self.ep, local // (self.etp * self.ep)
        edp = self.stage_size // (self.etp * self.ep)

        def at(a: int, b: int, c_: int) -> int:
            return base + a + self.etp * (b + self.ep * c_)

        if axis == "etp":
            return tuple(at(i, e_p, e_d) for i in range(self.etp))
        if axis == "ep":
            return tuple(at(e_t, i, e_d) for i in range(self.ep))
        if axis == "edp":
            return tuple(at(e_t, e_p, i) for i in range(edp))
        raise ValueError(axis)


# ----------------------------------------------------------------------------- one pipeline rank's program
@dataclass(frozen=True, slots=True)
class Slot:
    """A node of a pipeline rank's program; `group`/`peer_stage` are filled in per world rank."""

    node: Node
    group: str | None = None  # process-group axis of a collective
    peer_stage: int | None = None  # virtual stage at the other end of a send/recv


class _Costs:
    """Seconds of one operator or collective under this plan (paraplan's analytic costs)."""

    def __init__(self, system: SystemSpec, cal: Calibration, train: TrainingSpec) -> None:
        self.system, self.cal, self.train = system, cal, train
        self.groups = group_placements(train, system)
        gpn = system.gpus_per_node
        edp = max(1, train.tp * train.cp * train.dp // (train.etp * train.ep))
        self.named = {
            "dp": place_group(train.dp * train.cp, train.tp, gpn),
            "edp": place_group(edp, train.etp * train.ep, gpn),
            "pp": place_group(train.pp, train.tp * train.cp * train.dp, gpn),
        }

    def seconds(self, op: Op) -> float:
        if op.kind is OpKind.COMM:
            comm = op.comm
            assert comm is not None
            return collective_time_s(comm.kind, comm.bytes, self.groups[comm.axis], self.system, self.cal, comm.routing)
        return compute_time_s(op, self.system.gpu, self.cal)

    def collective_s(self, kind: CommKind, nbytes: float, group: str) -> float:
        return collective_time_s(kind, nbytes, self.named[group], self.system, self.cal)


def _micros(seconds: float) -> int:
    return max(1, round(seconds * 1e6))


class _ProgramTooLarge(Exception):
    """A rank's program passed its node budget (`export_chakra`'s size limit) while being built."""


class _Program:
    def __init__(self, costs: _Costs, max_nodes: int | None = None) -> None:
        self.costs = costs
        self.max_nodes = max_nodes
        self.slots: list[Slot] = []
        self.last: int | None = None
        train = costs.train
        self.sizes = {
            "dp": train.dp * train.cp,
            "edp": max(1, train.tp * train.cp * train.dp // (train.etp * train.ep)),
        }

    def add(
        self,
        node: Node,
        *,
        chain: bool = True,
        deps: tuple[int, ...] = (),
        group: str | None = None,
        peer_stage: int | None = None,
    ) -> int:
        """Append a node; `chain` nodes also wait for, and become, the last node of the compute stream."""
        node.id = len(self.slots)
        if self.max_nodes is not None and node.id >= self.max_nodes:
            raise _ProgramTooLarge
        node.data_deps = sorted({*deps, *([self.last] if chain and self.last is not None else [])})
        self.slots.append(Slot(node, group, peer_stage))
        if chain:
            self.last = node.id
        return node.id

    def op(self, op: Op, name: str) -> None:
        seconds = self.costs.seconds(op)
        if op.kind is not OpKind.COMM:
            attrs = [
                Attr("is_cpu_op", "bool", False),
                Attr("num_ops", "int64", round(op.flops)),
                Attr("tensor_size", "uint64", round(op.bytes_moved)),
            ]
            self.add(Node(0, name, NodeType.COMP_NODE, duration_micros=_micros(seconds), attrs=attrs))
            return
        comm = op.comm
        assert comm is not None
        if comm.group_size <= 1:
            return
        kind, size = comm.kind, comm.bytes
        if kind is CommKind.SEND_RECV:  # CP ring exchange of K/V: the traffic of an all-gather of the shards
            kind, size = CommKind.ALL_GATHER, comm.bytes * comm.group_size / (comm.group_size - 1)
        self.collective(name, kind, size, AXIS_GROUP[comm.axis], _micros(seconds))

    def collective(
        self, name: str, kind: CommKind, nbytes: float, group: str, micros: int, *, chain: bool = True, deps=()
    ) -> int:
        attrs = [
            Attr("is_cpu_op", "bool", False),
            Attr("comm_type", "int64", int(COLL_TYPE[kind])),
            Attr("comm_size", "int64", round(nbytes)),
        ]
        node = Node(0, name, NodeType.COMM_COLL_NODE, duration_micros=micros, attrs=attrs)
        return self.add(node, chain=chain, deps=tuple(deps), group=group)

    def data_parallel(
        self, name: str, kind: CommKind, bytes_per_param: int, params: tuple[float, float], *, chain: bool
    ) -> list[int]:
        """One collective over the DP group for dense parameters and one over expert-DP for expert ones."""
        after = () if chain or self.last is None else (self.last,)
        ids = []
        for group, count in (("dp", params[0]), ("edp", params[1])):
            if count and self.sizes[group] > 1:
                nbytes = count * bytes_per_param
                micros = _micros(self.costs.collective_s(kind, nbytes, group))
                ids.append(self.collective(f"{name}.{group}", kind, nbytes, group, micros, chain=chain, deps=after))
        return ids

    def p2p(self, name: str, send: bool, nbytes: float, tag: int, peer: int, micros: int) -> int:
        """A send hangs off the last node (asynchronous); a receive blocks the stream."""
        deps = (self.last,) if send and self.last is not None else ()
        attrs = [
            Attr("is_cpu_op", "bool", False),
            Attr("comm_size", "int64", round(nbytes)),
            Attr("comm_tag", "int32", tag),
        ]
        kind = NodeType.COMM_SEND_NODE if send else NodeType.COMM_RECV_NODE
        node = Node(0, name, kind, duration_micros=micros, attrs=attrs)
        return self.add(node, chain=not send, deps=deps, peer_stage=peer)


def _layer_recompute(train: TrainingSpec, index_in_chunk: int, layer: int) -> str:
    """The layer's mode as the projection applies it (`memory.activations.layer_modes`: block and uniform methods,
    Primus's layer ids, named modules, activation offloading)."""
    mode, block_layers, per_layer = layer_modes(train)
    if mode == "full" and block_layers is not None and index_in_chunk >= block_layers:
        mode = "none"
    return per_layer.mode_of(mode, layer, index_in_chunk) if per_layer is not None else mode


def _busiest_pp_rank(model: ModelSpec, system: SystemSpec, train: TrainingSpec, cal: Calibration) -> int:
    """The pipeline rank with the most forward compute per micro-batch."""
    shard = L.Shard.of(train)
    stages = virtual_stages(model, train)
    busy = [0.0] * train.pp
    for v, (rank, _) in enumerate(model_stage_ranks(train)):
        for _, _, ops in _stage_parts(model, shard, train, stages[v]):
            busy[rank] += sum(compute_time_s(op, system.gpu, cal) for op in ops if op.kind is not OpKind.COMM)
    return max(range(train.pp), key=busy.__getitem__)


def _stage_parts(model: ModelSpec, shard: L.Shard, train: TrainingSpec, stage) -> list[tuple[str, str, list[Op]]]:
    """(part name, recompute mode, forward ops) of one virtual stage in forward order: the first stage's edge
    blocks (the embedding), the decoder layers, the last stage's (the head, the MTP modules)."""
    parts: list[tuple[str, str, list[Op]]] = []
    if stage.has_embedding:
        parts += _edge_parts(model, shard, K.Placement.FIRST)
    for i in range(stage.num_layers):
        layer = stage.first_layer + i
        bf16 = is_bf16_layer(layer, model.num_layers, train.bf16_edge_layers)  # `--first-last-layers-bf16`
        ops = K.decoder_kind_of(model, layer).ops(model, part_shard(shard, bf16))
        parts.append((f"layer{layer}", _layer_recompute(train, i, layer), ops))
    if stage.has_head:
        parts += _edge_parts(model, shard, K.Placement.LAST)
    return parts


def _edge_parts(model: ModelSpec, shard: L.Shard, placement: K.Placement) -> list[tuple[str, str, list[Op]]]:
    """The edge blocks at one end of the model; blocks that hold a layer are numbered (mtp0, mtp1, ...)."""
    parts: list[tuple[str, str, list[Op]]] = []
    for kind in K.edge_kinds(placement):
        count = kind.count(model) if kind.count is not None else 0
        if not count:
            continue
        ops = kind.ops(model, shard)
        names = [f"{kind.name}{k}" for k in range(count)] if kind.holds_layer else [kind.name] * count
        parts += [(name, "none", ops) for name in names]
    return parts


def _tag(mb: int, stage: int, backward: bool, stages: int) -> int:
    return (mb * stages + stage) * 2 + int(backward)


def rank_program(
    model: ModelSpec,
    system: SystemSpec,
    train: TrainingSpec,
    pp_rank: int,
    cal: Calibration,
    max_nodes: int | None = None,
) -> list[Slot]:
    """The program of every rank of pipeline stage `pp_rank` (the same up to group ids and peers); `max_nodes`:
    stop building (`_ProgramTooLarge`) once it has that many."""
    costs = _Costs(system, cal, train)
    shard = L.Shard.of(train)
    chunks = chunks_per_rank(train)
    stages = virtual_stages(model, train)
    order = model_stage_ranks(train)
    last_stage = len(order) - 1
    stage_of = {rc: v for v, rc in enumerate(order)}
    parts = {v: _stage_parts(model, shard, train, stages[v]) for v, (r, _) in enumerate(order) if r == pp_rank}
    params = {v: _params(ops for _, _, ops in parts[v]) for v in parts}
    gathered = {v: _fsdp_gathered(train, parts[v], params[v]) for v in parts}
    optimizer_gathered = {v: _optimizer_gathered(train, parts[v], params[v]) for v in parts}
    refetch = {v: _refetch(parts[v], params[v]) for v in parts} if train.refetches_recomputed_params else {}
    p2p_bytes = L.ACT_BYTES * shard.tokens * model.hidden_size / shard.sp_div
    p2p_micros = _micros(costs.collective_s(CommKind.SEND_RECV, p2p_bytes, "pp"))
    items = schedule_items(train.pipeline_schedule, train.pp, pp_rank, train.num_microbatches, chunks)
    last_backward = {c: max(i for i, (k, _, c2) in enumerate(items) if k == "B" and c2 == c) for c in range(chunks)}
    program = _Program(costs, max_nodes)
    grad_bytes, param_bytes = train.grad_reduce_bytes, train.param_gather_bytes
    dp_ends: list[int] = []
    for index, (kind, mb, chunk) in enumerate(items):
        v = stage_of[(pp_rank, chunk)]
        label = f"{kind}.mb{mb}.s{v}"
        if train.shards_params:  # FSDP: gather the chunk's parameters before its forward and its backward
            program.data_parallel(f"{label}.fsdp_gather", CommKind.ALL_GATHER, param_bytes, gathered[v], chain=True)
        if kind == "B" and refetch.get(v):  # ZeRO-3: again, what the recomputed forward released
            program.data_parallel(f"{label}.fsdp_refetch", CommKind.ALL_GATHER, param_bytes, refetch[v], chain=True)
        if kind == "F":
            if v > 0:
                program.p2p(f"{label}.recv_act", False, p2p_bytes, _tag(mb, v, False, len(order)), v - 1, p2p_micros)
            for part, _, ops in parts[v]:
                for op in ops:
                    program.op(op, f"{label}.{part}.{op.name}")
            if v < last_stage:
                tag = _tag(mb, v + 1, False, len(order))
                program.p2p(f"{label}.send_act", True, p2p_bytes, tag, v + 1, p2p_micros)
            continue
        if v < last_stage:
            program.p2p(f"{label}.recv_grad", False, p2p_bytes, _tag(mb, v, True, len(order)), v + 1, p2p_micros)
        for part, mode, ops in reversed(parts[v]):
            # torchtitan's selective ("op") keeps its trace as before: the core-attention ops redone
            redo = [op for op in ops if "selective" in op.tags] if mode == "op" else recomputed_ops(ops, mode)
            for op in redo:
                program.op(op, f"R.mb{mb}.s{v}.{part}.{op.name}")
            for op in reversed(ops):
                for grad in backward_ops(op):
                    phase = "W" if grad.phase is Phase.BACKWARD_WEIGHT else "B"
                    program.op(grad, f"{phase}.mb{mb}.s{v}.{part}.{op.name}")
        if v > 0:
            program.p2p(f"{label}.send_grad", True, p2p_bytes, _tag(mb, v - 1, True, len(order)), v - 1, p2p_micros)
        if train.shards_params:
            program.data_parallel(
                f"{label}.fsdp_reduce_scatter", CommKind.REDUCE_SCATTER, grad_bytes, params[v], chain=True
            )
        elif index == last_backward[chunk]:  # the chunk's gradients are complete: reduce them over DP
            kind_dp = CommKind.REDUCE_SCATTER if train.shards_optimizer else CommKind.ALL_REDUCE
            overlap = train.overlap_grad_reduce
            dp_ends += program.data_parallel(f"s{v}.grad_reduce", kind_dp, grad_bytes, params[v], chain=not overlap)
    _optimizer(program, train, system, cal, params, dp_ends, optimizer_gathered)
    return program.slots


def _refetch(parts, params: tuple[float, float]) -> tuple[float, float]:
    """(dense, expert) parameters a ZeRO-3 backward gathers again after the recomputed forward: the recomputed
    weights' share of the chunk's parameters, as in the projection."""
    total = params[0] + params[1]
    again = sum(refetched_params(ops) for _, mode, ops in parts if mode in ("full", FULL_INNER))
    share = again / total if total else 0.0
    return params[0] * share, params[1] * share


def _params(op_lists) -> tuple[float, float]:
    dense = expert = 0.0
    for ops in op_lists:
        for op in ops:
            n = weight_params(op)
            if op.expert:
                expert += n
            else:
                dense += n
    return dense, expert


def _fsdp_gathered(train: TrainingSpec, parts, params: tuple[float, float]) -> tuple[float, float]:
    """A stage's (dense, expert) parameters as FSDP all-gathers them, counted in `param_gather_bytes` elements: under
    torchao's float8 all-gather its dense low-precision GEMMs' weights travel in one byte each
    (`TrainingSpec.fsdp_gather_bytes`); `params` as they are otherwise."""
    if not train.fsdp_float8_all_gather:
        return params
    float8 = _low_precision_params(parts)[0]
    return train.fsdp_gather_bytes(params[0], float8) / train.param_gather_bytes, params[1]


def _low_precision_params(parts) -> tuple[float, float]:
    """(dense, expert) weights of a stage's low-precision GEMMs."""
    return _params([op for op in ops if op.precision in LOW_PRECISIONS] for _, _, ops in parts)


def _optimizer_gathered(train: TrainingSpec, parts, params: tuple[float, float]) -> tuple[float, float]:
    """A stage's (dense, expert) parameters as the distributed optimizer all-gathers them, counted in
    `param_gather_bytes` elements: its quantised primary weights in one byte each under
    `TrainingSpec.gathers_quantized_weights` (`TrainingSpec.one_byte_gather_bytes`); `params` as they are otherwise."""
    if not train.gathers_quantized_weights:
        return params
    one_byte = _low_precision_params(parts)
    return tuple(  # type: ignore[return-value]
        train.one_byte_gather_bytes(n, q) / train.param_gather_bytes for n, q in zip(params, one_byte, strict=True)
    )


def _optimizer(
    program: _Program,
    train: TrainingSpec,
    system: SystemSpec,
    cal: Calibration,
    params: dict[int, tuple[float, float]],
    dp_ends: list[int],
    gathered: dict[int, tuple[float, float]],
) -> None:
    """Adam over this rank's parameters (its shard of them when sharded), then the parameter all-gather of
    the distributed optimizer (`gathered`: each stage's parameters as it gathers them, `_optimizer_gathered`)."""
    dense = sum(d for d, _ in params.values())
    expert = sum(e for _, e in params.values())
    dp_size, edp_size = program.sizes["dp"], program.sizes["edp"]
    local = dense / dp_size + expert / edp_size if (train.shards_optimizer or train.shards_params) else dense + expert
    nbytes = local * cal.optimizer_bytes_per_param
    seconds = nbytes / (system.gpu.hbm_bytes_per_s * cal.memory_efficiency)
    attrs = [
        Attr("is_cpu_op", "bool", False),
        Attr("num_ops", "int64", round(10 * local)),  # about 10 FLOPs per parameter for an Adam update
        Attr("tensor_size", "uint64", round(nbytes)),
    ]
    node = Node(0, "optimizer_step", NodeType.COMP_NODE, duration_micros=_micros(seconds), attrs=attrs)
    program.add(node, deps=tuple(dp_ends))
    if train.shards_optimizer and not train.shards_params:
        sent = (sum(d for d, _ in gathered.values()), sum(e for _, e in gathered.values()))
        program.data_parallel("param_gather", CommKind.ALL_GATHER, train.param_gather_bytes, sent, chain=True)


# ----------------------------------------------------------------------------- writing all ranks
@dataclass(frozen=True, slots=True)
class ChakraExport:
    paths: tuple[Path, ...]
    comm_groups_path: Path
    nodes_per_rank: tuple[int, ...]
    bytes_written: int = 0
    """The traces' bytes, `comm_group.json` aside."""


MIN_NODE_BYTES = 24
"""Fewest bytes a node takes in a trace (length prefix, id, a short name, type, one dependency, a duration and the
`is_cpu_op` attribute; a compute node with its FLOPs and bytes takes 60-100): what a program's nodes are counted at
while it is built, so the size limit stops the building before a program's memory does."""
PEER_ATTR_BYTES = 24
"""Bytes `_finish` adds at most to a communication node (a process group id, or the two ends of a send/recv)."""


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def _program_bytes(slots: list[Slot], encoded: list[bytes]) -> int:
    """A program's bytes in a trace: each node length-prefixed, with what `_finish` adds to a communication node."""
    extra = sum(PEER_ATTR_BYTES for slot in slots if slot.group is not None or slot.peer_stage is not None)
    return sum(len(blob) + _varint_len(len(blob) + PEER_ATTR_BYTES) for blob in encoded) + extra


def _check_scaled_estimate(
    model: ModelSpec,
    system: SystemSpec,
    train: TrainingSpec,
    copies: dict[int, int],
    cal_of: dict[int, Calibration],
    max_bytes: float,
) -> None:
    """Refuse, before the programs are built, traces whose size the fewest micro-batches a schedule plays already
    show over `max_bytes`: a program is a constant part (the optimizer, the gradient reduction) and the same nodes
    again for every micro-batch, so its bytes at m micro-batches are at most m / m_small times those at m_small (the
    pipeline ranks that hold the same stages built once)."""
    m = train.num_microbatches
    chunks = chunks_per_rank(train)
    m_small = train.pp if chunks > 1 else 1  # interleaved: each chunk's backward needs a full group of pp
    if m_small >= m:
        return
    small = replace(train, global_batch_size=train.mbs * train.dp * m_small)
    stages = virtual_stages(model, train)
    order = model_stage_ranks(train)

    def held(pp_rank: int) -> tuple:
        own = [stages[v] for v, (r, _) in enumerate(order) if r == pp_rank]
        kinds = [tuple(K.decoder_kind_of(model, s.first_layer + i).name for i in range(s.num_layers)) for s in own]
        return tuple((s.has_embedding, s.has_head, k) for s, k in zip(own, kinds, strict=True))

    sizes: dict[tuple, int] = {}
    total = 0.0
    for pp_rank, n in sorted(copies.items()):
        key = held(pp_rank)
        if key not in sizes:
            slots = rank_program(model, system, small, pp_rank, cal_of[pp_rank])
            sizes[key] = _program_bytes(slots, [encode_node(slot.node) for slot in slots])
        total += n * sizes[key] * m / m_small
    if total > max_bytes:
        raise ConfigError(
            f"the Chakra traces would be about {mib_text(total)} MiB ({len(copies)} pipeline ranks' programs at "
            f"{m_small} micro-batch{'es' if m_small > 1 else ''} scaled to {m:,}, {sum(copies.values()):,} traces), "
            f"more than --trace-max-mib {max_bytes / MIB:g}: raise the limit, or export fewer micro-batches "
            "(lower gbs)"
        )


def _programs_within(
    model: ModelSpec,
    system: SystemSpec,
    train: TrainingSpec,
    copies: dict[int, int],
    cal_of: dict[int, Calibration],
    max_bytes: float,
) -> tuple[dict[int, tuple[list[Slot], list[bytes]]], int]:
    """Each needed pipeline rank's program (`copies`: how many traces repeat it), encoded, and the traces' total
    bytes; a ConfigError, before anything is written, once the total would pass `max_bytes` (counted at
    `MIN_NODE_BYTES` a node while a program is built, then exactly)."""
    _check_scaled_estimate(model, system, train, copies, cal_of, max_bytes)
    programs: dict[int, tuple[list[Slot], list[bytes]]] = {}
    total = 0
    for pp_rank, n in sorted(copies.items()):
        budget = max(0, int((max_bytes - total) / (n * MIN_NODE_BYTES)))
        try:
            slots = rank_program(model, system, train, pp_rank, cal_of[pp_rank], max_nodes=budget + 1)
        except _ProgramTooLarge:
            at_least = total + n * (budget + 1) * MIN_NODE_BYTES
            raise ConfigError(
                f"the Chakra traces would be at least {mib_text(at_least)} MiB (pipeline rank {pp_rank}'s program, "
                f"written {n:,} times, passed {budget + 1:,} nodes), more than --trace-max-mib {max_bytes / MIB:g}: "
                "raise the limit, or export fewer micro-batches (lower gbs)"
            ) from None
        encoded = [encode_node(slot.node) for slot in slots]
        size = _program_bytes(slots, encoded)
        programs[pp_rank] = (slots, encoded)
        total += n * size
        if total > max_bytes:
            raise ConfigError(
                f"the Chakra traces would be at least {mib_text(total)} MiB (pipeline ranks up to {pp_rank} alone; "
                f"{len(slots):,} nodes on rank {pp_rank}, written {n:,} times), more than --trace-max-mib "
                f"{max_bytes / MIB:g}: raise the limit, or export fewer micro-batches (lower gbs)"
            )
    return programs, total


def _finish(
    slot: Slot, rank: int, grid: RankGrid, order: list[tuple[int, int]], groups: dict[tuple[int, ...], int]
) -> bytes:
    """The attributes that make a rank's communication node its own: the process group id of a collective,
    or the two ends of a send/recv. `attr` is the last field of a Node, so these follow its cached bytes."""
    if slot.group is not None:
        members = grid.members(rank, slot.group)
        extra = [Attr("pg_name", "string", str(groups.setdefault(members, len(groups) + 1)))]
    else:
        assert slot.peer_stage is not None
        t, c, d, _ = grid.coords(rank)
        peer = grid.rank(t, c, d, order[slot.peer_stage][0])
        is_send = slot.node.type is NodeType.COMM_SEND_NODE
        extra = [
            Attr("comm_src", "int32", rank if is_send else peer),
            Attr("comm_dst", "int32", peer if is_send else rank),
        ]
    return b"".join(attr_field(a) for a in extra)


def _export_plan(
    model: ModelSpec,
    system: SystemSpec,
    train: TrainingSpec,
    calibration: Calibration | None,
    ranks: tuple[int, ...] | None,
) -> tuple[TrainingSpec, RankGrid, tuple[int, ...], dict[int, int], dict[int, Calibration]]:
    """(checked training spec, rank grid, the ranks to write, how many of them each pipeline rank's program
    makes, the calibration each pipeline rank runs at)."""
    train = check(model, system, train)
    if train.pipeline_schedule not in EXPORTED_SCHEDULES:
        raise ConfigError(
            f"Chakra export plays {', '.join(EXPORTED_SCHEDULES)} schedules, not {train.pipeline_schedule}"
        )
    base = calibration or calibration_for(system.gpu.name, train.framework)
    cal = at_scale(base, system.num_gpus)
    # the busiest stage holds the job's slowest chip, the others run at the typical speed (`projection.project_specs`)
    slowest = _busiest_pp_rank(model, system, train, cal)
    grid = RankGrid(train.tp, train.cp, train.dp, train.pp, train.ep, train.etp)
    wanted = tuple(range(grid.world)) if ranks is None else ranks
    bad = [r for r in wanted if not 0 <= r < grid.world]
    if bad:
        raise ConfigError(f"ranks {bad} are outside the world of {grid.world} GPUs")
    copies: dict[int, int] = {}
    for rank in wanted:
        pp_rank = grid.coords(rank)[3]
        copies[pp_rank] = copies.get(pp_rank, 0) + 1
    return train, grid, wanted, copies, {r: cal if r == slowest else base for r in copies}


def check_chakra_size(
    model: ModelSpec, system: SystemSpec, train: TrainingSpec, max_mib: float = OUTPUT_MAX_MIB
) -> None:
    """Refuse (ConfigError) a layout whose traces the fewest micro-batches already show over `max_mib`, or that
    cannot be exported: what `export_chakra` checks first, without building the full programs (a caller that
    does other work before exporting asks this first)."""
    train, _, _, copies, cal_of = _export_plan(model, system, train, None, None)
    _check_scaled_estimate(model, system, train, copies, cal_of, max_mib * MIB)


def export_chakra(
    model: ModelSpec,
    system: SystemSpec,
    train: TrainingSpec,
    out_dir: str | Path,
    *,
    prefix: str = "paraplan",
    calibration: Calibration | None = None,
    ranks: tuple[int, ...] | None = None,
    max_mib: float = OUTPUT_MAX_MIB,
) -> ChakraExport:
    """Write `{prefix}.{rank}.et` for every rank (or the given ones) and `comm_group.json` into `out_dir`; refused
    (ConfigError, nothing written) when the traces would take more than `max_mib` MiB (`_programs_within`)."""
    train, grid, wanted, copies, cal_of = _export_plan(model, system, train, calibration, ranks)
    programs, _ = _programs_within(model, system, train, copies, cal_of, max_mib * MIB)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    order = model_stage_ranks(train)
    groups: dict[tuple[int, ...], int] = {}
    paths, counts = [], []
    for rank in wanted:
        slots, cached = programs[grid.coords(rank)[3]]
        encoded = (
            blob if slot.group is None and slot.peer_stage is None else blob + _finish(slot, rank, grid, order, groups)
            for slot, blob in zip(slots, cached, strict=True)
        )
        meta = GlobalMetadata(
            attrs=[
                Attr("generator", "string", "paraplan"),
                Attr("rank", "int64", rank),
                Attr("world_size", "int64", grid.world),
                Attr("model", "string", model.name),
            ]
        )
        path = out / f"{prefix}.{rank}.et"
        write_trace(path, meta, encoded)
        paths.append(path)
        counts.append(len(slots))
    groups_path = out / "comm_group.json"
    groups_path.write_text(json.dumps({str(i): list(m) for m, i in groups.items()}, indent=1) + "\n")
    written = sum(path.stat().st_size for path in paths)
    return ChakraExport(tuple(paths), groups_path, tuple(counts), written)
