"""The operator: the unit every later stage (costing, memory, simulation) works on.

One transformer layer, embedding or head becomes a tuple of `Op`s whose shapes are already sharded by the
parallel plan (TP, SP, CP, EP). Backward of a GEMM is two GEMMs, input gradient (B) and weight gradient
(W), kept apart so zero-bubble schedules can move W (Qi et al. 2023, "Zero Bubble Pipeline Parallelism").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from paraplan.fastinit import fastinit


class OpKind(StrEnum):
    GEMM = "gemm"  # dense matmul [m, k] x [k, n]; `count` independent copies (grouped experts)
    ATTENTION = "attention"  # fused (flash) attention core
    ELEMENTWISE = "elementwise"  # memory-bound: norms, activations, rotary, residual, softmax, dropout
    COMM = "comm"  # a collective or point-to-point transfer inserted by the parallel plan
    SCAN = "scan"  # a fused chunked scan of a state-space or linear-attention mixer (Mamba-2 SSD, the delta rule)


class Phase(StrEnum):
    FORWARD = "forward"
    BACKWARD_INPUT = "backward_input"  # B: gradient w.r.t. the op's input
    BACKWARD_WEIGHT = "backward_weight"  # W: gradient w.r.t. the op's weights


class CommKind(StrEnum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


class CommAxis(StrEnum):
    """The parallel axis whose process group carries a communication op."""

    TP = "tp"
    CP = "cp"
    EP = "ep"
    ETP = "etp"
    PP = "pp"
    DP = "dp"


@fastinit  # built per block shape (issue 35)
@dataclass(frozen=True, slots=True)
class GemmShape:
    m: int
    n: int
    k: int
    count: int = 1  # independent GEMMs of this shape (experts on this rank)


@fastinit  # built per block shape (issue 35)
@dataclass(frozen=True, slots=True)
class AttentionShape:
    batch: int
    seq_q: int  # query tokens on this rank (after CP)
    seq_kv: int  # key/value tokens it attends over
    heads: int  # query heads on this rank (after TP)
    kv_heads: int
    head_dim_qk: int
    head_dim_v: int
    causal: bool = True


@fastinit  # built per block shape (issue 35)
@dataclass(frozen=True, slots=True)
class ScanShape:
    """A chunked scan over the whole sequence (Dao & Gu 2024, "Transformers are SSMs", section 6): per head a
    recurrent state of `state_dim` x `head_dim`, updated chunk by chunk."""

    batch: int
    seq: int  # tokens each sequence's scan runs over on this rank
    heads: int  # heads on this rank (after TP and CP)
    head_dim: int  # P: value dim per head
    state_dim: int  # N: state (key) dim per head
    chunk: int  # Q: chunk length of the chunked algorithm


@fastinit  # built per block shape (issue 35)
@dataclass(frozen=True, slots=True)
class CommShape:
    kind: CommKind
    axis: CommAxis
    group_size: int
    bytes: float  # payload per rank: the full buffer for all-reduce/all-gather output, per-rank for a2a
    routing: tuple[int, int] | None = None
    """(experts, top-k) of a token dispatch that sends a token once per destination rank and node (Megatron's
    flex dispatcher); `bytes` still counts one copy per chosen expert. None: a plain all-to-all."""


@fastinit  # built per block shape (issue 35)
@dataclass(frozen=True, slots=True)
class Op:
    """One operator of one micro-batch on one GPU, in one phase.

    `flops` and `bytes_moved` are per GPU. `saved_bytes` is what this op keeps alive for backward
    (only meaningful for FORWARD ops); `recompute_saved_bytes` is what it keeps under selective recompute.
    """

    name: str  # stable name: "qkv", "attn_core", "attn_out", "mlp_up", "mlp_down", "router", ...
    kind: OpKind
    phase: Phase
    flops: float = 0.0
    bytes_moved: float = 0.0
    gemm: GemmShape | None = None
    attention: AttentionShape | None = None
    comm: CommShape | None = None
    scan: ScanShape | None = None
    saved_bytes: float = 0.0
    precision: str = "bf16"  # the math precision of this op (GEMMs may run in fp8)
    tags: frozenset[str] = field(default_factory=frozenset)  # e.g. {"moe"}, {"mla"}, {"selective"}
    host_ops: int = 1  # kernels the host launches for this op (a loop over experts launches one per expert)
    backward_bytes: float | None = None  # an elementwise op's backward traffic when not the usual 1.5x forward
    expert: bool = False
    """A routed expert's op: its weights are expert parameters (sharded over EP, replicated over expert DP), set
    by the builder (`graph.layers.moe_ops`) so that no consumer guesses from the name."""
    eager_saved_bytes: float | None = None
    """What torch autograd keeps for this op run as eager PyTorch's separate kernels where that is not
    `saved_bytes` (the fused kernel's): the decomposed RMSNorm and SwiGLU keep their intermediates
    (`graph.layers._norm`, `_mlp_body`). None: the same. Read by the eager per-op SAC recompute only
    (`memory.activations.op_policy_recompute_bytes`)."""
