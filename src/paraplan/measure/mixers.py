"""Reference linear-time token mixers in plain PyTorch, at the shapes one rank holds: the Mamba-2 mixer and the
Gated DeltaNet mixer, with the same projections, channel counts and parameters as `paraplan.graph.mamba` and
`paraplan.graph.gdn`, so the hybrid benchmark can time a hybrid model's M and linear-attention layers.

The scans are the chunked algorithms written with dense torch ops (no Triton kernels): the SSD "minimal discrete"
form of Dao & Gu 2024 ("Transformers are SSMs", section 7 / Listing 1: intra-chunk quadratic form, chunk states,
the inter-chunk recurrence, state-to-output), and the chunked gated delta rule of Yang, Kautz & Hatamizadeh 2024
("Gated Delta Networks", section 3.3; flash-linear-attention's `chunk_gated_delta_rule` reference: the WY form with
a triangular solve per chunk). On a GPU they are slower than mamba_ssm's and fla's fused kernels: a measurement of
these blocks is the reference layer's time, as for the other blocks in `paraplan.measure.layers`.

Context parallelism is Megatron's all-to-all variant, emulated as the other collectives are: the sequence shards
become head shards by a local reshape of the same element count (this rank's data stands in for the others').
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from paraplan.graph.gdn import DELTA_CHUNK
from paraplan.graph.mamba import SSD_CHUNK, groups_on_rank
from paraplan.specs.model import ModelSpec

INIT_STD = 0.02
NORM_EPS = 1e-5


# ----------------------------------------------------------------------------- shared pieces
def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Depthwise causal conv over the sequence, then SiLU (causal_conv1d): x [b, s, c], weight [c, k]."""
    channels, kernel = weight.shape
    out = F.conv1d(F.pad(x.transpose(1, 2), (kernel - 1, 0)), weight.unsqueeze(1), bias, groups=channels)
    return F.silu(out).transpose(1, 2)


def gated_rms_norm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, group: int) -> torch.Tensor:
    """RMSNormGated (mamba_ssm, norm_before_gate=False as Megatron's MambaMixer, and fla's FusedRMSNormGated):
    rms_norm(y · SiLU(z)) over groups of `group` channels, times the weight (broadcast over the last dim: Mamba's
    one weight per inner channel, Gated DeltaNet's one per value head dim). y, z [..., c]."""
    gated = y * F.silu(z)
    shape = gated.shape
    normed = F.rms_norm(gated.reshape(*shape[:-1], -1, group), (group,), None, NORM_EPS)
    return normed.reshape(shape) * weight


def to_head_shards(t: torch.Tensor, heads: int, cp: int) -> torch.Tensor:
    """CP all-to-all, sequence shards -> head shards: t [b, s/cp, H, d] -> [b, s, heads, d] (shape only)."""
    return t[:, :, :heads].repeat(1, cp, 1, 1) if cp > 1 else t


def to_sequence_shards(t: torch.Tensor, tokens: int, cp: int) -> torch.Tensor:
    """CP all-to-all back: t [b, s, heads, d] -> [b, s/cp, heads·cp, d] (shape only)."""
    return t[:, :tokens].repeat(1, 1, cp, 1) if cp > 1 else t


def _pad_to(t: torch.Tensor, multiple: int, dim: int = 1) -> torch.Tensor:
    extra = -t.shape[dim] % multiple
    if not extra:
        return t
    pad = [0, 0] * (t.dim() - 1 - dim) + [0, extra]
    return F.pad(t, pad)


def segment_sums(a: torch.Tensor) -> torch.Tensor:
    """[..., T] -> [..., T, T]: entry (i, j) = a[j+1] + ... + a[i] for j <= i, -inf above the diagonal (the log of
    the decay from position j to i; Dao & Gu 2024, Listing 1 `segsum`)."""
    steps = a.shape[-1]
    cumulative = torch.cumsum(a, dim=-1)
    sums = cumulative[..., :, None] - cumulative[..., None, :]
    keep = torch.ones(steps, steps, dtype=torch.bool, device=a.device).tril()
    return sums.masked_fill(~keep, float("-inf"))


