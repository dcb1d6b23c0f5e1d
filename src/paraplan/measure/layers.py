"""Reference transformer layers in plain PyTorch, at the shapes one rank holds under the target's sharding.

Faithful to the model presets and to `paraplan.graph.layers` (same GEMM shapes, same token counts):
Llama-style GQA attention with rotary embeddings (rotate-half form, Megatron's `apply_rotary_pos_emb`), chunked and
sliding-window local attention, the attention output gate, the Mamba-2 and Gated DeltaNet mixers (`measure.mixers`)
and the blocks of hybrid models,
SwiGLU/GeGLU/GELU/squared-ReLU MLPs, RMSNorm or LayerNorm, MoE with a top-k router, grouped expert GEMMs
(balanced routing, as the measured MoE benchmarks force) and shared experts, DeepSeek's multi-head latent
attention (MLA), the vocab-parallel embedding, the LM head with an fp32 cross-entropy, and MTP modules.

One process plays one rank: the collectives the parallel plan inserts (TP all-gather/reduce-scatter, the
CP ring exchange, the EP all-to-all) are replaced by local tensor reshapes that produce the same shapes;
their time is added back from the communication model. Recompute modes: "full" checkpoints the layer,
"selective" the attention core (torch.utils.checkpoint, non-reentrant).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from paraplan.graph.layers import Shard, padded_vocab
from paraplan.measure.device import torch_dtype
from paraplan.measure.mixers import GatedDeltaNetMixer, Mamba2Mixer
from paraplan.specs.model import ModelSpec

INIT_STD = 0.02  # GPT-2 / Megatron `init_method_std`
NORM_EPS = 1e-5
DROPOUT_P = 0.1  # GPT-3 style hidden and attention dropout
ROPE_BASE = 10000.0


@dataclass(frozen=True, slots=True)
class RankShapes:
    """The dims one rank sees (after TP, SP, CP, EP), derived as `paraplan.graph.layers` derives them."""

    batch: int
    seq: int  # query tokens per sequence on this rank (seq / cp)
    seq_full: int  # keys/values attended over
    cp: int
    cp_rank: int  # which load-balanced chunk pair this rank holds (0 .. cp-1)
    tp: int
    sp_div: int  # sequence split of the tensors outside the TP regions
    hidden: int
    heads: int  # query heads on this rank
    kv_heads: int
    head_dim: int
    ffn: int  # dense FFN width on this rank
    vocab: int  # vocabulary rows on this rank (padded, / tp)
    experts: int  # local experts
    experts_total: int
    topk: int
    expert_ffn: int  # per-expert FFN width on this rank (/ etp)
    etp: int
    shared_ffn: int  # shared-expert width on this rank (/ tp)
    flash: bool

    @classmethod
    def of(cls, model: ModelSpec, shard: Shard, cp_rank: int = 0) -> RankShapes:
        tp = shard.tp
        return cls(
            batch=shard.batch,
            seq=shard.seq,
            seq_full=shard.seq_full,
            cp=shard.cp,
            cp_rank=cp_rank,
            tp=tp,
            sp_div=shard.sp_div,
            hidden=model.hidden_size,
            heads=model.num_attention_heads // tp,
            kv_heads=max(1, model.kv_groups // tp),
            head_dim=model.head_dim,
            ffn=model.ffn_hidden_size // tp,
            vocab=padded_vocab(model, tp) // tp,
            experts=max(1, model.num_experts // shard.ep) if model.is_moe else 0,
            experts_total=model.num_experts,
            topk=model.moe_router_topk,
            expert_ffn=model.expert_ffn // shard.etp,
            etp=shard.etp,
            shared_ffn=model.moe_shared_expert_intermediate_size // tp,
            flash=shard.flash,
        )

    @property
    def seq_local(self) -> int:
        """Sequence length of a layer's input and output on this rank (split by SP)."""
        return self.seq // self.sp_div

    @property
    def own_tokens(self) -> int:
        """Tokens this rank routes in an MoE layer (`own_tokens` in graph.layers.moe_ops)."""
        return self.batch * self.seq_local

    @property
    def routed_pairs(self) -> int:
        return self.own_tokens * self.topk

    @property
    def tokens_per_expert(self) -> int:
        return max(1, round(self.routed_pairs * self.etp / max(1, self.experts)))


