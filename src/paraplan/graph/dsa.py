"""DeepSeek sparse attention (DeepSeek-V3.2): a lightning indexer picks, for every query, the top-k keys that MLA then
attends to.

megatron-core 0.19.2 `transformer/experimental_attention_variant/dsa.py` (DSAIndexer, DSAttention): the indexer's
projections are duplicated over TP (`parallel_mode="duplicated"`): wq_b from the MLA query latent (q_lora_rank ->
heads_I x d_I), wk from the hidden state (h -> d_I, one key head) with a LayerNorm, weights_proj (h -> heads_I). Its
score of key s for query t is sum_h w_h · ReLU(q_h · k_s), over every earlier key; the top `dsa_indexer_topk` keys
per query go to the sparse MLA core. DeepSeek-V3.2-Exp inference/config_671B_v3.2.json: 64 indexer heads of 128,
top-2048.

Not modelled: the indexer's training loss (a KL term against the main attention's scores on the selected keys,
`dsa_indexer_loss`), and FP8 indexer kernels (the scores are costed in 16-bit).
"""

from __future__ import annotations

from paraplan.graph.layers import (
    AttentionCore,
    Shard,
    _comm,
    _elementwise,
    _gemm,
    causal_window_keys,
    local_attention_op,
)
from paraplan.graph.ops import CommAxis, CommKind, GemmShape, Op, OpKind, Phase
from paraplan.specs.model import ModelSpec

SCORE_BYTES = 4  # the indexer's per-pair scores are fp32 before the top-k


def sparse_keys(seq: int, topk: int) -> float:
    """Keys a query attends on average under causal top-k selection: t for the first topk queries, topk after."""
    return causal_window_keys(seq, topk)


def indexer_ops(model: ModelSpec, shard: Shard) -> list[Op]:
    """The lightning indexer of one layer on one GPU (its projections duplicated over TP, as Megatron runs them)."""
    h, act = model.hidden_size, shard.act_bytes
    heads, d = model.dsa_indexer_n_heads, model.dsa_indexer_head_dim
    tokens, b, s, skv = shard.tokens, shard.batch, shard.seq, shard.seq_full
    q_rank = model.q_lora_rank or h
    ops = [
        _gemm("indexer_wq", tokens, heads * d, q_rank, shard, saved=act * tokens * q_rank),
        _gemm("indexer_wk", tokens, d, h, shard, saved=act * tokens * h),
        _elementwise(shard, "indexer_k_norm", 2 * act * tokens * d, saved=act * tokens * d, flops=5 * tokens * d),
        _gemm("indexer_weights", tokens, heads, h, shard, saved=0.0),
    ]
    if shard.cp > 1:  # every query scores every earlier key: gather the (one-head) indexer keys over CP
        ops.append(_comm("cp_ag_indexer_keys", CommKind.ALL_GATHER, CommAxis.CP, shard.cp, act * b * skv * d))
    pairs = b * s * skv
    ops.append(
        Op(
            name="indexer_scores",
            kind=OpKind.GEMM,
            phase=Phase.FORWARD,
            flops=2.0 * pairs * heads * d,  # the whole square, as the model FLOPs count attention
            bytes_moved=float(act * (b * heads * s * d + b * skv * d) + SCORE_BYTES * pairs),
            gemm=GemmShape(m=s, n=skv, k=d, count=b * heads),
            saved_bytes=float(act * b * heads * s * d),  # q of the indexer, for its backward
            precision=shard.act_precision,
        )
    )
    # ReLU, the head-weighted sum and the top-k over each query's scores
    ops.append(_elementwise(shard, "indexer_topk", 2 * SCORE_BYTES * pairs, saved=4 * b * s * model.dsa_indexer_topk))
    return ops


def sparse_core_attention(model: ModelSpec, shard: Shard, heads: int, d_qk: int, d_v: int) -> list[Op]:
    """MLA's core over each query's selected keys, counted as attention is (`graph.layers.local_attention_op`): equal
    to dense MLA while the sequence is within top-k."""
    keys = sparse_keys(shard.seq_full, model.dsa_indexer_topk)
    return [local_attention_op(model, shard, heads, heads, d_qk, d_v, keys, tags=frozenset({"sparse"}))]


def indexer_params(model: ModelSpec) -> int:
    """The indexer's k-norm (weight and bias) outside its GEMMs."""
    return 2 * model.dsa_indexer_head_dim


def sparse_attention(model: ModelSpec, shard: Shard, heads: int, d_qk: int, d_v: int) -> list[Op]:
    """The indexer, then MLA's core over the keys it picks (a `graph.layers.AttentionCore`)."""
    return indexer_ops(model, shard) + sparse_core_attention(model, shard, heads, d_qk, d_v)


def attention_core(model: ModelSpec) -> AttentionCore | None:
    """The MLA core a layer of this model runs: the sparse one with an indexer, else None (dense)."""
    return sparse_attention if model.dsa_indexer_n_heads else None


__all__ = [
    "attention_core",
    "indexer_ops",
    "indexer_params",
    "sparse_attention",
    "sparse_core_attention",
    "sparse_keys",
]