# ----------------------------------------------------------------------------- Mamba-2
def ssd_chunked(
    x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, chunk: int = SSD_CHUNK
) -> torch.Tensor:
    """The SSD scan in chunks (Dao & Gu 2024, Listing 1). x [b, s, H, P] (already times dt), a [b, s, H] (A·dt, the
    log decay), b and c [b, s, H, N] -> y [b, s, H, P] with h_t = exp(a_t)·h_{t-1} + b_t x_t^T, y_t = h_t c_t."""
    batch, seq, heads, p_dim = x.shape
    n_state = b.shape[-1]
    x, a, b, c = (_pad_to(t, chunk) for t in (x, a, b, c))
    chunks = x.shape[1] // chunk
    x = x.reshape(batch, chunks, chunk, heads, p_dim)
    b = b.reshape(batch, chunks, chunk, heads, n_state)
    c = c.reshape(batch, chunks, chunk, heads, n_state)
    a = a.reshape(batch, chunks, chunk, heads).permute(0, 3, 1, 2)  # [b, H, chunks, chunk]
    a_cumsum = torch.cumsum(a, dim=-1)
    # 1. within each chunk: the quadratic (attention-like) form
    decay = torch.exp(segment_sums(a))  # [b, H, chunks, l, s]
    scores = torch.einsum("bclhn,bcshn->bhcls", c, b) * decay
    y_diag = torch.einsum("bhcls,bcshp->bclhp", scores, x)
    # 2. each chunk's final state
    to_end = torch.exp(a_cumsum[..., -1:] - a_cumsum)  # [b, H, chunks, chunk]
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", b, to_end, x)
    # 3. the recurrence over chunks
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    chunk_decay = torch.exp(segment_sums(F.pad(a_cumsum[..., -1], (1, 0))))  # [b, H, chunks+1, chunks+1]
    states = torch.einsum("bhzc,bchpn->bzhpn", chunk_decay, states)[:, :-1]
    # 4. the state entering each chunk, read out at each position
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", c, states, torch.exp(a_cumsum))
    return (y_diag + y_off).reshape(batch, chunks * chunk, heads, p_dim)[:, :seq]


class SsdScan(nn.Module):
    """`ssd_chunked` as a module: its work is counted apart from the projections' (torch's FLOP counter by module)."""

    def forward(self, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return ssd_chunked(x, a, b, c)


class Mamba2Mixer(nn.Module):
    """megatron-core's MambaMixer on one rank: in_proj -> [z, x, B, C, dt]; causal conv1d + SiLU over [x, B, C];
    dt = softplus(dt + dt_bias), A = -exp(A_log); the SSD scan; y + D·x; gated RMSNorm with z; out_proj.
    Input and output [b, tokens, h] (inside the TP region: the whole CP shard of the sequence)."""

    def __init__(self, model: ModelSpec, tp: int, cp: int) -> None:
        super().__init__()
        h, self.p_dim, self.n_state = model.hidden_size, model.mamba_head_dim, model.mamba_state_dim
        self.tp, self.cp = tp, cp
        self.heads_tp = model.mamba_heads // tp
        self.groups_tp = model.mamba_num_groups // tp
        self.inner_tp = self.heads_tp * self.p_dim
        self.group_size = model.mamba_inner // model.mamba_num_groups  # the gated norm's groups
        xbc_tp = self.inner_tp + 2 * self.groups_tp * self.n_state
        self.in_proj = nn.Linear(h, self.inner_tp + xbc_tp + self.heads_tp, bias=False)
        self.conv_weight = nn.Parameter(torch.randn(xbc_tp, model.mamba_conv_kernel) * INIT_STD)
        self.conv_bias = nn.Parameter(torch.zeros(xbc_tp))
        self.a_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, self.heads_tp)))
        self.d_skip = nn.Parameter(torch.ones(self.heads_tp))
        self.dt_bias = nn.Parameter(torch.full((self.heads_tp,), -2.0))
        self.norm_weight = nn.Parameter(torch.ones(self.inner_tp))
        self.out_proj = nn.Linear(self.inner_tp, h, bias=False)
        nn.init.normal_(self.in_proj.weight, std=INIT_STD)
        nn.init.normal_(self.out_proj.weight, std=INIT_STD)
        # after the CP all-to-all: 1/cp of this rank's heads, its groups (repeated when fewer than cp)
        self.heads = self.heads_tp // cp
        self.groups = groups_on_rank(model, tp, cp)
        self.scan = SsdScan()

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = u.shape
        p_dim, n_state, cp = self.p_dim, self.n_state, self.cp
        gn = self.groups_tp * n_state
        z, x, b, c, dt = self.in_proj(u).split([self.inner_tp, self.inner_tp, gn, gn, self.heads_tp], dim=-1)
        # CP: sequence shards -> head shards for x, B, C, dt (z stays: the gated norm runs on the sequence shard)
        x = to_head_shards(x.view(batch, tokens, self.heads_tp, p_dim), self.heads, cp)
        b = to_head_shards(b.view(batch, tokens, self.groups_tp, n_state), self.groups, cp)
        c = to_head_shards(c.view(batch, tokens, self.groups_tp, n_state), self.groups, cp)
        dt = to_head_shards(dt.unsqueeze(-1), self.heads, cp).squeeze(-1)
        seq = x.shape[1]
        xbc = torch.cat([x.reshape(batch, seq, -1), b.reshape(batch, seq, -1), c.reshape(batch, seq, -1)], dim=-1)
        channels = xbc.shape[-1]  # the conv weights of the channels this rank holds after the all-to-all
        xbc = causal_conv1d(xbc, self.conv_weight[:channels], self.conv_bias[:channels])
        inner, gn = self.heads * p_dim, self.groups * n_state
        x, b, c = xbc.split([inner, gn, gn], dim=-1)
        x = x.reshape(batch, seq, self.heads, p_dim)
        per_group = self.heads // self.groups
        b = b.reshape(batch, seq, self.groups, n_state).repeat_interleave(per_group, dim=2)
        c = c.reshape(batch, seq, self.groups, n_state).repeat_interleave(per_group, dim=2)
        dt = F.softplus(dt + self.dt_bias[: self.heads])
        a = -torch.exp(self.a_log[: self.heads])
        y = self.scan(x * dt.unsqueeze(-1), a * dt, b, c)
        y = y + x * self.d_skip[: self.heads, None]
        y = to_sequence_shards(y, tokens, cp).reshape(batch, tokens, self.inner_tp)
        return self.out_proj(gated_rms_norm(y, z, self.norm_weight, self.group_size))


