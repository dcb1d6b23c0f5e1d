"""Activation bytes one layer keeps per in-flight micro-batch, from the tensors its operators save.

For the GPT layer this reproduces Korthikanti et al. 2022 exactly: s*b*h*(34 + 5*a*s/h) bytes without
parallelism or recompute; s*b*h*(10 + 24/t + 5*a*s/(h*t)) with tensor parallelism; divided by t
throughout with sequence parallelism; 34*s*b*h/t with selective recompute and sequence parallelism;
and only the layer input, 2*s*b*h, with full recompute.

Recompute modes: "none"; "selective", Megatron-LM's (the ops tagged selective, core attention, are recomputed);
"full" (only the layer input is kept); and "op", torchtitan's per-op selective checkpointing (`op_policy_saved_bytes`),
which is what "selective" means under torchtitan (`recompute_mode`).

Modes of the production knobs (`layer_modes`): "selective:<modules>" (Megatron `--recompute-modules` other than
core attention alone, `module_ops`), "full_inner" (a layer inside a uniform-method run of full recompute: fully
recomputed, nothing kept, the run's first layer keeping the run's input) and "offload" (Megatron's activation CPU
offloading: everything saved goes to host memory, none kept on the GPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paraplan.graph.backward import is_weightless_gemm
from paraplan.graph.ops import CommKind, Op, OpKind
from paraplan.specs.training import DEFAULT_RECOMPUTE_MODULES, TrainingSpec

SELECTIVE_PREFIX = "selective:"
FULL_INNER = "full_inner"
OFFLOAD = "offload"


def recompute_mode(train: TrainingSpec) -> str:
    """The recompute mode the memory and cost models apply: torchtitan's selective AC with its default option
    `op` (`activation_checkpoint.selective_ac_option`, torchtitan@9dec370 config_manager.py) is per-op SAC;
    Megatron's selective recompute of named modules other than core attention alone is "selective:<modules>"."""
    if train.recompute_granularity == "selective" and train.framework == "torchtitan":
        return "op"
    modules = train.recompute_modules
    if train.recompute_granularity == "selective" and modules is not None and modules != DEFAULT_RECOMPUTE_MODULES:
        return SELECTIVE_PREFIX + ",".join(sorted(set(modules)))
    return train.recompute_granularity


@dataclass(frozen=True, slots=True)
class LayerModes:
    """Per-layer modes beyond "the first N layers of a stage" (`projection._stage_parts`): Megatron's uniform
    method (runs of `uniform_run` layers, each checkpointed at its input), Primus's layer ids, and Megatron's
    activation CPU offloading of the first `offload_layers` decoder layers."""

    uniform_run: int = 1
    layer_ids: frozenset[int] | None = None
    offload_layers: int = 0

    def mode_of(self, mode: str, global_index: int, index_in_stage: int) -> str:
        if self.offload_layers and global_index < self.offload_layers:
            return OFFLOAD
        if mode != "full":
            return mode
        if self.layer_ids is not None:
            return "full" if global_index in self.layer_ids else "none"
        return "full" if index_in_stage % self.uniform_run == 0 else FULL_INNER


def layer_modes(train: TrainingSpec) -> tuple[str, int | None, LayerModes | None]:
    """(mode, layers recomputed at the start of each stage, per-layer modes) of a training spec: the arguments of
    `projection._stage_parts`. The per-layer modes are None unless a production knob asks for them, so specs
    without them take the same cached paths as before."""
    mode = recompute_mode(train)
    block_layers = train.recompute_num_layers if train.recompute_method == "block" else None
    uniform_run = train.recompute_num_layers or 1 if train.recompute_method == "uniform" else 1
    ids = frozenset(train.recompute_layer_ids) if train.recompute_layer_ids is not None else None
    if uniform_run == 1 and ids is None and not train.cpu_offloading_num_layers:
        return mode, block_layers, None
    return mode, block_layers, LayerModes(uniform_run, ids, train.cpu_offloading_num_layers)


