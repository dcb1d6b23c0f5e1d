"""Bytes a Llama-3 TransformerBlock keeps for backward, eager vs torch.compile, under torchtitan's checkpointing.

The block is torchtitan@9dec370's (torchtitan/models/llama/model.py: RMSNorm computed in fp32 and cast back,
wq/wk/wv, complex rotary, repeat_kv, causal SDPA, wo, SwiGLU w2(silu(w1 x) * w3 x), two residuals), scaled down with
Llama 3.1 8B's ratios (kv heads = heads / 4, head dim 128, ffn = 3.5 hidden), bf16 weights and activations.
Activation checkpointing is torchtitan's (parallelize_llama.py `_apply_ac_to_transformer_block`): none, full
(non-reentrant checkpoint of the block) or per-op SAC (`_save_list` and `_get_custom_policy`: save every aten.mm
output but each second one, counted per block, SDPA's outputs, reduce_scatter, abs and max). On CPU SDPA runs
`_scaled_dot_product_flash_attention_for_cpu`, the stand-in here for CUDA's `_scaled_dot_product_flash_attention`.
torch.compile wraps the checkpointed block, as torchtitan's `apply_compile` does (one compile per block).

Measured: the bytes a forward leaves allocated besides its output (what the block keeps for backward, the
block input excluded: it is the previous block's output), the backward's peak above what it starts with
(the transient), and, eager under checkpointing, what the backward holds above its start once the checkpoint's
recompute of the block has stopped (`Block.forward` marks it for the profiler), all from the CPU allocator's events
(torch.profiler profile_memory), in bytes per token x hidden. The compiled block's saved tensors are listed from its
backward node (AOTAutograd's `ctx.save_for_backward`).

    python benchmarks/compile_saved.py [--shapes 512x2048,1024x1024,512x4096] [--ac op,none,full]
                                       [--compiled no,yes] [--json out.json]

Measured (torch 2.13.0+cpu, inductor C++ backend, batch 2; bytes per token x hidden, the block input excluded; the
same at every shape, so they scale with tokens x hidden):

    AC         saved eager  saved compiled   backward peak eager  compiled
    per-op SAC   13.531        11.531           51.5-54.5          39.0
    none         49.0-52.0     32.0-35.0        14.0               7.4-10.5
    full          0.000         0.002           63.0-66.0          53.0-56.0

Per-op SAC, eager: wq (h), wv (h/4), w1 (3.5h), w2 (h), SDPA output (h) in bf16 and its fp32 log-sum-exp: 13.53.
Compiled: the same less w2's output (2.00), which only the residual add reads; the partitioner saves no output no
backward op reads (torch/_functorch/partitioners.py `solve_min_cut`). Without AC the compiled block saves 17
less: RMSNorm's fp32 upcast of its input (4 each norm), its normalised bf16 output before the weight (2 each) and
silu's output (7) are recomputed in the backward from 16-bit tensors and the fp32 rstd (19), while one more h-wide
bf16 tensor is kept (2); its 32.05 is paraplan's fused graph's no-recompute total less the block input (`graph.layers`).
Without AC the 1024-wide block (8 heads, 2 KV heads) saves 3 more than the 512-wide one (4 heads, 1 KV head), eager
and compiled: repeat_kv copies K and V to all heads for SDPA (a view with one KV head); paraplan's graph keeps them
at KV width. Under per-op SAC they are recomputed: the same 13.53 / 11.53 at both.
The backward peak is above what the backward starts with; eager SAC reruns the block's forward at its first
unpack and holds every autograd-saved tensor of it, the compiled backward recomputes fused, nearer each use.

Eager recompute (held when it stops; h=512 at seq 2048 and 4096, one KV head; h=1024, two KV heads):

    AC          h=512    h=1024
    per-op SAC  37.516   40.508    = no-AC eager set + w2's output (2.00) - the policy's outputs (13.53)
    full        49.047   52.039    = no-AC eager set

torch/utils/checkpoint.py: `_checkpoint_hook.unpack_hook` reruns the block; `_recomputation_hook.pack_hook` keeps
every tensor the forward's autograd saves until its own unpack and stops the rerun at the forward's count of saved
tensors (`_StopRecomputationError`): at w2's input, saved before its mm runs, so w2's output, the policy's last,
stays in `_CachedTorchDispatchMode`'s storage; the other policy outputs are taken by the rerun (saved again or
freed). paraplan: `memory.activations.op_policy_recompute_bytes`, from the ops' eager saved bytes (`Op.
eager_saved_bytes`: 49.047 at h=512); the 3.0 more at h=1024 are repeat_kv's K and V copies, not in the graph.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

aten = torch.ops.aten
# torchtitan@9dec370 parallelize_llama.py `_save_list`, with CPU flash attention standing in for the CUDA variants
SAVE_LIST = {
    aten.mm.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    aten.abs.default,
    aten.max.default,
}


def _custom_policy(meta: dict):
    """torchtitan@9dec370 `_get_custom_policy`: save the listed ops, but recompute each second mm (per block)."""

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        key = f"{mode}_mm_count"
        if func == aten.mm.default:
            meta[key] += 1
        to_save = func in SAVE_LIST and not (func == aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


RECOMPUTE = "block_recompute"  # the profiler range of an eager checkpoint's recompute (`Block.forward`)


def _sac_context():
    return create_selective_checkpoint_contexts(_custom_policy(defaultdict(int)))


class RMSNorm(nn.Module):
    """torchtitan@9dec370 norms.py RMSNorm: the norm in fp32, cast back, times the weight."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def precompute_freqs_cis(head_dim: int, seq: int, theta: float = 500000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    return torch.polar(torch.ones(seq, head_dim // 2), torch.outer(torch.arange(seq).float(), freqs))


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return torch.view_as_real(xq_ * f).flatten(3).type_as(xq), torch.view_as_real(xk_ * f).flatten(3).type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    bs, slen, kv, hd = x.shape
    return x if n_rep == 1 else x[:, :, :, None, :].expand(bs, slen, kv, n_rep, hd).reshape(bs, slen, kv * n_rep, hd)


