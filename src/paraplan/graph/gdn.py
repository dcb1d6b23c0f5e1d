"""Forward operators of one Gated DeltaNet mixer (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks: Improving
Mamba2 with Delta Rule"), as Megatron-core runs it in Qwen3-Next's linear-attention layers.

megatron-core 0.19.2 `ssm/gated_delta_net/gdn.py`: pre-norm -> in_proj (column-parallel, h -> [q, k, v, z, beta,
alpha] = 2·Hk·dk + 2·Hv·dv + 2·Hv) -> causal depthwise conv1d (width 4) and SiLU over [q, k, v] -> L2-norm of q and k,
the decay g and the write strength beta -> the chunked gated delta rule (flash-linear-attention's
`chunk_gated_delta_rule`, chunks of 64) -> gated RMSNorm, norm(o)·SiLU(z) -> out_proj (row-parallel, Hv·dv -> h) ->
residual. TP splits key and value heads; CP is the all-to-all variant (sequence shards to head shards before the
conv, back before the norm), so key and value heads must divide by tp·cp (TransformerConfig's asserts).
"""

from __future__ import annotations

from paraplan.graph.layers import (
    Shard,
    _comm,
    _elementwise,
    _gemm,
    _norm,
    _tp_enter,
    gated_mixer_exit,
)
from paraplan.graph.ops import CommAxis, CommKind, Op, OpKind, Phase, ScanShape
from paraplan.specs.model import ModelSpec

DELTA_CHUNK = 64  # flash-linear-attention's chunk size for chunk_gated_delta_rule
# Forward FLOPs per token per value head per (key x value) state element, as Megatron-Bridge counts them (0.6.2,
# training/utils/flop_utils.py `gdn_layer_flops`: 2 · num_v_heads · v_head_dim² · 4, with dk = dv): reading and
# writing the state for the delta update, and reading it for the output.
DELTA_FLOPS_PER_STATE = 8
# chunk_gated_delta_rule forward: local cumsum of g, K·K^T per chunk, the triangular solve, W and U, the chunk states,
# the output (flash-linear-attention): six Triton kernels.
DELTA_FORWARD_KERNELS = 6
STATE_BYTES = 4  # the chunk states are fp32


def gdn_mixer_ops(model: ModelSpec, shard: Shard) -> list[Op]:
    """Norm, in_proj, conv1d, the gated delta rule, gated norm, out_proj, residual of one linear-attention layer."""
    h, tp, cp, act = model.hidden_size, shard.tp, shard.cp, shard.act_bytes
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    k_heads_tp, v_heads_tp = model.linear_num_key_heads // tp, model.linear_num_value_heads // tp
    qk_tp, v_tp = k_heads_tp * dk, v_heads_tp * dv
    proj_tp = 2 * qk_tp + 2 * v_tp + 2 * v_heads_tp
    tokens = shard.tokens
    ops = [_norm("gdn_norm", model, shard), *_tp_enter("tp_ag_gdn", shard, h)]
    ops.append(_gemm("gdn_in_proj", tokens, proj_tp, h, shard, saved_input=tokens * h / shard.sp_div))
    if cp > 1:  # [q, k, v, z, beta, alpha]: sequence-sharded -> head-sharded
        ops.append(_comm("cp_a2a_gdn_in", CommKind.ALL_TO_ALL, CommAxis.CP, cp, act * tokens * proj_tp))
    # after the all-to-all: the whole sequence, 1/cp of this TP rank's heads (the same element count)
    seq_tokens = shard.batch * shard.seq_full if cp > 1 else tokens
    v_heads = v_heads_tp // cp
    qk, v = qk_tp // cp, v_tp // cp
    conv = 2 * qk + v
    kernel = model.linear_conv_kernel_dim
    ops.append(
        _elementwise(shard, "gdn_conv1d", 2 * act * seq_tokens * conv, saved=act * seq_tokens * conv,
                     flops=2 * kernel * seq_tokens * conv)
    )  # fmt: skip
    # L2-norm of q and k, g = -exp(A)·softplus(alpha + dt_bias), beta = sigmoid(beta) (fp32 g and beta)
    ops.append(
        _elementwise(shard, "gdn_qk_norm_gates", 2 * act * seq_tokens * 2 * qk + 3 * 4 * seq_tokens * v_heads,
                     saved=act * seq_tokens * 2 * qk, flops=4 * seq_tokens * 2 * qk)
    )  # fmt: skip
    ops.append(_delta_rule(model, shard, v_heads, qk, v, seq_tokens))
    if cp > 1:
        ops.append(_comm("cp_a2a_gdn_out", CommKind.ALL_TO_ALL, CommAxis.CP, cp, act * tokens * v_tp))
    ops += gated_mixer_exit("gdn", model, shard, v_tp, saved=act * tokens * 2 * v_tp)
    return ops


def _delta_rule(model: ModelSpec, shard: Shard, v_heads: int, qk: int, v: int, seq_tokens: int) -> Op:
    """The chunked gated delta rule over the whole sequence for this rank's value heads (q and k repeated to them).

    Reads q, k, v, g, beta, writes o; writes and reads back the per-chunk states (fp32, dk x dv per head and chunk).
    Saves what flash-linear-attention's autograd function keeps: q, k, v, g, beta and the chunk-local (I + A)^-1
    (chunk x chunk per head); the states are recomputed in backward.
    """
    act = shard.act_bytes
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    seq = seq_tokens // shard.batch
    chunks = -(-seq // DELTA_CHUNK)
    io = act * seq_tokens * (2 * qk + 2 * v) + 2 * 4 * seq_tokens * v_heads
    states = STATE_BYTES * shard.batch * chunks * v_heads * dk * dv
    saved = act * seq_tokens * (2 * qk + v + v_heads * DELTA_CHUNK) + 2 * 4 * seq_tokens * v_heads
    return Op(
        name="gated_delta_rule",
        kind=OpKind.SCAN,
        phase=Phase.FORWARD,
        flops=float(DELTA_FLOPS_PER_STATE * seq_tokens * v_heads * dk * dv),
        bytes_moved=float(io + 2 * states),
        scan=ScanShape(batch=shard.batch, seq=seq, heads=v_heads, head_dim=dv, state_dim=dk, chunk=DELTA_CHUNK),
        saved_bytes=float(saved),
        precision=shard.act_precision,
        host_ops=DELTA_FORWARD_KERNELS,
    )


def gdn_params(model: ModelSpec) -> int:
    """Parameters of one Gated DeltaNet mixer outside its GEMMs: conv1d weights, A_log, dt_bias, the gated norm's
    weight (per value head dim) and the layer's pre-norm."""
    conv = 2 * model.linear_num_key_heads * model.linear_key_head_dim
    conv += model.linear_num_value_heads * model.linear_value_head_dim
    return conv * model.linear_conv_kernel_dim + 2 * model.linear_num_value_heads + model.linear_value_head_dim


__all__ = ["DELTA_CHUNK", "gdn_mixer_ops", "gdn_params"]