# ----------------------------------------------------------------------------- shard emulation
def tp_enter(x: torch.Tensor, s: RankShapes) -> torch.Tensor:
    """SP all-gather of the sequence shards (shape only: the data is this rank's shard, repeated)."""
    return x.repeat(1, s.sp_div, 1) if s.sp_div > 1 else x


def tp_exit(x: torch.Tensor, s: RankShapes) -> torch.Tensor:
    """SP reduce-scatter back to this rank's sequence shard (shape only)."""
    return x[:, : s.seq_local] if s.sp_div > 1 else x


def cp_gather(kv: torch.Tensor, s: RankShapes) -> torch.Tensor:
    """CP ring exchange of K/V [b, s, heads, d]: this rank's chunk stands in for the others'."""
    return kv.repeat(1, s.cp, 1, 1) if s.cp > 1 else kv


def cp_query_positions(s: RankShapes) -> torch.Tensor:
    """Positions of this rank's queries in the full sequence: chunks r and 2cp-1-r (load-balanced causal)."""
    chunk = s.seq_full // (2 * s.cp)
    first = torch.arange(s.cp_rank * chunk, (s.cp_rank + 1) * chunk)
    last_start = (2 * s.cp - 1 - s.cp_rank) * chunk
    return torch.cat([first, torch.arange(last_start, last_start + chunk)])


def causal_mask(s: RankShapes, device: torch.device) -> torch.Tensor | None:
    """None when queries and keys are the same sequence (is_causal); else a boolean [s_q, s_kv] mask."""
    if s.cp == 1:
        return None
    q_pos = cp_query_positions(s).to(device)
    return torch.arange(s.seq_full, device=device)[None, :] <= q_pos[:, None]