# ----------------------------------------------------------------------------- Gated DeltaNet
def delta_rule_recurrent(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor
) -> torch.Tensor:
    """The gated delta rule one step at a time (the definition the chunked form must equal): per head a state S
    [dk, dv]; S = exp(g_t)·S; S += k_t (beta_t (v_t - S^T k_t))^T; o_t = S^T q_t. q, k [b, s, H, dk] (q scaled),
    v [b, s, H, dv], g and beta [b, s, H]."""
    batch, seq, heads, dk = k.shape
    state = k.new_zeros(batch, heads, dk, v.shape[-1])
    out = []
    for t in range(seq):
        state = state * torch.exp(g[:, t])[..., None, None]
        correction = v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], state)
        state = state + torch.einsum("bhk,bhv->bhkv", k[:, t], beta[:, t, :, None] * correction)
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t], state))
    return torch.stack(out, dim=1)


def delta_rule_chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, chunk: int = DELTA_CHUNK
) -> torch.Tensor:
    """The chunked gated delta rule (flash-linear-attention's `chunk_gated_delta_rule` reference): per chunk the WY
    representation T = (I + strict_lower(diag(beta) K K^T ⊙ decay))^-1 by a triangular solve, then one pass over the
    chunks carrying the state. Same arguments and result as `delta_rule_recurrent`."""
    batch, seq, heads, dk = k.shape
    dv = v.shape[-1]
    q, k, v, g, beta = (_pad_to(t, chunk) for t in (q, k, v, g, beta))
    chunks = q.shape[1] // chunk

    def blocks(t: torch.Tensor) -> torch.Tensor:  # [b, s, H, ...] -> [b, H, chunks, chunk, ...]
        t = t.reshape(batch, chunks, chunk, heads, *t.shape[3:])
        return t.permute(0, 3, 1, 2, *range(4, t.dim()))

    q, k, v, g, beta = blocks(q), blocks(k), blocks(v), blocks(g), blocks(beta)
    g = torch.cumsum(g, dim=-1)
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = torch.exp((g[..., :, None] - g[..., None, :]).masked_fill(~lower, float("-inf")))
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    strict = (k_beta @ k.transpose(-1, -2) * decay).masked_fill(~lower.tril(-1), 0.0)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    wy = torch.linalg.solve_triangular(eye + strict, eye.expand_as(strict), upper=False, unitriangular=True)
    u = wy @ v_beta  # the pseudo-values
    w = wy @ (k_beta * torch.exp(g)[..., None])  # the decayed keys the state is read with
    state = q.new_zeros(batch, heads, dk, dv)
    out = []
    for i in range(chunks):
        q_i, k_i, g_i = q[:, :, i], k[:, :, i], g[:, :, i]
        v_new = u[:, :, i] - w[:, :, i] @ state
        scores = (q_i @ k_i.transpose(-1, -2) * decay[:, :, i]).masked_fill(~lower, 0.0)
        out.append((q_i * torch.exp(g_i)[..., None]) @ state + scores @ v_new)
        to_end = torch.exp(g_i[..., -1:] - g_i)[..., None]
        state = state * torch.exp(g_i[..., -1])[..., None, None] + (k_i * to_end).transpose(-1, -2) @ v_new
    o = torch.stack(out, dim=2)  # [b, H, chunks, chunk, dv]
    return o.permute(0, 2, 3, 1, 4).reshape(batch, chunks * chunk, heads, dv)[:, :seq]


