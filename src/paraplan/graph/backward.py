"""Backward operators derived from forward ones.

A GEMM Y = X W backward is two GEMMs: dX = dY W^T (input gradient, B) and dW = X^T dY (weight gradient,
W), each with the forward's FLOPs. Weightless batched matmuls (attention scores and context) have two
input-gradient GEMMs. Flash attention's backward is one fused kernel with 2.5x the forward FLOPs (Dao
2023). Memory-bound ops read the saved input and the output gradient and write the input gradient.
Collectives mirror their forward: all-gather <-> reduce-scatter, all-reduce and all-to-all stay. Under sequence
parallelism a column-parallel linear keeps only its input's sequence shard, so its backward gathers the input again
for the weight gradient (Megatron `LinearWithGradAccumulationAndAsyncCommunication`, TransformerEngine's Linear).
"""

from __future__ import annotations

from dataclasses import fields

from paraplan.graph.ops import CommKind, CommShape, GemmShape, Op, OpKind, Phase

# A TP collective whose backward is a column-parallel linear's input-gradient collective (`graph.layers`), and the
# backward's second gather of that linear's sequence-parallel input
TP_INPUT_GRAD = frozenset({"tp_input_grad"})
TP_REGATHER = frozenset({"tp_regather"})
WEIGHTLESS_GEMMS = frozenset({"attn_scores", "attn_context", "indexer_scores"})
FLASH_BACKWARD_FLOPS = 2.5
# A chunked scan's backward (mamba_ssm `ChunkScanCombinedFn.backward`, fla's chunked delta rule) recomputes the chunk
# states and takes two gradient matmuls per forward matmul: counted like flash attention's, 2.5x the forward FLOPs
# (an assumption: no published FLOP count of these backward kernels was found).
SCAN_BACKWARD_FLOPS = 2.5
ELEMENTWISE_BACKWARD_TRAFFIC = 1.5  # read the saved input and the output gradient, write the input gradient


# the names with and without the MTP module's prefix: `name.removeprefix("mtp_") in WEIGHTLESS_GEMMS`, one lookup
_WEIGHTLESS_NAMES = WEIGHTLESS_GEMMS | {f"mtp_{name}" for name in WEIGHTLESS_GEMMS}
_GEMM = OpKind.GEMM


def is_weightless_gemm(op: Op) -> bool:
    """A batched matmul of two activations (attention scores and context, an MTP module's too): no weight, so no
    weight gradient and no parameters."""
    return op.kind is _GEMM and op.name in _WEIGHTLESS_NAMES


_MIRROR = {
    CommKind.ALL_GATHER: CommKind.REDUCE_SCATTER,
    CommKind.REDUCE_SCATTER: CommKind.ALL_GATHER,
    CommKind.ALL_REDUCE: CommKind.ALL_REDUCE,
    CommKind.ALL_TO_ALL: CommKind.ALL_TO_ALL,
    CommKind.SEND_RECV: CommKind.SEND_RECV,
}


_OP_FIELDS = tuple(f.name for f in fields(Op))  # in order; all are init fields
if tuple(f.name for f in fields(CommShape)) != ("kind", "axis", "group_size", "bytes", "routing"):
    raise AssertionError("CommShape's fields changed: update backward_ops' mirrored collective")


def _op_with(op: Op, **changes: object) -> Op:
    """`dataclasses.replace(op, **changes)`, built positionally: the same Op at half the cost (a block's backward
    is built for every block shape the projection meets)."""
    return Op(*[changes[name] if name in changes else getattr(op, name) for name in _OP_FIELDS])  # type: ignore[arg-type]


def _grad_op(
    op: Op,
    phase: Phase,
    flops: float,
    bytes_moved: float,
    gemm: GemmShape | None,
    comm: CommShape | None,
    saved_bytes: float,
    host_ops: int,
) -> Op:
    """`_op_with(op, phase=..., flops=..., ...)` of the fields a backward op changes, in one call (a block's backward
    is built for every block shape a projection meets)."""
    return Op(
        op.name, op.kind, phase, flops, bytes_moved, gemm, op.attention, comm, op.scan, saved_bytes, op.precision,
        op.tags, host_ops, op.backward_bytes, op.expert,
    )  # fmt: skip


def _gemm_grad(op: Op, phase: Phase, gemm: GemmShape) -> Op:
    return _grad_op(op, phase, op.flops, op.bytes_moved, gemm, op.comm, 0.0, op.host_ops)


def backward_ops(op: Op) -> list[Op]:
    if op.kind is OpKind.GEMM:
        g = op.gemm
        assert g is not None
        dx = _gemm_grad(op, Phase.BACKWARD_INPUT, GemmShape(g.m, g.k, g.n, g.count))
        if is_weightless_gemm(op):
            return [dx, _gemm_grad(op, Phase.BACKWARD_INPUT, GemmShape(g.k, g.n, g.m, g.count))]
        return [dx, _gemm_grad(op, Phase.BACKWARD_WEIGHT, GemmShape(g.k, g.n, g.m, g.count))]
    if op.kind is OpKind.ATTENTION:
        flops, moved = op.flops * FLASH_BACKWARD_FLOPS, op.bytes_moved * 2
        return [_grad_op(op, Phase.BACKWARD_INPUT, flops, moved, op.gemm, op.comm, 0.0, op.host_ops)]
    if op.kind is OpKind.SCAN:
        return [
            _op_with(
                op, phase=Phase.BACKWARD_INPUT, flops=op.flops * SCAN_BACKWARD_FLOPS, bytes_moved=op.bytes_moved * 2,
                saved_bytes=0.0, host_ops=2 * op.host_ops,
            )
        ]  # fmt: skip
    if op.kind is OpKind.ELEMENTWISE:
        moved = op.bytes_moved * ELEMENTWISE_BACKWARD_TRAFFIC if op.backward_bytes is None else op.backward_bytes
        # an eager split is a view forward (no kernel) and one concatenation backward
        return [_grad_op(op, Phase.BACKWARD_INPUT, op.flops * 2, moved, op.gemm, op.comm, 0.0, max(op.host_ops, 1))]
    comm = op.comm
    assert comm is not None
    factor = 2.0 if comm.kind is CommKind.SEND_RECV else 1.0  # CP: K/V again plus their gradients
    # `replace(comm, kind=..., bytes=...)`, built positionally (a third of the op's backward, issue 35)
    mirrored = CommShape(_MIRROR[comm.kind], comm.axis, comm.group_size, comm.bytes * factor, comm.routing)
    out = [_grad_op(op, Phase.BACKWARD_INPUT, op.flops, comm.bytes * factor, op.gemm, mirrored, op.saved_bytes,
                    op.host_ops)]  # fmt: skip
    if TP_INPUT_GRAD <= op.tags and comm.kind is CommKind.ALL_GATHER:
        out.append(_op_with(op, name=f"{op.name}_regather", phase=Phase.BACKWARD_INPUT, tags=op.tags | TP_REGATHER))
    return out