def _mm_widths(op: Op, forward: Sequence[Op]) -> list[int]:
    """The output widths of the torch `mm` calls a weight GEMM op stands for: torchtitan's Llama runs wq, wk and wv
    apart (the fused QKV split by the core attention's head counts) and w1 and w3 apart (an up-projection twice
    the down-projection's input is gate and up)."""
    assert op.gemm is not None
    n = op.gemm.n
    if op.name == "qkv":
        core = next((o.attention for o in forward if o.attention is not None), None)
        if core is not None and (core.heads + core.kv_heads) * core.head_dim_qk + core.kv_heads * core.head_dim_v == n:
            kv = core.kv_heads
            return [core.heads * core.head_dim_qk, kv * core.head_dim_qk, kv * core.head_dim_v]
    if op.name.endswith("_up"):
        down = next((o for o in forward if o.gemm is not None and o.name == op.name[:-3] + "_down"), None)
        if down is not None and down.gemm is not None and n == 2 * down.gemm.k:
            return [n // 2, n // 2]
    return [n]


def _feeds_residual_only(forward: Sequence[Op], index: int) -> bool:
    """Whether the output of `forward[index]` goes only into the residual add (through the TP exit's reduce-scatter
    or all-reduce and a dropout, whose backwards read no activation): no backward op reads it."""
    for op in forward[index + 1 :]:
        if op.comm is not None and op.comm.kind in (CommKind.REDUCE_SCATTER, CommKind.ALL_REDUCE):
            continue
        if op.name.endswith("_dropout"):
            continue
        return op.name.endswith("_residual")
    return False


def _op_policy_kept(forward: Sequence[Op], act_bytes: float, compiled: bool) -> list[float]:
    """The bytes of each op's outputs that torchtitan's per-op policy keeps (`op_policy_saved_bytes`), by op."""
    kept = []
    mm_count = 0
    for i, op in enumerate(forward):
        unread = compiled and _feeds_residual_only(forward, i)
        nbytes = 0.0
        if op.kind is OpKind.GEMM and op.gemm is not None and not is_weightless_gemm(op):
            for width in _mm_widths(op, forward):
                mm_count += 1
                if mm_count % 2 and not unread:
                    nbytes += act_bytes * op.gemm.m * width * op.gemm.count
        elif op.attention is not None:
            a = op.attention
            nbytes = act_bytes * a.batch * a.seq_q * a.heads * a.head_dim_v + op.saved_bytes  # output, log-sum-exp
        elif op.comm is not None and op.comm.kind is CommKind.REDUCE_SCATTER and not unread:
            nbytes = op.comm.bytes / op.comm.group_size
        kept.append(nbytes)
    return kept


def op_policy_saved_bytes(
    forward: Sequence[Op], layer_input_bytes: float, act_bytes: float, compiled: bool = False
) -> float:
    """torchtitan's per-op selective activation checkpointing (torchtitan@9dec370 parallelize_llama.py
    `_save_list` and `_get_custom_policy`): the block is checkpointed (its input kept) and inside it the outputs of
    the listed ops are kept, everything else recomputed: every `aten.mm` but each second one (counted per block in
    call order), scaled-dot-product attention (output and log-sum-exp), the TP reduce-scatter, and float8's
    amax (`abs`, `max`: scalars, not counted).

    Eager, the policy's cache holds every listed output until the block's recompute takes it (torch
    utils/checkpoint.py `_CachingTorchDispatchMode`: MUST_SAVE outputs stored whether or not a backward reads
    them). `compiled` (torch.compile around the checkpointed block, torchtitan `apply_compile`): AOTAutograd's
    partitioner only bans the listed ops from recompute and forces the rest into it; what the forward saves is the
    min cut between forward and backward (torch/_functorch/partitioners.py `solve_min_cut`: MUST_SAVE nodes get
    `ban_recomputation_if_allowed`, PREFER_RECOMPUTE ones `must_recompute`), so a listed output no backward op
    reads is not saved: the output projection's and its reduce-scatter's, which only go into the residual add
    (`_feeds_residual_only`). Measured on a scaled Llama-3 block: `benchmarks/compile_saved.py`."""
    return layer_input_bytes + sum(_op_policy_kept(forward, act_bytes, compiled))


def op_policy_recompute_bytes(
    forward: Sequence[Op], layer_input_bytes: float, act_bytes: float, compiled: bool = False
) -> float:
    """The working set of a per-op SAC block's recompute in its backward, beyond what it keeps
    (`op_policy_saved_bytes`).

    Compiled: what the partitioner dropped, recomputed in the block's backward graph: the no-recompute set less
    the kept one.

    Eager (torch/utils/checkpoint.py, non-reentrant `_checkpoint_without_reentrant_generator`): the first unpack in
    the block's backward (`_checkpoint_hook.unpack_hook`) reruns its whole forward, whose `_recomputation_hook`
    `pack_hook` puts every tensor the forward's autograd saves in `_CheckpointFrame.recomputed`, each held until its
    own unpack; `_CachedTorchDispatchMode` hands the kept outputs to the rerun, where they become saved tensors or are
    freed. The rerun stops once it has saved as many tensors as the forward did (early stop,
    `_StopRecomputationError`): at the last op that saves, the output projection, whose autograd node saves its
    input before the mm runs (the dispatch modes sit below autograd), so the kept outputs from that op on (its own
    and its reduce-scatter's) are never taken and stay in the cache. The working set:
    all the eager ops save (`Op.eager_saved_bytes`, else `saved_bytes`), plus those outputs, less the kept outputs
    held before (the block input stays where it was, in the checkpoint's inputs). Measured on a scaled Llama-3
    block (`benchmarks/compile_saved.py`): 37.52 B per token x hidden with one KV head, the rule's figure."""
    kept = _op_policy_kept(forward, act_bytes, compiled)
    if compiled:
        return sum(op.saved_bytes for op in forward) - layer_input_bytes - sum(kept)
    eager = [op.saved_bytes if op.eager_saved_bytes is None else op.eager_saved_bytes for op in forward]
    last = max((i for i, nbytes in enumerate(eager) if nbytes), default=len(forward))  # the last op that saves
    return sum(eager) + sum(kept[last:]) - sum(kept)


# Megatron `--recompute-modules`, by the operators each module stands for (megatron-core 0.16
# TransformerConfig.recompute_modules; `graph.layers` names the ops): "core_attn" is the selective tag.
MODULE_OP_NAMES: dict[str, tuple[str, ...]] = {
    "layernorm": ("attn_norm", "mlp_norm"),
    "mla_up_proj": ("q_up", "kv_up", "rotary"),
    "moe_act": ("expert_act_clamp", "expert_act"),
}
OUTPUT_DISCARDING = frozenset(MODULE_OP_NAMES)
"""Modules checkpointed by discarding their output (megatron-core: "moe_act", "layernorm" and "mla_up_proj");
the others checkpoint the module whole, keeping its input."""
DISCARDED_OUTPUT_HOLDERS: dict[str, tuple[str, ...]] = {
    "layernorm": ("attn_norm", "mlp_norm"),  # a norm's output is its input's size (what the norm op saves)
    "mla_up_proj": ("q_up", "kv_up"),
    "moe_act": ("expert_down",),  # the activation's output is what the down projection saves
}
"""The ops whose saved bytes stand for an output-discarding module's output (`graph.layers` attribution)."""


def _in_module(op: Op, module: str) -> bool:
    if module == "core_attn":
        return "selective" in op.tags
    if module in MODULE_OP_NAMES:
        return op.name in MODULE_OP_NAMES[module]
    if module == "mlp":  # the dense MLP (not the experts, not the shared experts)
        return op.name.startswith("mlp_") and op.name != "mlp_norm" and op.name != "mlp_residual"
    if module == "shared_experts":
        return op.name.startswith("shared_expert")
    if module == "moe":  # the MoE layer: router, dispatch, experts, combine, shared experts
        return "moe" in op.tags or op.name.startswith("shared_expert") or op.name == "tp_ag_shared"
    return False


def module_ops(forward: Sequence[Op], modules: Sequence[str]) -> list[Op]:
    """The forward ops of the named Megatron modules, in order."""
    return [op for op in forward if any(_in_module(op, m) for m in modules)]


def recomputed_ops(forward: Sequence[Op], recompute: str) -> list[Op]:
    if recompute in ("full", FULL_INNER):
        return list(forward)
    if recompute.startswith(SELECTIVE_PREFIX):
        return module_ops(forward, recompute[len(SELECTIVE_PREFIX) :].split(","))
    if recompute == "selective":
        return [op for op in forward if "selective" in op.tags]
    if recompute == "op":  # the ops whose outputs per-op SAC drops whole (GEMMs it keeps in part are not redone)
        return [op for op in forward if op.kind is OpKind.ELEMENTWISE or op.name == "attn_out"]
    return []


def saved_bytes(
    forward: Sequence[Op], recompute: str, layer_input_bytes: float, act_bytes: float = 2.0, compiled: bool = False
) -> float:
    """Bytes kept for backward. Under full recompute only the layer input (a checkpoint) is kept; inside a uniform
    run (`FULL_INNER`) and under activation offloading nothing stays on the GPU. A checkpointed module keeps its
    input: the saved tensor of its first op (counted there), dropped are the rest of its ops' saved bytes.
    `compiled`: the block runs under torch.compile (`TrainingSpec.kernel_fusion` of a torchtitan run), which
    changes what torchtitan's per-op policy keeps (`op_policy_saved_bytes`)."""
    if recompute == "full":
        return layer_input_bytes
    if recompute in (FULL_INNER, OFFLOAD):
        return 0.0
    if recompute.startswith(SELECTIVE_PREFIX):
        dropped: set[int] = set()
        for module in recompute[len(SELECTIVE_PREFIX) :].split(","):
            members = [i for i, op in enumerate(forward) if _in_module(op, module)]
            if module in DISCARDED_OUTPUT_HOLDERS:
                holders = DISCARDED_OUTPUT_HOLDERS[module]
                dropped.update(i for i, op in enumerate(forward) if op.name in holders)
                dropped.update(members[1:])  # inside the module (gpt-oss's clamped copy before `expert_act`)
                continue
            # core attention's inputs (Q, K, V) are saved by the projections before it (Korthikanti et al.)
            dropped.update(members if module == "core_attn" else members[1:])
        total = sum(op.saved_bytes for op in forward)
        dropped_bytes = sum(forward[i].saved_bytes for i in dropped)
        return max(0.0, total - dropped_bytes)
    if recompute == "op":
        return op_policy_saved_bytes(forward, layer_input_bytes, act_bytes, compiled)
    dropped = sum(op.saved_bytes for op in recomputed_ops(forward, recompute))
    return sum(op.saved_bytes for op in forward) - dropped