class DeltaRule(nn.Module):
    """`delta_rule_chunked` as a module (its work counted apart, as `SsdScan`'s)."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor
    ) -> torch.Tensor:
        return delta_rule_chunked(q, k, v, g, beta)


class GatedDeltaNetMixer(nn.Module):
    """megatron-core's GatedDeltaNet on one rank: in_proj -> [q, k, v, z, beta, alpha]; causal conv1d + SiLU over
    [q, k, v]; L2-normed q and k repeated to the value heads; g = -exp(A_log)·softplus(alpha + dt_bias), beta =
    sigmoid(beta); the chunked gated delta rule; gated RMSNorm with z per value head; out_proj."""

    def __init__(self, model: ModelSpec, tp: int, cp: int) -> None:
        super().__init__()
        h = model.hidden_size
        self.dk, self.dv, self.cp = model.linear_key_head_dim, model.linear_value_head_dim, cp
        self.k_heads_tp = model.linear_num_key_heads // tp
        self.v_heads_tp = model.linear_num_value_heads // tp
        qk_tp, v_tp = self.k_heads_tp * self.dk, self.v_heads_tp * self.dv
        self.widths = [qk_tp, qk_tp, v_tp, v_tp, self.v_heads_tp, self.v_heads_tp]
        self.in_proj = nn.Linear(h, sum(self.widths), bias=False)
        self.conv_weight = nn.Parameter(torch.randn(2 * qk_tp + v_tp, model.linear_conv_kernel_dim) * INIT_STD)
        self.a_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, self.v_heads_tp)))
        self.dt_bias = nn.Parameter(torch.zeros(self.v_heads_tp))
        self.norm_weight = nn.Parameter(torch.ones(self.dv))
        self.out_proj = nn.Linear(v_tp, h, bias=False)
        nn.init.normal_(self.in_proj.weight, std=INIT_STD)
        nn.init.normal_(self.out_proj.weight, std=INIT_STD)
        self.k_heads, self.v_heads = self.k_heads_tp // cp, self.v_heads_tp // cp
        self.rule = DeltaRule()

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = u.shape
        dk, dv, cp = self.dk, self.dv, self.cp
        q, k, v, z, beta, alpha = self.in_proj(u).split(self.widths, dim=-1)
        q = to_head_shards(q.view(batch, tokens, self.k_heads_tp, dk), self.k_heads, cp)
        k = to_head_shards(k.view(batch, tokens, self.k_heads_tp, dk), self.k_heads, cp)
        v = to_head_shards(v.view(batch, tokens, self.v_heads_tp, dv), self.v_heads, cp)
        beta = to_head_shards(beta.unsqueeze(-1), self.v_heads, cp).squeeze(-1)
        alpha = to_head_shards(alpha.unsqueeze(-1), self.v_heads, cp).squeeze(-1)
        seq = q.shape[1]
        qkv = torch.cat([q.reshape(batch, seq, -1), k.reshape(batch, seq, -1), v.reshape(batch, seq, -1)], dim=-1)
        qkv = causal_conv1d(qkv, self.conv_weight[: qkv.shape[-1]], None)
        q, k, v = qkv.split([self.k_heads * dk, self.k_heads * dk, self.v_heads * dv], dim=-1)
        repeat = self.v_heads // self.k_heads
        q = F.normalize(q.reshape(batch, seq, self.k_heads, dk), dim=-1).repeat_interleave(repeat, dim=2)
        k = F.normalize(k.reshape(batch, seq, self.k_heads, dk), dim=-1).repeat_interleave(repeat, dim=2)
        g = -torch.exp(self.a_log[: self.v_heads]) * F.softplus(alpha + self.dt_bias[: self.v_heads])
        o = self.rule(q * dk**-0.5, k, v.reshape(batch, seq, self.v_heads, dv), g, torch.sigmoid(beta))
        o = to_sequence_shards(o, tokens, cp)  # [b, tokens, v_heads_tp, dv]
        z = z.view(batch, tokens, self.v_heads_tp, dv)
        return self.out_proj(gated_rms_norm(o, z, self.norm_weight, dv).reshape(batch, tokens, -1))


__all__ = [
    "DeltaRule",
    "GatedDeltaNetMixer",
    "SsdScan",
    "Mamba2Mixer",
    "delta_rule_chunked",
    "delta_rule_recurrent",
    "ssd_chunked",
]
