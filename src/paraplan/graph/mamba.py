"""Forward operators of one Mamba-2 mixer block (Dao & Gu 2024, "Transformers are SSMs"), as Megatron-core runs it.

megatron-core 0.19.2 `ssm/mamba_mixer.py` (MambaMixer) and `ssm/mamba_context_parallel.py`:
pre-norm -> in_proj (one column-parallel linear, h -> [z, x, B, C, dt] = 2·d_inner + 2·G·N + H) -> causal depthwise
conv1d (width 4) and SiLU over [x, B, C] -> the chunked SSD scan (chunk 128) -> gated RMSNorm, norm(y)·SiLU(z), per
group -> out_proj (row-parallel, d_inner -> h) -> residual.

Tensor parallelism splits heads and groups (H/tp, G/tp; `nheads % tp == 0`, `ngroups % tp == 0`). Context parallelism
is Megatron's all-to-all variant: in_proj runs on the rank's sequence shard, an all-to-all turns [z, x, B, C, dt] from
sequence-sharded to head-sharded (each CP rank then scans the whole sequence for H/(tp·cp) heads; groups with fewer
than cp per TP rank are repeated), and another turns y back before the norm.
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

SSD_CHUNK = 128  # MambaMixer `chunk_size=128` (megatron-core 0.19.2)
# Floating-point work per token per inner channel per state element of the SSD scan, as Megatron-Bridge counts it
# (0.6.2, training/utils/flop_utils.py `mamba_layer_flops`: "7 * batch_size * seq_len * d_in * state_dim  # scan").
SSD_FLOPS_PER_INNER_STATE = 7
# mamba_ssm's chunked scan: chunk cumsum, chunk states, state passing, C·B^T, chunk scan (five Triton kernels).
SSD_FORWARD_KERNELS = 5
SCAN_STATE_BYTES = 4  # the chunk states are fp32 (mamba_ssm `_chunk_state_fwd`, states in float32)


def groups_on_rank(model: ModelSpec, tp: int, cp: int) -> int:
    """B/C groups a rank scans: G/(tp·cp), or 1 repeated group when cp exceeds G/tp (MambaContextParallel)."""
    per_tp = model.mamba_num_groups // tp
    return max(1, per_tp // cp)


def mamba_mixer_ops(model: ModelSpec, shard: Shard) -> list[Op]:
    """Norm, in_proj, conv1d, SSD scan, gated norm, out_proj, residual of one M block on one GPU."""
    h, tp, cp = model.hidden_size, shard.tp, shard.cp
    act = shard.act_bytes
    heads_tp = model.mamba_heads // tp
    inner_tp = model.mamba_inner // tp
    n_state = model.mamba_state_dim
    groups_tp = model.mamba_num_groups // tp
    tokens = shard.tokens  # this rank's sequence shard (seq/cp) x micro-batch
    xbc_tp = inner_tp + 2 * groups_tp * n_state  # conv1d channels [x, B, C] on this TP rank
    proj_tp = inner_tp + xbc_tp + heads_tp  # in_proj output [z, x, B, C, dt]
    ops = [_norm("mamba_norm", model, shard), *_tp_enter("tp_ag_mamba", shard, h)]
    ops.append(_gemm("mamba_in_proj", tokens, proj_tp, h, shard, saved_input=tokens * h / shard.sp_div))
    # After the CP all-to-all a rank holds the whole sequence for 1/cp of its heads: the same element count.
    heads = heads_tp // cp
    inner = heads * model.mamba_head_dim
    groups = groups_on_rank(model, tp, cp)
    xbc = inner + 2 * groups * n_state
    if cp > 1:  # [z, x, B, C, dt] sequence-sharded -> head-sharded (B and C repeated when groups < cp)
        to_heads = act * tokens * (2 * inner_tp + 2 * groups * cp * n_state + heads_tp)
        ops.append(_comm("cp_a2a_mamba_in", CommKind.ALL_TO_ALL, CommAxis.CP, cp, to_heads))
    seq_tokens = shard.batch * shard.seq_full if cp > 1 else tokens
    kernel = model.mamba_conv_kernel
    # causal depthwise conv1d + SiLU (causal_conv1d): read [x, B, C] and the weights, write [x, B, C]; saves its input
    ops.append(
        _elementwise(
            shard, "mamba_conv1d", 2 * act * seq_tokens * xbc, saved=act * seq_tokens * xbc,
            flops=2 * kernel * seq_tokens * xbc,
        )
    )  # fmt: skip
    ops.append(_ssd_scan(model, shard, heads, inner, groups, seq_tokens))
    if cp > 1:  # y head-sharded -> sequence-sharded
        ops.append(_comm("cp_a2a_mamba_out", CommKind.ALL_TO_ALL, CommAxis.CP, cp, act * tokens * inner_tp))
    # RMSNormGated: norm(y) * silu(z) per group; reads y and z, writes the gated output; saves z (y is the scan's)
    ops += gated_mixer_exit("mamba", model, shard, inner_tp, saved=act * tokens * inner_tp)
    return ops


def _ssd_scan(model: ModelSpec, shard: Shard, heads: int, inner: int, groups: int, seq_tokens: int) -> Op:
    """The chunked SSD scan over the whole sequence for this rank's heads.

    Reads x, B, C, dt and writes y; writes and reads back the per-chunk states (fp32, H·P·N per chunk). Saves for
    backward what mamba_ssm's `ChunkScanCombinedFn` keeps: x, B, C, y (16-bit) and dt, dA_cumsum (fp32); the chunk
    states are recomputed in backward, so the recurrent state is a transient working set, not saved.
    """
    act = shard.act_bytes
    n_state, p_dim = model.mamba_state_dim, model.mamba_head_dim
    io = act * seq_tokens * (2 * inner + 2 * groups * n_state) + 4 * seq_tokens * heads
    chunks = -(-shard.seq_full // SSD_CHUNK) if shard.cp > 1 else -(-shard.seq // SSD_CHUNK)
    states = SCAN_STATE_BYTES * shard.batch * chunks * heads * p_dim * n_state
    saved = act * seq_tokens * (2 * inner + 2 * groups * n_state) + 2 * 4 * seq_tokens * heads
    return Op(
        name="ssd_scan",
        kind=OpKind.SCAN,
        phase=Phase.FORWARD,
        flops=float(SSD_FLOPS_PER_INNER_STATE * seq_tokens * inner * n_state),
        bytes_moved=float(io + 2 * states),
        scan=ScanShape(
            batch=shard.batch,
            seq=seq_tokens // shard.batch,
            heads=heads,
            head_dim=p_dim,
            state_dim=n_state,
            chunk=SSD_CHUNK,
        ),
        saved_bytes=float(saved),
        precision=shard.act_precision,
        host_ops=SSD_FORWARD_KERNELS,
    )


def mamba_params(model: ModelSpec) -> int:
    """Parameters of one Mamba-2 mixer outside its GEMMs: conv1d weight and bias, A_log, D, dt_bias, the gated norm's
    weight, and the block's pre-norm (MambaMixer's parameter list)."""
    xbc = model.mamba_inner + 2 * model.mamba_num_groups * model.mamba_state_dim
    return xbc * (model.mamba_conv_kernel + 1) + 3 * model.mamba_heads + model.mamba_inner + model.hidden_size


__all__ = ["SSD_CHUNK", "groups_on_rank", "mamba_mixer_ops", "mamba_params"]