class Block(nn.Module):
    """torchtitan@9dec370 TransformerBlock (Attention + FeedForward)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.wq = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)
        self.attention_norm, self.ffn_norm = RMSNorm(hidden), RMSNorm(hidden)

    def attention(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        bs, seq, _ = x.shape
        xq = self.wq(x).view(bs, seq, -1, self.head_dim)
        xk = self.wk(x).view(bs, seq, -1, self.head_dim)
        xv = self.wv(x).view(bs, seq, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        rep = self.heads // self.kv_heads
        q, k, v = (t.transpose(1, 2) for t in (xq, repeat_kv(xk, rep), repeat_kv(xv, rep)))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, seq, -1))

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        if torch._C._current_graph_task_id() == -1:
            return self._forward(x, freqs_cis)
        # inside a backward: the checkpoint's recompute, marked for the profiler outside SAC's dispatch modes (which
        # would take the marker for an op of the block); it ends in an exception at its last saved tensor
        with _disable_current_modes():
            mark = torch.profiler.record_function(RECOMPUTE).__enter__()
        try:
            return self._forward(x, freqs_cis)
        finally:
            with _disable_current_modes():
                mark.__exit__(None, None, None)

    def _forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        n = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(n)) * self.w3(n))


def wrap(block: Block, ac: str, compiled: bool):
    """The block as torchtitan runs it: checkpointed (`ac`), then compiled (`apply_compile` after `apply_ac`)."""
    if ac == "none":
        fn = block
    elif ac == "full":
        fn = partial(checkpoint, block, use_reentrant=False, preserve_rng_state=False)
    else:
        fn = partial(checkpoint, block, use_reentrant=False, preserve_rng_state=False, context_fn=_sac_context)
    return torch.compile(fn, fullgraph=True, dynamic=False) if compiled else fn


def _memory_events(prof, until_ns: int | None = None) -> list[int]:
    """The allocator's byte deltas (allocations positive, frees negative) in time order, up to `until_ns`."""
    events = prof.profiler.kineto_results.events()
    timed = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    return [b for t, b in timed if until_ns is None or t <= until_ns]


def _recompute_held(prof) -> int:
    """Bytes the backward holds above its start when the eager checkpoint's recompute of the block has stopped (its
    `RECOMPUTE` range) and its unwinding has freed what it held (the frees before the backward's next allocation):
    0 without a recompute."""
    ends = [e.end_ns() for e in prof.profiler.kineto_results.events() if e.name() == RECOMPUTE]
    if not ends:
        return 0
    deltas = _memory_events(prof)
    held = sum(_memory_events(prof, max(ends)))
    for delta in deltas[len(_memory_events(prof, max(ends))) :]:
        if delta > 0:
            break
        held += delta
    return held


def measure(hidden: int, seq: int, batch: int, ac: str, compiled: bool) -> dict:
    heads = hidden // 128
    torch.manual_seed(0)
    block = Block(hidden, heads, max(1, heads // 4), int(3.5 * hidden)).to(torch.bfloat16)
    fn = wrap(block, ac, compiled)
    freqs = precompute_freqs_cis(128, seq)
    x = torch.randn(batch, seq, hidden, dtype=torch.bfloat16, requires_grad=True)
    for _ in range(2):  # compile and warm up
        fn(x, freqs).sum().backward()
    block.zero_grad(set_to_none=False)
    x.grad = torch.zeros_like(x)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as fwd:
        out = fn(x, freqs)
    saved = sum(_memory_events(fwd)) - out.numel() * out.element_size()
    listed = []
    node = out.grad_fn
    if compiled and node is not None and hasattr(node, "saved_tensors"):
        listed = [(tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in node.saved_tensors if t.numel() > 1]
    grad = torch.ones_like(out)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as bwd:
        out.backward(grad)
    level = peak = 0
    for delta in _memory_events(bwd):
        level += delta
        peak = max(peak, level)
    recompute = _recompute_held(bwd)
    unit = batch * seq * hidden
    return {
        "hidden": hidden, "seq": seq, "batch": batch, "ac": ac, "compiled": compiled,
        "saved_bytes": saved, "saved_per_token_hidden": saved / unit,
        "backward_peak_bytes": peak, "backward_peak_per_token_hidden": peak / unit,
        "recompute_bytes": recompute, "recompute_per_token_hidden": recompute / unit,
        "saved_tensors": listed,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="512x2048,1024x1024,512x4096", help="hidden x seq, comma-separated")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--ac", default="op,none,full")
    parser.add_argument("--compiled", default="no,yes", help="eager (no), compiled (yes) or both")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        hidden, seq = (int(v) for v in shape.split("x"))
        for ac in args.ac.split(","):
            for compiled in (c == "yes" for c in args.compiled.split(",")):
                torch._dynamo.reset()
                r = measure(hidden, seq, args.batch, ac, compiled)
                rows.append(r)
                print(
                    f"h={hidden:5d} s={seq:4d} ac={ac:4s} {'compiled' if compiled else 'eager   '} "
                    f"saved {r['saved_per_token_hidden']:6.3f} B/(token*h)  "
                    f"bwd peak {r['backward_peak_per_token_hidden']:6.3f} B/(token*h)  "
                    f"recompute {r['recompute_per_token_hidden']:6.3f} B/(token*h)",
                    flush=True,
                )
                if r["saved_tensors"]:
                    print("    saved:", r["saved_tensors"], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
