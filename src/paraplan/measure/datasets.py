"""From sample tables to regressor datasets: each file's shape columns -> the features the core supplies.

The mapping is the contract between the measured samples and `paraplan.cost.profile`: GEMMs become
(m, n, k), flash attention the (batch x heads per rank, seq, head_dim) of causal attention, memory-bound ops their
bytes of traffic (`elementwise_traffic_bytes`), optimizer stages their parameters per rank, collectives their
message bytes.

Shapes of the kernel samples (arXiv 2509.22832 README; Megatron GPT-NeoX layer, `mp` = tensor parallel):
  linear1 [b*l, dim] x [dim, 3dim/mp]; linear2 [b*l, dim/mp] x [dim/mp, dim]; linear3 [b*l, dim] x
  [dim, 4dim/mp]; linear4 [b*l, 4dim/mp] x [4dim/mp, dim]; linear_final [b*l, dim] x [dim, V/mp].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from paraplan.cost.profile import elementwise_traffic_bytes
from paraplan.measure.samples import SampleTable

# GPT-NeoX's tokenizer has 50257 tokens (GPT-2 BPE); Megatron pads the vocabulary to a multiple of
# make_vocab_size_divisible_by (128) x tensor-parallel size (megatron/training/tokenizer `_vocab_size_with_padding`).
# Checked against the A100 optimizer samples: 2 layers, hidden 256 -> 27,335,680 params = 2 x 50304 x 256 + layers.
SAMPLE_VOCAB = 50257
VOCAB_DIVISIBLE_BY = 128

BYTES_PER_ELEMENT = {"fp16": 2, "bf16": 2, "fp32": 4, "tf32": 4, "fp8": 1}

FEATURES = {
    "gemm": ("m", "n", "k"),
    "attention": ("batch_heads", "seq", "head_dim"),  # flash attention's grid runs over batch x heads
    "elementwise": ("bytes",),
    "optimizer": ("params",),
    "collective": ("bytes",),
}

# Work per row as a product of feature powers: GEMM FLOPs ~ m n k; causal attention FLOPs ~ (b h) s^2 d;
# the single feature (bytes, parameters) otherwise. Used as an extra tree input and by the outlier rule.
WORK_EXPONENTS = {
    "gemm": (1, 1, 1),
    "attention": (1, 2, 1),
    "elementwise": (1,),
    "optimizer": (1,),
    "collective": (1,),
}


def work(kind: str, features: np.ndarray) -> np.ndarray:
    return np.prod(features ** np.asarray(WORK_EXPONENTS[kind], dtype=float), axis=1)


# Fields skipped on purpose, with the reason reported by `paraplan fit`.
SKIPPED_OPS = {
    # batched over batch x heads; the GEMM regressors' features (m, n, k) have no batch count. The analytic model's
    # short-K penalty is fitted on them instead (`cost.compute._K_HALF`, tests/cost/test_gemm_samples.py).
    "baddbmm": "unfused attention's batched score GEMM; the GEMM regressors have no batch count",
    "bmm": "unfused attention's batched context GEMM; the GEMM regressors have no batch count",
    "fillmask": "unfused attention internals; paraplan costs attention as one fused kernel",
    "ScaledUpperTriangMaskedSoftmax": "unfused attention internals; paraplan costs attention as one fused kernel",
    "optimizer": "undocumented layout ('dur' without unit), times inconsistent with the stage optimizer files",
}


def padded_vocab(mp: np.ndarray, vocab: int = SAMPLE_VOCAB, divisible_by: int = VOCAB_DIVISIBLE_BY) -> np.ndarray:
    multiple = divisible_by * mp
    return np.ceil(vocab / multiple) * multiple


@dataclass(frozen=True, slots=True)
class FileMapping:
    """How one sample op becomes regressor rows."""

    base: str  # regressor base name: "gemm", "layernorm", "optimizer", "all_reduce", ...
    kind: str  # "gemm" | "attention" | "elementwise" | "optimizer" | "collective"
    directions: tuple[tuple[str, str], ...]  # (direction, time column)
    features: Callable[[SampleTable, str], np.ndarray]  # (table, direction) -> [rows, features]
    backward_at_least_forward: bool = False  # physics check: bwd is 2 GEMMs / 2.5x attention FLOPs


FWD_BWD = (("fwd", "F_dur(us)"), ("bwd", "B_dur(us)"))
STEP = (("step", "dur(us)"),)


def _mp(t: SampleTable) -> np.ndarray:
    return t.column("mp", default=1.0)


def _tokens(t: SampleTable) -> np.ndarray:
    return t.column("b") * t.column("l")


def _vocab_per_rank(t: SampleTable) -> np.ndarray:
    if t.has("vocab"):  # paraplan's own files: the (padded) vocabulary actually used
        return t.column("vocab") / _mp(t)
    return padded_vocab(_mp(t)) / _mp(t)


def _linear(n_of: Callable[[SampleTable], np.ndarray], k_of: Callable[[SampleTable], np.ndarray]):
    def features(t: SampleTable, _direction: str) -> np.ndarray:
        return np.column_stack([_tokens(t), n_of(t), k_of(t)])

    return features


def _gemm(t: SampleTable, _direction: str) -> np.ndarray:
    return np.column_stack([t.column("m"), t.column("n"), t.column("k")])


# The public kernel samples (arXiv 2509.22832) time flash attention over the full square of query-key pairs, with no
# causal mask. Counted that way, at head dim 128 and 2-5k tokens they run at 184-197 TFLOP/s on A100 (59-63% of
# peak, in line with FlashAttention-2's published non-causal A100 rates, Dao 2023) and 355-380 on GH200 (36-38%).
# Counted as causal, the A100 rows would run at 92-99 TFLOP/s, half of what FlashAttention-2 reaches with a causal
# mask. Files without a `causal` column are read as full square; `paraplan measure` times causal attention and
# writes causal = 1. A full-square pass over b*h sequences does the work of a causal pass over 2*b*h (the same
# query-key tile pairs, plus the causal diagonal tiles), so it enters the causal regressors with twice the
# batch x heads.
FULL_SQUARE_AS_CAUSAL_BATCH = 2.0


def _attention(t: SampleTable, _direction: str) -> np.ndarray:
    heads = t.column("h")
    batch = np.where(t.column("causal", default=0.0) > 0, 1.0, FULL_SQUARE_AS_CAUSAL_BATCH) * t.column("b")
    return np.column_stack([batch * heads / _mp(t), t.column("l"), t.column("dim") / heads])


def _elements(base: str, t: SampleTable) -> np.ndarray:
    tokens = _tokens(t)
    if base in ("layernorm", "rmsnorm", "residual", "embedding"):
        return tokens * t.column("dim")
    if base in ("gelu", "swiglu"):
        return tokens * 4 * t.column("dim") / _mp(t)  # the MLP's 4h/tp intermediate
    if base == "rotary":
        return tokens * t.column("dim") / _mp(t)  # q (or k) of the rank's heads
    if base == "softmax":
        return t.column("b") * t.column("h") / _mp(t) * t.column("l") ** 2
    if base == "cross_entropy":
        return tokens * _vocab_per_rank(t)
    raise ValueError(base)


def _elementwise(base: str):
    def features(t: SampleTable, direction: str) -> np.ndarray:
        bytes_per_element = BYTES_PER_ELEMENT[t.file.precision]
        return elementwise_traffic_bytes(base, direction == "fwd", _elements(base, t), bytes_per_element)[:, None]

    return features


def layer_params_per_rank(dim: np.ndarray, mp: np.ndarray) -> np.ndarray:
    """Megatron GPT layer (LayerNorm and linear biases): QKV d*3d/mp+3d/mp, proj d*d/mp+d, fc1 d*4d/mp+4d/mp,
    fc2 4d*d/mp+d, two LayerNorms 4d -> 12d^2/mp + 7d/mp + 6d."""
    return 12 * dim**2 / mp + 7 * dim / mp + 6 * dim


def _optimizer(stage: str):
    def features(t: SampleTable, _direction: str) -> np.ndarray:
        if t.has("params"):
            return t.column("params")[:, None]
        mp, dim = _mp(t), t.column("dim")
        params = t.column("encoders") * layer_params_per_rank(dim, mp)
        if stage == "first":  # vocab-parallel word embedding (rotary: no position embedding)
            params = params + padded_vocab(mp) / mp * dim
        elif stage == "last":  # final LayerNorm + untied LM head (GPT-NeoX)
            params = params + 2 * dim + padded_vocab(mp) / mp * dim
        return params[:, None]

    return features


def _collective(t: SampleTable, _direction: str) -> np.ndarray:
    return (t.column("shape") * BYTES_PER_ELEMENT[t.file.precision])[:, None]


OPERATOR_MAPPINGS: dict[str, FileMapping] = {
    "linear1": FileMapping(
        "gemm", "gemm", FWD_BWD, _linear(lambda t: 3 * t.column("dim") / _mp(t), lambda t: t.column("dim")), True
    ),
    "linear2": FileMapping(
        "gemm", "gemm", FWD_BWD, _linear(lambda t: t.column("dim"), lambda t: t.column("dim") / _mp(t)), True
    ),
    "linear3": FileMapping(
        "gemm", "gemm", FWD_BWD, _linear(lambda t: 4 * t.column("dim") / _mp(t), lambda t: t.column("dim")), True
    ),
    "linear4": FileMapping(
        "gemm", "gemm", FWD_BWD, _linear(lambda t: t.column("dim"), lambda t: 4 * t.column("dim") / _mp(t)), True
    ),
    "linear_final": FileMapping("gemm", "gemm", FWD_BWD, _linear(_vocab_per_rank, lambda t: t.column("dim")), True),
    "gemm": FileMapping("gemm", "gemm", FWD_BWD, _gemm, True),
    "flash_atten": FileMapping("attention", "attention", FWD_BWD, _attention, True),
    "layernorm": FileMapping("layernorm", "elementwise", FWD_BWD, _elementwise("layernorm")),
    "RMSlayernorm": FileMapping("rmsnorm", "elementwise", FWD_BWD, _elementwise("rmsnorm")),
    "gelu": FileMapping("gelu", "elementwise", FWD_BWD, _elementwise("gelu")),
    "swiglu": FileMapping("swiglu", "elementwise", FWD_BWD, _elementwise("swiglu")),
    "res_add": FileMapping("residual", "elementwise", FWD_BWD, _elementwise("residual")),
    "RoPE": FileMapping("rotary", "elementwise", FWD_BWD, _elementwise("rotary")),
    "softmax": FileMapping("softmax", "elementwise", FWD_BWD, _elementwise("softmax")),
    "embedding": FileMapping("embedding", "elementwise", FWD_BWD, _elementwise("embedding")),
    "cross_entropy": FileMapping("cross_entropy", "elementwise", FWD_BWD, _elementwise("cross_entropy")),
    "firstStage_optimizer": FileMapping("optimizer", "optimizer", STEP, _optimizer("first")),
    "middleStage_optimizer": FileMapping("optimizer", "optimizer", STEP, _optimizer("middle")),
    "lastStage_optimizer": FileMapping("optimizer", "optimizer", STEP, _optimizer("last")),
}

COLLECTIVE_OPS = {
    "allreduce": "all_reduce",
    "allreduce_large": "all_reduce",  # gradient-bucket sizes; same collective, larger messages
    "allgather": "all_gather",  # `shape` = elements each rank contributes (its input shard)
    "allgather_large": "all_gather",
    "reducescatter": "reduce_scatter",  # `shape` = elements each rank receives (its output shard)
    "alltoall": "all_to_all",
    "p2p": "send_recv",
}


def mapping_for(category: str, op: str) -> FileMapping | str:
    """The FileMapping of a sample op, or the reason it is skipped."""
    if category == "nccl":
        base = COLLECTIVE_OPS.get(op)
        if base is None:
            return f"unknown collective {op!r}"
        return FileMapping(base, "collective", (("comm", "dur(us)"),), _collective)
    if op.startswith("parallel_cross_entropy"):  # e.g. parallel_cross_entropy_128
        op = "cross_entropy"
    if op in OPERATOR_MAPPINGS:
        return OPERATOR_MAPPINGS[op]
    return SKIPPED_OPS.get(op, f"unknown operator {op!r}")


def shape_columns(table: SampleTable) -> np.ndarray:
    """The file's own shape columns (everything that is not a time), for per-file outlier detection."""
    keep = [i for i, c in enumerate(table.columns) if "dur" not in c]
    return table.values[:, keep]