def rotary_tables(positions: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [s, 1, dim] of the rotary angles at `positions` (fp32; cast with the module)."""
    inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    angles = torch.outer(positions.to(torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)[:, None, :]  # broadcast over batch and heads
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding (Megatron's `apply_rotary_pos_emb`) on x [b, s, heads, d]."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _register_rotary(module: nn.Module, s: RankShapes, dim: int) -> None:
    """The rotary tables of this rank's query positions as buffers: computed once, cast with the module."""
    positions = cp_query_positions(s) if s.cp > 1 else torch.arange(s.seq)
    cos, sin = rotary_tables(positions, dim)
    module.register_buffer("cos", cos, persistent=False)
    module.register_buffer("sin", sin, persistent=False)


def _linear(n_in: int, n_out: int, bias: bool) -> nn.Linear:
    layer = nn.Linear(n_in, n_out, bias=bias)
    nn.init.normal_(layer.weight, std=INIT_STD)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


class Norm(nn.Module):
    def __init__(self, dim: int, kind: str) -> None:
        super().__init__()
        self.dim, self.kind = dim, kind
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if kind == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "layernorm":
            return F.layer_norm(x, (self.dim,), self.weight, self.bias, NORM_EPS)
        return F.rms_norm(x, (self.dim,), self.weight, NORM_EPS)


def _activation(name: str, up: torch.Tensor) -> torch.Tensor:
    if name == "swiglu":
        gate, value = up.chunk(2, dim=-1)
        return F.silu(gate) * value
    if name == "geglu":
        gate, value = up.chunk(2, dim=-1)
        return F.gelu(gate) * value
    if name == "gelu":
        return F.gelu(up)
    if name == "squared_relu":
        return F.relu(up).square()
    return F.relu(up)


# ----------------------------------------------------------------------------- attention
def chunked(t: torch.Tensor, chunk: int) -> torch.Tensor:
    """[b, h, s, d] -> [b·chunks, h, chunk, d], the last chunk zero-padded (graph.layers counts it whole)."""
    b, heads, seq, d = t.shape
    t = F.pad(t, (0, 0, 0, -seq % chunk))
    return t.view(b, heads, -1, chunk, d).transpose(1, 2).reshape(-1, heads, chunk, d)


def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """Each query attends to itself and the `window` keys before it, as a flash kernel does the work: queries in
    blocks of window + 1, each block against its own and the previous block of keys (2·(window + 1) keys, about
    the 2·keys square graph.layers counts). q [b, hq, s, d], k/v [b, hkv, s, d]."""
    b, heads, seq, d = q.shape
    if k.shape[1] != heads:
        k, v = (t.repeat_interleave(heads // k.shape[1], dim=1) for t in (k, v))
    block = window + 1
    q, k, v = (F.pad(t, (0, 0, 0, -seq % block)) for t in (q, k, v))
    blocks = q.shape[2] // block
    q = q.view(b, heads, blocks, block, d)
    k, v = (t.view(b, heads, blocks, block, t.shape[-1]) for t in (k, v))
    k, v = (torch.cat([F.pad(t, (0, 0, 0, 0, 1, 0))[:, :, :-1], t], dim=3) for t in (k, v))  # previous block too
    i = torch.arange(block, device=q.device)[:, None]
    j = torch.arange(2 * block, device=q.device)[None, :]
    distance = block + i - j  # query position minus key position
    mask = ((distance >= 0) & (distance <= window)).expand(blocks, block, 2 * block).clone()
    mask[0, :, :block] = False  # before the sequence start
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.reshape(b, heads, blocks * block, -1)[:, :, :seq]


def core_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    s: RankShapes,
    dropout: bool,
    training: bool,
    chunk: int = 0,
    window: int = 0,
) -> torch.Tensor:
    """q [b, hq, sq, d], k/v [b, hkv, skv, d]; flash (SDPA) or Megatron's unfused path. `chunk`: causal attention
    within chunks of that many tokens (Llama 4); `window`: a sliding window of that many earlier keys (a banded
    mask over the whole square on the unfused path, as graph.layers counts it). Both with cp = 1 only."""
    if 0 < chunk < q.shape[2]:
        seq = q.shape[2]
        out = core_attention(chunked(q, chunk), chunked(k, chunk), chunked(v, chunk), s, dropout, training)
        b, heads = q.shape[0], q.shape[1]
        return (
            out.reshape(b, -1, heads, chunk, out.shape[-1])
            .transpose(1, 2)
            .reshape(b, heads, -1, out.shape[-1])[:, :, :seq]
        )
    if window and s.flash:
        return sliding_window_attention(q, k, v, window)
    mask = causal_mask(s, q.device)
    if window:
        distance = torch.arange(q.shape[2], device=q.device)[:, None] - torch.arange(k.shape[2], device=q.device)
        mask = (distance >= 0) & (distance <= window)
    if s.flash:
        gqa = q.shape[1] != k.shape[1]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=gqa)
    if q.shape[1] != k.shape[1]:
        repeat = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is None:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    if dropout:
        probs = F.dropout(probs, DROPOUT_P, training)
    return torch.matmul(probs, v)


class Attention(nn.Module):
    """GQA/MQA/MHA: fused QKV projection (and the output gate with `attention_output_gate`, Qwen3-Next), one rotary
    call over the query and key heads together (the graph's single "rotary" op), core attention (`local`: the
    model's chunked or sliding-window attention), output projection (TP-sharded heads)."""

    def __init__(self, model: ModelSpec, s: RankShapes, selective: bool, local: bool = False) -> None:
        super().__init__()
        self.model, self.s, self.selective = model, s, selective
        self.chunk = model.attention_chunk_size if local else 0
        self.window = model.window_size if local else 0
        d = s.head_dim
        self.gate_width = s.heads * d if model.attention_output_gate else 0
        self.qkv = _linear(s.hidden, (s.heads + 2 * s.kv_heads) * d + self.gate_width, model.attention_bias)
        self.out = _linear(s.heads * d, s.hidden, model.attention_bias)
        if model.position == "rope":
            _register_rotary(self, s, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, d = self.s, self.s.head_dim
        b, n = x.shape[0], x.shape[1]
        qk, v, gate = self.qkv(x).split([(s.heads + s.kv_heads) * d, s.kv_heads * d, self.gate_width], dim=-1)
        qk = qk.view(b, n, s.heads + s.kv_heads, d)
        if self.model.position == "rope":
            qk = rotate_half(qk, self.cos, self.sin)
        q, k = qk.split([s.heads, s.kv_heads], dim=2)
        k, v = cp_gather(k, s), cp_gather(v.view(b, n, s.kv_heads, d), s)
        out = self._core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        out = out.transpose(1, 2).reshape(b, n, s.heads * d)
        if self.gate_width:
            out = out * torch.sigmoid(gate)
        return self.out(out)

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return core_attention(q, k, v, self.s, self.model.dropout, self.training, self.chunk, self.window)

        if self.selective and torch.is_grad_enabled():
            return checkpoint(run, q, k, v, use_reentrant=False)
        return run(q, k, v)


class LatentAttention(Attention):
    """Multi-head latent attention (DeepSeek-V2/V3): replicated down-projections, TP-sharded up-projections,
    a decoupled rotary part shared by all heads."""

    def __init__(self, model: ModelSpec, s: RankShapes, selective: bool) -> None:
        nn.Module.__init__(self)
        self.model, self.s, self.selective = model, s, selective
        self.chunk = self.window = 0  # MLA attends globally (DeepSeek sparse attention is timed as dense MLA)
        h, heads = s.hidden, s.heads
        nope, rope, dv = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
        kv_rank = model.kv_lora_rank or 0
        bias = model.attention_bias
        if model.q_lora_rank:
            self.q_down = _linear(h, model.q_lora_rank, bias)
            self.q_norm = Norm(model.q_lora_rank, model.norm)
            self.q_up = _linear(model.q_lora_rank, heads * (nope + rope), bias)
        else:
            self.q_proj = _linear(h, heads * (nope + rope), bias)
        self.kv_down = _linear(h, kv_rank + rope, bias)
        self.kv_norm = Norm(kv_rank, model.norm)
        self.kv_up = _linear(kv_rank, heads * (nope + dv), bias)
        self.out = _linear(heads * dv, h, bias)
        _register_rotary(self, s, rope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m, s = self.model, self.s
        b, n, heads = x.shape[0], x.shape[1], s.heads
        nope, rope, dv, kv_rank = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank or 0
        q = self.q_up(self.q_norm(self.q_down(x))) if m.q_lora_rank else self.q_proj(x)
        q_nope, q_rope = q.view(b, n, heads, nope + rope).split([nope, rope], dim=-1)
        latent, k_rope = self.kv_down(x).split([kv_rank, rope], dim=-1)
        k_nope, v = self.kv_up(self.kv_norm(latent)).view(b, n, heads, nope + dv).split([nope, dv], dim=-1)
        q = torch.cat([q_nope, rotate_half(q_rope, self.cos, self.sin)], dim=-1)
        k_rope = rotate_half(k_rope.view(b, n, 1, rope), self.cos, self.sin).expand(b, n, heads, rope)
        k = cp_gather(torch.cat([k_nope, k_rope], dim=-1), s)
        v = cp_gather(v, s)
        out = self._core(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.out(out.transpose(1, 2).reshape(b, n, heads * dv))


# ----------------------------------------------------------------------------- MLP and MoE
class Mlp(nn.Module):
    def __init__(self, model: ModelSpec, hidden: int, width: int) -> None:
        super().__init__()
        self.activation = model.activation
        self.up = _linear(hidden, 2 * width if model.gated_mlp else width, model.attention_bias)
        self.down = _linear(width, hidden, model.attention_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(_activation(self.activation, self.up(x)))


class Moe(nn.Module):
    """Router (fp32 softmax, top-k), permute, grouped expert GEMMs over the local experts, unpermute with
    the router weights, plus the shared experts. Routing is balanced: each local expert gets
    `tokens_per_expert` tokens, which is what the EP all-to-all would deliver under a balanced router."""

    def __init__(self, model: ModelSpec, s: RankShapes) -> None:
        super().__init__()
        self.activation, self.s = model.activation, s
        h, e, f = s.hidden, s.experts, s.expert_ffn
        self.router = nn.Linear(h, s.experts_total, bias=False)
        nn.init.normal_(self.router.weight, std=INIT_STD)
        up_width = 2 * f if model.gated_mlp else f
        self.w_up = nn.Parameter(torch.randn(e, h, up_width) * INIT_STD)
        self.w_down = nn.Parameter(torch.randn(e, f, h) * INIT_STD)
        self.shared = Mlp(model, h, s.shared_ffn) if s.shared_ffn else None
        pairs, received = s.routed_pairs, s.experts * s.tokens_per_expert
        # balanced dispatch: token-expert pair j goes to slot j (mod the slots this rank receives)
        order = torch.randperm(pairs, generator=torch.Generator().manual_seed(0))
        self.register_buffer("dispatch", order.repeat(-(-received // pairs))[:received], persistent=False)
        self.register_buffer("combine", torch.argsort(order), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.s
        b, n, h = x.shape
        tokens = x.reshape(b * n, h)
        probs = torch.softmax(self.router(tokens).float(), dim=-1)
        weights, _ = probs.topk(s.topk, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        pairs = tokens.repeat_interleave(s.topk, dim=0)  # permute: one row per token-expert pair
        grouped = pairs[self.dispatch].view(s.experts, s.tokens_per_expert, h)
        up = torch.bmm(grouped, self.w_up)
        out = torch.bmm(_activation(self.activation, up), self.w_down).reshape(-1, h)
        back = out[: s.routed_pairs][self.combine] if out.shape[0] >= s.routed_pairs else out[self.combine % len(out)]
        routed = (back.view(b * n, s.topk, h) * weights.unsqueeze(-1)).sum(1).view(b, n, h)
        if self.shared is not None:
            routed = routed + tp_exit(self.shared(tp_enter(x, s)), s)
        return routed


# ----------------------------------------------------------------------------- blocks
class DecoderLayer(nn.Module):
    """x [b, seq_local, h] -> same. `recompute`: none | selective | full."""

    def __init__(
        self, model: ModelSpec, s: RankShapes, moe: bool, recompute: str = "none", local: bool = False
    ) -> None:
        super().__init__()
        self.model, self.s, self.recompute = model, s, recompute
        self.attn_norm = Norm(s.hidden, model.norm)
        selective = recompute == "selective"
        self.attn = LatentAttention(model, s, selective) if model.is_mla else Attention(model, s, selective, local)
        self.mlp_norm = Norm(s.hidden, model.norm)
        self.mlp: nn.Module = Moe(model, s) if moe else Mlp(model, s.hidden, s.ffn)
        self.moe = moe

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, DROPOUT_P, self.training) if self.model.dropout else x

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.s
        x = x + self._dropout(tp_exit(self.attn(tp_enter(self.attn_norm(x), s)), s))
        h = self.mlp_norm(x)
        h = self.mlp(h) if self.moe else tp_exit(self.mlp(tp_enter(h, s)), s)
        return x + self._dropout(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute == "full" and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


class Sublayers(nn.Module):
    """The blocks of a hybrid model and the linear-attention layers: pre-norm residual sublayers in a row (a
    Mamba-2 mixer, attention, an MLP or an MoE alone; a Gated DeltaNet mixer then an MLP or MoE). Every sublayer
    but the MoE (which gathers its own tokens) runs inside the TP region."""

    def __init__(self, model: ModelSpec, s: RankShapes, parts: list[nn.Module], recompute: str = "none") -> None:
        super().__init__()
        self.model, self.s, self.recompute = model, s, recompute
        self.norms = nn.ModuleList(Norm(s.hidden, model.norm) for _ in parts)
        self.parts = nn.ModuleList(parts)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        for norm, part in zip(self.norms, self.parts, strict=True):
            h = norm(x)
            h = part(h) if isinstance(part, Moe) else tp_exit(part(tp_enter(h, self.s)), self.s)
            x = x + (F.dropout(h, DROPOUT_P, self.training) if self.model.dropout else h)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute == "full" and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


def decoder_block(kind: str, model: ModelSpec, s: RankShapes, recompute: str = "none") -> nn.Module | None:
    """The module of a decoder-layer kind (`paraplan.graph.kinds`), or None for a kind this file does not build."""
    selective = recompute == "selective"

    def attention() -> nn.Module:
        return LatentAttention(model, s, selective) if model.is_mla else Attention(model, s, selective)

    def ffn(moe: bool) -> nn.Module:
        return Moe(model, s) if moe else Mlp(model, s.hidden, s.ffn)

    if kind in ("dense", "moe", "dense_local", "moe_local"):
        return DecoderLayer(model, s, moe=kind.startswith("moe"), recompute=recompute, local=kind.endswith("local"))
    parts: dict[str, Callable[[], list[nn.Module]]] = {
        "mamba": lambda: [Mamba2Mixer(model, s.tp, s.cp)],
        "attention": lambda: [attention()],
        "mlp": lambda: [ffn(False)],
        "moe_mlp": lambda: [ffn(True)],
        "gdn": lambda: [GatedDeltaNetMixer(model, s.tp, s.cp), ffn(False)],
        "gdn_moe": lambda: [GatedDeltaNetMixer(model, s.tp, s.cp), ffn(True)],
    }
    return Sublayers(model, s, parts[kind](), recompute) if kind in parts else None


class Embedding(nn.Module):
    """Vocab-parallel lookup of this rank's vocabulary rows; ids [b, seq] -> [b, seq_local, h]."""

    def __init__(self, model: ModelSpec, s: RankShapes) -> None:
        super().__init__()
        self.s = s
        self.table = nn.Parameter(torch.randn(s.vocab, s.hidden) * INIT_STD)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return tp_exit(F.embedding(ids, self.table), self.s)


class Head(nn.Module):
    """Final norm, LM head over this rank's vocabulary, cross-entropy in fp32: (x, targets) -> loss."""

    def __init__(self, model: ModelSpec, s: RankShapes) -> None:
        super().__init__()
        self.s = s
        self.norm = Norm(s.hidden, model.norm)
        self.lm_head = _linear(s.hidden, s.vocab, False)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(tp_enter(self.norm(x), self.s))
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


class Mtp(nn.Module):
    """One DeepSeek-V3 multi-token-prediction module: norms of the hidden state and of the next token's
    embedding, a 2h -> h projection, one decoder layer and the LM head with its loss."""

    def __init__(self, model: ModelSpec, s: RankShapes, recompute: str = "none") -> None:
        super().__init__()
        self.s = s
        self.norm_h, self.norm_e = Norm(s.hidden, model.norm), Norm(s.hidden, model.norm)
        self.proj_in = 2 * s.hidden // s.tp  # row-parallel input of graph.layers.mtp_ops
        self.proj = _linear(self.proj_in, s.hidden, False)
        self.layer = DecoderLayer(model, s, moe=model.is_moe, recompute=recompute)
        self.head = Head(model, s)

    def forward(self, x: torch.Tensor, embedded: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        both = torch.cat([self.norm_h(x), self.norm_e(embedded)], dim=-1)
        h = self.proj(tp_enter(both[..., : self.proj_in], self.s))
        return self.head(self.layer(tp_exit(h, self.s)), targets)


BLOCK_KINDS = (
    "dense", "moe", "embedding", "head", "mtp", "mamba", "attention", "mlp", "moe_mlp", "gdn", "gdn_moe",
    "dense_local", "moe_local",
)  # fmt: skip


@dataclass
class BlockRun:
    """A block ready to run: `forward()` returns its output (a loss for head and mtp); `inputs` are the
    tensors whose gradient is the input gradient (B); the module's parameters get the weight gradient (W)."""

    kind: str
    module: nn.Module
    inputs: list[torch.Tensor]
    forward: Callable[[], torch.Tensor]

    @property
    def params(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]


def build_block(
    kind: str,
    model: ModelSpec,
    shard: Shard,
    dtype: str = "fp32",
    device: str = "cpu",
    recompute: str = "none",
    seed: int = 0,
) -> BlockRun:
    """One block at this rank's shapes, with random inputs of the right shapes on `device`."""
    torch.manual_seed(seed)
    s = RankShapes.of(model, shard)
    dtype_of_run, dev = torch_dtype(dtype), torch.device(device)
    b, n, h = s.batch, s.seq_local, s.hidden

    def hidden_input() -> torch.Tensor:
        return (torch.randn(b, n, h, device=dev) * 0.5).to(dtype_of_run).requires_grad_(True)

    def token_ids(rows: int) -> torch.Tensor:
        return torch.randint(0, s.vocab, (b, rows), device=dev)

    module: nn.Module | None = decoder_block(kind, model, s, recompute)
    if module is not None:
        x = hidden_input()
        inputs, run = [x], _call(module, x)
    elif kind == "embedding":
        module = Embedding(model, s)
        ids = token_ids(s.seq)
        inputs, run = [], _call(module, ids)
    elif kind == "head":
        module = Head(model, s)
        x, targets = hidden_input(), token_ids(s.seq)
        inputs, run = [x], _call(module, x, targets)
    elif kind == "mtp":
        module = Mtp(model, s, recompute=recompute)
        x, embedded, targets = hidden_input(), hidden_input(), token_ids(s.seq)
        inputs, run = [x, embedded], _call(module, x, embedded, targets)
    else:
        raise ValueError(f"unknown block kind '{kind}' (one of {', '.join(BLOCK_KINDS)})")
    module.to(device=dev, dtype=dtype_of_run)
    module.train()
    return BlockRun(kind, module, inputs, run)


def _call(module: nn.Module, *args: Any) -> Callable[[], torch.Tensor]:
    return lambda: module(*args)
