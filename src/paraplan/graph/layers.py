"""Forward operators of one micro-batch through each kind of layer, with shapes after sharding.

Saved-for-backward bytes follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", section 4): for the GPT layer they add up to s*b*h*(34 + 5*a*s/h) bytes without
parallelism, and every sharded term divides by t under tensor/sequence parallelism. Tensors shared by two
operators (a GEMM output that is the next op's input) are counted once, by the consumer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from paraplan.cost.quantize import RECIPES
from paraplan.fastinit import fastinit
from paraplan.graph.backward import TP_INPUT_GRAD
from paraplan.graph.kernels import (
    CROSS_ENTROPY_EAGER_KERNELS,
    SPLIT_GRAD_PASSES,
    cross_entropy_bytes,
    eager_softmax,
    fused_softmax_available,
    passes,
)
from paraplan.graph.ops import (
    AttentionShape,
    CommAxis,
    CommKind,
    CommShape,
    GemmShape,
    Op,
    OpKind,
    Phase,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.training import TrainingSpec

ACT_BYTES = 2  # bf16/fp16 activations (mixed precision, FP8 GEMMs included); fp32 training: FP32_ACT_BYTES
FP32_ACT_BYTES = 4
MASK_BYTES = 1  # dropout masks are stored as bytes (Korthikanti et al. 2022)
LOGIT_BYTES = 4  # Megatron's vocab-parallel cross-entropy works in fp32
# llm-foundry's MPT loss is flash-attn's fused CrossEntropyLoss (`loss_fn` defaults to "fused_crossentropy",
# llm-foundry 0.2.0-0.7.0 ComposerMPTCausalLM): it saves its 16-bit input logits and an fp32 log-sum-exp per row
# (flash-attn 2.5.7 ops/triton/cross_entropy.py `ctx.save_for_backward(logits, lse, labels)`; 1.0.x xentropy
# alike), no fp32 softmax.
SIXTEEN_BIT_LOSS_FRAMEWORKS = frozenset({"llm-foundry"})
# Transformer Engine's linears (Linear, LayerNormLinear, LayerNormMLP, GroupedLinear), as megatron-core builds its
# layers with them, keep for the weight-gradient GEMM the input they quantised for the forward GEMM, not the 16-bit
# one: TE 1.x `_Linear.forward` saves `inputmat_t` (the FP8 cast-transpose) and `_LayerNormLinear` its FP8 `ln_out`;
# TE 2.x saves the quantised tensor after `update_usage(rowwise_usage=False, columnwise_usage=True)`, the
# column-wise copy alone (per-tensor FP8 under sequence parallelism on Hopper keeps the row-wise copy too, to
# gather it again: not modelled, at most the h / tp input of a column-parallel GEMM). torchtitan's float8 (torchao
# `Float8Linear`) saves the high-precision input.
MEGATRON_CORE_FRAMEWORKS = frozenset({"megatron-lm", "nemo-megatron"})
FP8_PRECISIONS = ("fp8", "fp8_cs", "fp8_blockwise", "mxfp8", "nvfp4")

SELECTIVE = frozenset({"selective"})
MOE = frozenset({"moe"})
EAGER_TAG = frozenset({"eager"})  # a memory-bound op run as eager PyTorch's separate kernels


AttentionCore = Callable[[ModelSpec, "Shard", int, int, int], list[Op]]
"""Builds the core of an MLA layer in place of dense attention: (model, shard, heads on this rank, qk head dim,
v head dim) -> ops."""


def activation_bytes(precision: str) -> int:
    """Bytes per activation element for a training precision ("fp32": 4; mixed precision: 2)."""
    return FP32_ACT_BYTES if precision == "fp32" else ACT_BYTES


@fastinit
@dataclass(frozen=True, slots=True)
class Shard:
    """The per-GPU view of one micro-batch: what TP, SP, CP, EP leave on one rank."""

    batch: int  # micro-batch size
    seq: int  # tokens per sequence on this rank (seq / cp)
    seq_full: int  # whole sequence (keys/values attended over)
    tp: int
    sp: bool
    cp: int
    ep: int
    etp: int
    precision: str
    flash: bool
    fused: bool = True  # fused memory-bound kernels (TE/Apex/compile), or eager PyTorch (`graph.kernels`)
    fused_loss: bool = True  # fused cross-entropy kernel, or Megatron's eager vocab-parallel one
    loss_logit_bytes: int = LOGIT_BYTES  # bytes per logit the loss saves for backward (`loss_saved_logit_bytes`)
    flex_dispatch: bool = False  # MoE tokens sent once per destination rank and node (DeepEP / HybridEP)
    moe_padding_factor: float = 1.0  # routed copies per balanced one (drop-and-pad: the capacity factor)
    megatron_core: bool = False
    """megatron-core's modules (`MEGATRON_CORE_FRAMEWORKS`): TE linears that keep low-precision inputs quantised, and
    megatron-core's eager paths."""

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def sp_div(self) -> int:
        """Divisor of tensors outside the TP regions (norms, dropout, residual)."""
        return self.tp if self.sp else 1

    @property
    def gemm_precision(self) -> str:
        return self.precision

    @property
    def act_bytes(self) -> int:
        """Bytes per activation element: 4 when training in plain fp32, else 2 (16-bit activations)."""
        return activation_bytes(self.precision)

    def keeps_quantized_input(self, precision: str) -> bool:
        """Whether a GEMM in `precision` keeps its input quantised for its weight gradient (TE linears)."""
        return self.megatron_core and precision in RECIPES

    def saved_input_bytes(self, precision: str) -> float:
        """Bytes per element of the input a GEMM in `precision` keeps for its weight gradient: the recipe's quantised
        element with its block scales (`cost.quantize.QuantRecipe.element_bytes`: FP8 1, MXFP8 1 + 1/32, NVFP4
        0.5 + 1/16) where it `keeps_quantized_input`, else the 16-bit activation."""
        return RECIPES[precision].element_bytes if self.keeps_quantized_input(precision) else self.act_bytes

    @property
    def act_precision(self) -> str:
        """Precision of the memory-bound ops and of attention: "fp32" in fp32 training, else "bf16"."""
        return "fp32" if self.precision == "fp32" else "bf16"

    @classmethod
    def of(cls, train: TrainingSpec) -> Shard:
        return cls(
            batch=train.mbs,
            seq=train.seq // train.cp,
            seq_full=train.seq,
            tp=train.tp,
            sp=train.sequence_parallel and train.tp > 1,
            cp=train.cp,
            ep=train.ep,
            etp=train.etp,
            precision=train.precision,
            flash=train.attention_backend == "flash",
            fused=train.kernel_fusion,
            fused_loss=train.cross_entropy_fusion,
            loss_logit_bytes=loss_saved_logit_bytes(train),
            flex_dispatch=train.moe_token_dispatcher_type == "flex",
            moe_padding_factor=train.moe_padding_factor,
            megatron_core=train.framework in MEGATRON_CORE_FRAMEWORKS,
        )


def loss_saved_logit_bytes(train: TrainingSpec) -> int:
    """Bytes per logit the loss saves for backward: the fp32 softmax or log-probabilities (`LOGIT_BYTES`), or the
    16-bit logits themselves under a loss that keeps its input (`loss_keeps_16bit_logits`)."""
    return activation_bytes(train.precision) if loss_keeps_16bit_logits(train) else LOGIT_BYTES


def torch_loss_parallel(train: TrainingSpec) -> bool:
    """Whether the loss runs in torch's vocab-parallel `loss_parallel()`: torchtitan with TP (its default)."""
    return train.framework == "torchtitan" and train.tp > 1


def loss_keeps_16bit_logits(train: TrainingSpec) -> bool:
    """A loss that saves its 16-bit input logits, not fp32 log-probabilities: a fused one that keeps them
    (`SIXTEEN_BIT_LOSS_FRAMEWORKS`), or a compiled loss (`TrainingSpec.loss_compiled`) over logits held whole on the
    rank. Under torchtitan's vocab-parallel `loss_parallel()` the loss runs on DTensors whose backward
    (`_nll_loss_and_log_softmax_backward`) is modelled as eager (`memory.loss`)."""
    compiled = train.loss_compiled and not torch_loss_parallel(train)
    return train.framework in SIXTEEN_BIT_LOSS_FRAMEWORKS or compiled


def _gemm(
    name: str,
    m: int,
    n: int,
    k: int,
    shard: Shard,
    saved: float = 0.0,
    count: int = 1,
    tags=frozenset(),
    expert: bool = False,
    precision: str | None = None,
    saved_input: float = 0.0,
) -> Op:
    """A linear's GEMM, in the shard's GEMM precision unless `precision` names another (the 16-bit GEMMs of a
    low-precision run). It keeps `saved_input` elements of its input for its weight gradient, of
    `Shard.saved_input_bytes` each, and `saved` bytes of 16-bit tensors for other ops (Q, K, V for attention)."""
    precision = precision or shard.gemm_precision
    saved += saved_input * shard.saved_input_bytes(precision)
    return Op(
        name=name,
        kind=OpKind.GEMM,
        phase=Phase.FORWARD,
        flops=2.0 * m * n * k * count,
        bytes_moved=float(shard.act_bytes * (m * k + k * n + m * n) * count),
        gemm=GemmShape(m=m, n=n, k=k, count=count),
        saved_bytes=saved,
        precision=precision,
        tags=tags,
        # grouped expert GEMMs are issued one per expert (TE GroupedLinear, cuBLAS loop); FP8 adds a
        # quantisation kernel per GEMM (Transformer Engine)
        host_ops=count * (2 if precision in FP8_PRECISIONS else 1),
        expert=expert,
    )


def _elementwise(
    shard: Shard,
    name: str,
    bytes_moved: float,
    saved: float = 0.0,
    flops: float = 0.0,
    tags=frozenset(),
    host_ops: int = 1,
    backward_bytes: float | None = None,
    eager_saved: float | None = None,
) -> Op:
    return Op(
        name=name,
        kind=OpKind.ELEMENTWISE,
        phase=Phase.FORWARD,
        flops=flops,
        bytes_moved=bytes_moved,
        saved_bytes=saved,
        precision=shard.act_precision,
        tags=tags,
        host_ops=host_ops,
        backward_bytes=backward_bytes,
        eager_saved_bytes=eager_saved,
    )


def _comm(
    name: str,
    kind: CommKind,
    axis: CommAxis,
    group: int,
    nbytes: float,
    tags=frozenset(),
    routing: tuple[int, int] | None = None,
) -> Op:
    return Op(
        name=name,
        kind=OpKind.COMM,
        phase=Phase.FORWARD,
        bytes_moved=nbytes,
        comm=CommShape(kind=kind, axis=axis, group_size=group, bytes=nbytes, routing=routing),
        tags=tags,
    )


def _tp_enter(name: str, shard: Shard, width: int) -> list[Op]:
    """Entering a TP region: all-gather of the sequence shards under SP (identity otherwise)."""
    if shard.tp > 1 and shard.sp:
        nbytes = shard.act_bytes * shard.tokens * width
        return [_comm(name, CommKind.ALL_GATHER, CommAxis.TP, shard.tp, nbytes, tags=TP_INPUT_GRAD)]
    return []


def _tp_exit(name: str, shard: Shard, width: int) -> list[Op]:
    """Leaving a TP region: reduce-scatter under SP, all-reduce otherwise (Megatron's g operator)."""
    if shard.tp == 1:
        return []
    nbytes = shard.act_bytes * shard.tokens * width
    if shard.sp:
        return [_comm(name, CommKind.REDUCE_SCATTER, CommAxis.TP, shard.tp, nbytes)]
    # Without SP the backward all-reduce sits at the next column-parallel linear's input (Megatron's f operator),
    # not here (g's backward is the identity): the same bytes, one per region, so this one stands in for it.
    return [_comm(name, CommKind.ALL_REDUCE, CommAxis.TP, shard.tp, nbytes, tags=TP_INPUT_GRAD)]


def _norm(name: str, model: ModelSpec, shard: Shard) -> Op:
    """LayerNorm (one kernel fused or eager) or RMSNorm (several passes in eager PyTorch, `graph.kernels`).
    A fused norm keeps its input; eager RMSNorm (torchtitan@9dec370 norms.py, as torch's composite `rms_norm`:
    `x.float()`, `pow`, `mean`, `rsqrt`, `mul`, `type_as`, `* weight`) keeps the fp32 copy of its input (`pow`,
    `mul`), the fp32 reciprocal RMS per row (`rsqrt`, `mul`) and the normalised 16-bit tensor (`* weight`)."""
    elems = shard.tokens * model.hidden_size / shard.sp_div
    eager_rms = model.norm == "rmsnorm" and not shard.fused
    moved = (passes("rmsnorm", shard.fused) if model.norm == "rmsnorm" else 2) * shard.act_bytes * elems
    tags = EAGER_TAG | {"rmsnorm"} if eager_rms else frozenset()
    eager = (FP32_ACT_BYTES + shard.act_bytes) * elems + FP32_ACT_BYTES * elems / model.hidden_size
    return _elementwise(
        shard, name, bytes_moved=moved, saved=shard.act_bytes * elems, flops=5 * elems, tags=tags,
        eager_saved=eager if eager_rms else None,
    )  # fmt: skip


def _rotary(shard: Shard, elems: float, fused: bool = True) -> Op:
    """Rotary embedding over `elems` query and key elements (fused kernel, or eager rotate-half when the shard's
    kernels are eager or `fused` is False)."""
    fused = fused and shard.fused
    moved = passes("rotary", fused) * shard.act_bytes * elems
    return _elementwise(shard, "rotary", moved, tags=EAGER_TAG | {"rotary"} if not fused else frozenset())


def fused_rope_available(model: ModelSpec, shard: Shard) -> bool:
    """Whether megatron-core runs the model's RoPE in TransformerEngine's fused kernel: not under YaRN with a
    concentration factor other than 1 (gpt-oss: 1.35), which TE's fused RoPE does not take, so megatron-core 0.16
    warns and runs the eager rotate-half (models/common/embeddings/rope_utils.py `apply_rotary_pos_emb`: "mscale=...
    is not supported by TE's fused RoPE. Using unfused implementation.")."""
    return not (shard.megatron_core and model.rope_concentration != 1.0)


def _split_grad(name: str, shard: Shard, elems: float, count: int = 1, tags=frozenset()) -> list[Op]:
    """Eager PyTorch only: splitting a fused projection's output costs nothing forward (views); its backward
    concatenates the gradients (`graph.kernels.SPLIT_GRAD_PASSES`)."""
    if shard.fused:
        return []
    grad_bytes = SPLIT_GRAD_PASSES * shard.act_bytes * elems * count
    return [_elementwise(shard, name, 0.0, tags=tags | EAGER_TAG, host_ops=0, backward_bytes=grad_bytes)]


def _residual(name: str, model: ModelSpec, shard: Shard) -> list[Op]:
    """The residual add after a sublayer, with the sublayer's dropout when the model has one. Megatron fuses the
    bias, the dropout and the add into one kernel (`bias_dropout_add_fused_train`, `--bias-dropout-fusion`, on by
    default): read the sublayer's output and the residual, write the sum and the 1-byte mask; its backward reads the
    gradient and the mask and writes the sublayer's gradient, and the residual stream's two gradients are summed
    (read 2, write 1). Eager PyTorch runs a dropout kernel, then an add."""
    elems = shard.tokens * model.hidden_size / shard.sp_div
    if model.dropout and shard.fused:
        act = shard.act_bytes
        return [
            _elementwise(
                shard, name, (3 * act + MASK_BYTES) * elems, saved=MASK_BYTES * elems, flops=2 * elems,
                backward_bytes=(2 * act + MASK_BYTES + 3 * act) * elems,
            )
        ]  # fmt: skip
    ops = []
    if model.dropout:
        ops.append(_elementwise(shard, f"{name}_dropout", 2 * shard.act_bytes * elems, saved=MASK_BYTES * elems))
    ops.append(_elementwise(shard, name, 3 * shard.act_bytes * elems, flops=elems))
    return ops


def _softmax(shard: Shard, score_elems: int, attn_batches: int, seq_q: int, seq_kv: int) -> Op:
    """Megatron's scale-mask-softmax over the attention scores: the fused kernel where it can run, else the eager
    fp32 chain (also under `--no-masked-softmax-fusion` and in fp32 training; `paraplan.graph.kernels`)."""
    score_bytes = shard.act_bytes
    if score_bytes != FP32_ACT_BYTES and shard.fused and fused_softmax_available(attn_batches, seq_q, seq_kv):
        return _elementwise(
            shard, "attn_softmax", 2 * score_bytes * score_elems, saved=score_bytes * score_elems, tags=SELECTIVE
        )
    forward, backward, kernels = eager_softmax(score_bytes)
    return _elementwise(
        shard,
        "attn_softmax",
        forward * score_elems,
        saved=FP32_ACT_BYTES * score_elems,  # autograd keeps the fp32 softmax output
        tags=SELECTIVE,
        host_ops=kernels,
        backward_bytes=backward * score_elems,
    )


def causal_window_keys(seq: int, window: int) -> float:
    """Keys a query attends on average when it sees at most `window` earlier keys of a causal sequence: the average
    causal sliding-window context (Megatron-Bridge 0.6.2 flop_utils `calculate_swa_context`); seq/2 without a limit."""
    if window <= 0 or window >= seq:
        return seq / 2
    return window - window * (window - 1) / (2 * seq)


def local_attention_op(
    model: ModelSpec, shard: Shard, heads: int, kv_heads: int, d_qk: int, d_v: int, keys: float, tags=frozenset()
) -> Op:
    """A flash kernel over `keys` keys per query on average (sliding window, sparse top-k): counted like full
    attention, as the square of twice the keys a causal query attends (so it equals full attention when the window
    spans the sequence), with the kernel doing half of that (`AttentionShape.causal`)."""
    b, s = shard.batch, shard.seq
    square = max(1, round(2 * keys))
    io_bytes = shard.act_bytes * b * (s * heads * (d_qk + d_v) + shard.seq_full * kv_heads * (d_qk + d_v))
    return Op(
        name="attn_core",
        kind=OpKind.ATTENTION,
        phase=Phase.FORWARD,
        flops=2.0 * b * heads * s * 2 * keys * (d_qk + d_v),
        bytes_moved=float(io_bytes),
        attention=AttentionShape(
            batch=b, seq_q=s, seq_kv=square, heads=heads, kv_heads=kv_heads, head_dim_qk=d_qk, head_dim_v=d_v
        ),
        saved_bytes=float(4 * b * heads * s),  # fp32 log-sum-exp per query row
        precision=shard.act_precision,
        tags=tags,
    )


def _core_attention(
    model: ModelSpec, shard: Shard, heads: int, kv_heads: int, d_qk: int, d_v: int, local: bool = False
) -> list[Op]:
    """Attention scores, softmax and context. Q, K, V are saved by the GEMMs that produce them and the
    output by the projection that consumes it; this op saves only what is its own. `local`: the model's local
    attention (context parallelism is refused with it, `specs.validate`): chunked (Llama 4), each query attending
    causally within its chunk, the same work as a batch of sequences one chunk long (a last partial chunk counted
    whole); or a sliding window (flash kernels only: the unfused path masks a whole square)."""
    b, s, skv = shard.batch, shard.seq, shard.seq_full
    chunk = model.attention_chunk_size if local else 0
    if 0 < chunk < shard.seq_full:
        b, s, skv = b * -(-shard.seq_full // chunk), chunk, chunk
    if local and model.window_size and shard.flash:
        keys = causal_window_keys(shard.seq_full, model.window_size)
        return [local_attention_op(model, shard, heads, kv_heads, d_qk, d_v, keys)]
    shape = AttentionShape(
        batch=b, seq_q=s, seq_kv=skv, heads=heads, kv_heads=kv_heads, head_dim_qk=d_qk, head_dim_v=d_v
    )
    # Model FLOPs count the full s x s square (Megatron's convention); kernels skip the masked half.
    flops = 2.0 * b * heads * s * skv * (d_qk + d_v)
    if shard.flash:
        io_bytes = shard.act_bytes * b * (s * heads * (d_qk + d_v) + skv * kv_heads * (d_qk + d_v))
        return [
            Op(
                name="attn_core",
                kind=OpKind.ATTENTION,
                phase=Phase.FORWARD,
                flops=flops,
                bytes_moved=float(io_bytes),
                attention=shape,
                saved_bytes=float(4 * b * heads * s),  # fp32 log-sum-exp per query row
                precision=shard.act_precision,
                tags=frozenset({"alibi"}) if model.position == "alibi" else frozenset(),
            )
        ]
    # Unfused (Megatron core attention): baddbmm for scores, fused scale-mask-softmax, dropout, bmm.
    # Everything here is recomputed under selective recompute.
    score_elems = b * heads * s * skv
    ops = [
        Op(
            name="attn_scores",
            kind=OpKind.GEMM,
            phase=Phase.FORWARD,
            flops=2.0 * score_elems * d_qk,
            bytes_moved=float(shard.act_bytes * (b * heads * (s + skv) * d_qk + score_elems)),
            gemm=GemmShape(m=s, n=skv, k=d_qk, count=b * heads),
            precision=shard.act_precision,
            tags=SELECTIVE,
        ),
        _softmax(shard, score_elems, b * heads, s, skv),
    ]
    if model.dropout:
        ops.append(
            _elementwise(
                shard,
                "attn_dropout",
                2 * shard.act_bytes * score_elems,
                saved=(MASK_BYTES + shard.act_bytes) * score_elems,
                tags=SELECTIVE,
            )
        )
    ops.append(
        Op(
            name="attn_context",
            kind=OpKind.GEMM,
            phase=Phase.FORWARD,
            flops=2.0 * score_elems * d_v,
            bytes_moved=float(shard.act_bytes * (score_elems + b * heads * (s + skv) * d_v)),
            gemm=GemmShape(m=s, n=d_v, k=skv, count=b * heads),
            precision=shard.act_precision,
            tags=SELECTIVE,
        )
    )
    return ops


def _kept_attention_output(core: list[Op], shard: Shard, out_elems: float) -> list[Op]:
    """The attention core with its 16-bit output counted on its kernel's op where the output projection keeps a
    quantised copy of its own (`Shard.keeps_quantized_input`): a flash kernel's backward reads its output
    (FlashAttention and cuDNN fused attention save `out`), which in 16 bits is the very tensor the projection keeps
    (counted there).
    `out_elems` 0: another op keeps the output (an output gate). The unfused core's backward needs no output."""
    if not out_elems or not shard.keeps_quantized_input(shard.gemm_precision):
        return core
    kernel = next((i for i, op in enumerate(core) if op.kind is OpKind.ATTENTION), None)
    if kernel is None:
        return core
    kept = replace(core[kernel], saved_bytes=core[kernel].saved_bytes + shard.act_bytes * out_elems)
    return [*core[:kernel], kept, *core[kernel + 1 :]]


def _cp_exchange(model: ModelSpec, shard: Shard, kv_width: int) -> list[Op]:
    """Context parallelism: ring exchange of K and V, cp - 1 steps (Megatron's p2p CP, overlapped)."""
    if shard.cp == 1:
        return []
    nbytes = shard.act_bytes * shard.tokens * kv_width * (shard.cp - 1)
    return [_comm("cp_kv_exchange", CommKind.SEND_RECV, CommAxis.CP, shard.cp, nbytes)]


def attention_ops(model: ModelSpec, shard: Shard, local: bool = False) -> list[Op]:
    """Norm, QKV, rotary, core attention, output projection, residual (GQA/MQA/MHA); `local`: the model's chunked
    or sliding-window attention (`_core_attention`)."""
    h, t = model.hidden_size, shard.tp
    heads = model.num_attention_heads // t
    kv_heads = max(1, model.kv_groups // t)
    d = model.head_dim
    tokens = shard.tokens
    ops = [_norm("attn_norm", model, shard), *_tp_enter("tp_ag_attn", shard, h)]
    # Q, K, V; and the output gate with `attention_output_gate` (Qwen3-Next: sigmoid(gate) x attention output)
    gate_width = heads * d if model.attention_output_gate else 0
    qkv_width = (heads + 2 * kv_heads) * d + gate_width
    qkv_saved = shard.act_bytes * tokens * qkv_width  # Q, K, V for attention, beside its input
    ops.append(_gemm("qkv", tokens, qkv_width, h, shard, saved=qkv_saved, saved_input=tokens * h / shard.sp_div))
    ops += _split_grad("qkv_split", shard, tokens * qkv_width)
    if model.position == "rope":
        ops.append(_rotary(shard, tokens * (heads + kv_heads) * d, fused_rope_available(model, shard)))
    ops += _cp_exchange(model, shard, 2 * kv_heads * d)
    ops += _kept_attention_output(_core_attention(model, shard, heads, kv_heads, d, d, local), shard,
                                  0 if gate_width else tokens * heads * d)  # fmt: skip
    if gate_width:  # read the attention output and the gate, write the gated output; keep the attention output
        gated = tokens * gate_width
        ops.append(
            _elementwise(shard, "attn_output_gate", 3 * shard.act_bytes * gated, saved=shard.act_bytes * gated,
                         flops=4 * gated)
        )  # fmt: skip
    ops.append(_gemm("attn_out", tokens, h, heads * d, shard, saved_input=tokens * heads * d))
    ops += _tp_exit("tp_rs_attn", shard, h)
    ops += _residual("attn_residual", model, shard)
    return ops


def mla_attention_ops(model: ModelSpec, shard: Shard, attention_core: AttentionCore | None = None) -> list[Op]:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank q and kv with a decoupled rotary part. `attention_core`:
    the ops that replace the dense core (heads, qk and v head dims given), the layer kind's choice.

    Down-projections are replicated across TP, up-projections column-parallel (Megatron-core MLA).
    """
    h, t = model.hidden_size, shard.tp
    heads = model.num_attention_heads // t
    d_nope, d_rope, d_v = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
    kv_rank = model.kv_lora_rank or 0
    tokens = shard.tokens
    ops = [_norm("attn_norm", model, shard), *_tp_enter("tp_ag_attn", shard, h)]
    in_elems = tokens * h / shard.sp_div
    q_width = heads * (d_nope + d_rope)
    if model.q_lora_rank:
        q_rank = model.q_lora_rank
        ops.append(_gemm("q_down", tokens, q_rank, h, shard, saved_input=in_elems, tags=frozenset({"mla"})))
        ops.append(
            _elementwise(
                shard, "q_norm", 2 * shard.act_bytes * tokens * q_rank, saved=shard.act_bytes * tokens * q_rank
            )
        )
        q_saved = shard.act_bytes * tokens * q_width  # q for attention, beside its input
        ops.append(_gemm("q_up", tokens, q_width, q_rank, shard, saved=q_saved, saved_input=tokens * q_rank))
    else:
        q_saved = shard.act_bytes * tokens * q_width
        ops.append(_gemm("q_proj", tokens, q_width, h, shard, saved=q_saved, saved_input=in_elems))
    # its 16-bit input is the q projection's (counted there); a quantised copy is its own
    kv_down_input = in_elems if shard.keeps_quantized_input(shard.gemm_precision) else 0.0
    ops.append(_gemm("kv_down", tokens, kv_rank + d_rope, h, shard, saved_input=kv_down_input, tags=frozenset({"mla"})))
    ops.append(
        _elementwise(shard, "kv_norm", 2 * shard.act_bytes * tokens * kv_rank, saved=shard.act_bytes * tokens * kv_rank)
    )
    kv_width = heads * (d_nope + d_v)
    # k and v for attention, the rotary key once per head: megatron-core 0.19.2 MLA
    # (`qkv_up_proj_and_rope_apply`, fused `ApplyMLARotaryEmbKV`) writes the key as [tokens, heads, d_nope + d_rope],
    # the shared rotary part expanded to every head, and core attention keeps that tensor
    kv_saved = shard.act_bytes * tokens * (kv_width + heads * d_rope)
    ops.append(_gemm("kv_up", tokens, kv_width, kv_rank, shard, saved=kv_saved, saved_input=tokens * kv_rank))
    ops.append(_rotary(shard, tokens * (heads + 1) * d_rope))
    ops += _cp_exchange(model, shard, heads * (d_nope + d_rope + d_v))
    if attention_core is not None:  # e.g. DeepSeek sparse attention (`graph.dsa`): its indexer and its sparse core
        core = attention_core(model, shard, heads, d_nope + d_rope, d_v)
    else:
        core = _core_attention(model, shard, heads, heads, d_nope + d_rope, d_v)
    ops += _kept_attention_output(core, shard, tokens * heads * d_v)
    ops.append(_gemm("attn_out", tokens, h, heads * d_v, shard, saved_input=tokens * heads * d_v))
    ops += _tp_exit("tp_rs_attn", shard, h)
    ops += _residual("attn_residual", model, shard)
    return ops


def _mlp_body(
    prefix: str, model: ModelSpec, shard: Shard, tokens: int, ffn_local: int, count: int, tags, up_input: float = 0.0
) -> list[Op]:
    """Up (gate+up fused when gated), activation, down. `count` grouped GEMMs (experts on this rank). `up_input`:
    the elements of its input the up-projection keeps (0: another op keeps that tensor)."""
    h = model.hidden_size
    up_width = 2 * ffn_local if model.gated_mlp else ffn_local
    act_in = shard.act_bytes * tokens * up_width * count
    act_out_elems = tokens * ffn_local * count
    act_out = shard.act_bytes * act_out_elems
    act_moved = act_in + act_out  # one pass over the input(s), one over the output
    act_tags = tags
    eager_saved = None
    if model.gated_mlp and not shard.fused:  # eager SwiGLU: silu(gate), then * up, which keeps silu's output too
        act_moved = passes("swiglu", False) * shard.act_bytes * tokens * ffn_local * count
        act_tags = tags | EAGER_TAG | {"swiglu"}
        eager_saved = act_in + act_out
    return [
        _gemm(f"{prefix}_up", tokens, up_width, h, shard, count=count, tags=tags, saved_input=up_input),
        *(_split_grad(f"{prefix}_up_split", shard, tokens * up_width, count, tags) if model.gated_mlp else []),
        *_activation_clamp(prefix, model, shard, tokens * up_width * count, tags),
        _elementwise(
            shard, f"{prefix}_act", act_moved, act_in, 4 * tokens * up_width * count, act_tags, eager_saved=eager_saved
        ),
        _gemm(f"{prefix}_down", tokens, h, ffn_local, shard, count=count, tags=tags, saved_input=act_out_elems),
    ]


def _activation_clamp(prefix: str, model: ModelSpec, shard: Shard, elems: float, tags) -> list[Op]:
    """gpt-oss's clamp of the GLU input (`ModelSpec.activation_func_clamp_value`) in front of megatron-core's fused
    activation: megatron-core 0.16 `weighted_bias_quick_geglu_impl` (fusions/fused_bias_geglu.py, the
    `bias_activation_fusion` path gpt-oss takes) runs it eagerly: chunk (views), `clamp` of the gate half and of the
    linear half (each reads and writes its half), `torch.cat` of the two (read, write): 4 passes over the `elems`
    elements of the up-projection's output. The clamps keep their input for backward, the up-projection's output,
    beside the clamped copy the fused kernel keeps. Backward: each clamp's gradient reads the kept input and the
    output gradient and writes its gradient through a byte mask (3 passes and a mask written and read), and the
    chunk's backward concatenates the halves' gradients (read, write)."""
    if not (model.activation_func_clamp_value and model.gated_mlp and shard.megatron_core and shard.fused):
        return []
    act = shard.act_bytes
    return [
        _elementwise(
            shard, f"{prefix}_act_clamp", 4 * act * elems, saved=act * elems, tags=tags | EAGER_TAG, host_ops=3,
            backward_bytes=(5 * act + 2 * MASK_BYTES) * elems,
        )
    ]  # fmt: skip


def _expert_output_bias(model: ModelSpec, shard: Shard, rows: int, local_experts: int) -> list[Op]:
    """The routed experts' output bias (`ModelSpec.moe_expert_linear_bias`) as megatron-core 0.16 adds it:
    TEGroupedMLP's down projection returns its biases apart (`skip_bias_add=True`) and `_apply_bias`
    (transformer/moe/experts.py) runs per local expert `t + b * p` (the bias times the token's routing probability:
    write b*p, read it and t, write the sum) and `torch.cat`s the results (read, write): 6 passes over the `rows` x
    hidden output, 2 kernels per expert and the concatenation. Backward: the product's two gradients
    (grad * p summed to the bias, grad * b summed to the probability: write and read the product, read the gradient,
    each) and the split's concatenation of the gradients (read, write): 8 passes."""
    if not (model.moe_expert_linear_bias and shard.megatron_core):
        return []
    elems = rows * model.hidden_size
    act = shard.act_bytes
    return [
        _elementwise(
            shard, "expert_bias", 6 * act * elems, flops=2 * elems, tags=MOE | EAGER_TAG,
            host_ops=2 * local_experts + 1, backward_bytes=8 * act * elems,
        )
    ]  # fmt: skip


def mlp_ops(model: ModelSpec, shard: Shard) -> list[Op]:
    h = model.hidden_size
    ops = [_norm("mlp_norm", model, shard), *_tp_enter("tp_ag_mlp", shard, h)]
    # the MLP input (norm output, sharded under SP) is saved by the up-projection
    ffn_local = model.ffn_hidden_size // shard.tp
    ops += _mlp_body("mlp", model, shard, shard.tokens, ffn_local, 1, frozenset(), shard.tokens * h / shard.sp_div)
    ops += _tp_exit("tp_rs_mlp", shard, h)
    ops += _residual("mlp_residual", model, shard)
    return ops


def moe_ops(model: ModelSpec, shard: Shard) -> list[Op]:
    """Router, token dispatch all-to-all over EP, grouped expert GEMMs, combine, shared experts.

    Balanced routing (the measured MoE benchmarks force-balance tokens). Per GPU, the routed work is
    (tokens / tp) * topk token-expert pairs, spread over the experts on the rank (Megatron alltoall
    dispatcher with sequence parallelism).
    """
    h = model.hidden_size
    k = model.moe_router_topk
    own_tokens = shard.tokens // shard.tp if shard.sp else shard.tokens
    local_experts = max(1, model.num_experts // shard.ep)
    routed_pairs = own_tokens * k  # token copies this rank sends out and gets back
    if shard.moe_padding_factor != 1.0:  # drop-and-pad: every expert gets its capacity, factor x the balanced share
        routed_pairs = math.ceil(routed_pairs * shard.moe_padding_factor)
    tokens_per_expert = max(1, round(routed_pairs * shard.etp / local_experts))
    ffn_local = model.expert_ffn // shard.etp
    ops = [_norm("mlp_norm", model, shard)]
    # the router's GEMM stays 16-bit in low-precision runs: megatron-core's TopKRouter runs a plain
    # torch linear (`router_gating_linear`, in bf16 or `--moe-router-dtype`), outside Transformer Engine
    ops.append(
        _gemm(
            "router", own_tokens, model.num_experts, h, shard, saved=shard.act_bytes * own_tokens * h, tags=MOE,
            precision=shard.act_precision,
        )
    )  # fmt: skip
    # Megatron TopKRouter: fp32 softmax, top-k, load-balancing aux loss, z-loss, token histogram and the
    # device-to-host copy of the counts: about 20 small kernels.
    ops.append(_elementwise(shard, "router_topk", 4 * own_tokens * model.num_experts * 2, tags=MOE, host_ops=20))
    ops.append(_elementwise(shard, "permute", 2 * shard.act_bytes * routed_pairs * h, tags=MOE, host_ops=4))
    dispatch_bytes = shard.act_bytes * routed_pairs * h
    routing = (model.num_experts, k) if shard.flex_dispatch else None
    if shard.ep > 1:
        ops.append(_comm("ep_dispatch", CommKind.ALL_TO_ALL, CommAxis.EP, shard.ep, dispatch_bytes, MOE, routing))
    if shard.etp > 1:
        ops.append(_comm("etp_ag", CommKind.ALL_GATHER, CommAxis.ETP, shard.etp, dispatch_bytes * shard.etp, tags=MOE))
    # the routed experts' ops: their weights are expert parameters (`Op.expert`)
    routed = tokens_per_expert * local_experts * h  # the permuted tokens, kept by the experts' up-projection
    body = _mlp_body("expert", model, shard, tokens_per_expert, ffn_local, local_experts, MOE, routed)
    ops += [replace(op, expert=True) for op in body]
    ops += _expert_output_bias(model, shard, tokens_per_expert * local_experts, local_experts)
    if shard.etp > 1:
        ops.append(
            _comm(
                "etp_rs",
                CommKind.REDUCE_SCATTER,
                CommAxis.ETP,
                shard.etp,
                dispatch_bytes * shard.etp,
                tags=MOE,
            )
        )
    if shard.ep > 1:
        ops.append(_comm("ep_combine", CommKind.ALL_TO_ALL, CommAxis.EP, shard.ep, dispatch_bytes, MOE, routing))
    ops.append(
        _elementwise(
            shard, "unpermute", 2 * shard.act_bytes * routed_pairs * h, saved=4 * routed_pairs, tags=MOE, host_ops=4
        )
    )
    if model.moe_shared_expert_intermediate_size:
        ops += _tp_enter("tp_ag_shared", shard, h)
        # its 16-bit input is the router's (counted there); a quantised copy is its own
        shared_input = own_tokens * h if shard.keeps_quantized_input(shard.gemm_precision) else 0.0
        shared_ffn = model.moe_shared_expert_intermediate_size // shard.tp
        ops += _mlp_body("shared_expert", model, shard, shard.tokens, shared_ffn, 1, MOE, shared_input)
        ops += _tp_exit("tp_rs_shared", shard, h)
    ops += _residual("mlp_residual", model, shard)
    return ops


def padded_vocab(model: ModelSpec, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of 128 * tp (`--make-vocab-size-divisible-by 128`)."""
    unit = 128 * tp
    return -(-model.vocab_size // unit) * unit


def embedding_ops(model: ModelSpec, shard: Shard) -> list[Op]:
    elems = shard.tokens * model.hidden_size
    ops = [_elementwise(shard, "embedding", 2 * shard.act_bytes * elems)]
    if shard.tp > 1:  # vocab-parallel lookup ends in an all-reduce (or reduce-scatter under SP)
        ops += _tp_exit("tp_embedding", shard, model.hidden_size)
    return ops


def head_ops(model: ModelSpec, shard: Shard, vocab: int) -> list[Op]:
    """Final norm, LM head (vocab-parallel), cross-entropy in fp32."""
    h, tokens = model.hidden_size, shard.tokens
    v_local = vocab // shard.tp
    ops = [_norm("final_norm", model, shard), *_tp_enter("tp_ag_head", shard, h)]
    # The LM head stays 16-bit in low-precision runs: megatron-core's output layer is its own ColumnParallelLinear,
    # not a Transformer Engine module (no FP8/FP4 context reaches it); torchtitan converts every linear but the
    # `output` one (its Float8 filter); the NVFP4 recipe keeps it in BF16 (arXiv:2509.25149, section 4).
    ops.append(
        _gemm(
            "lm_head", tokens, v_local, h, shard, saved=shard.act_bytes * tokens * h / shard.sp_div,
            precision=shard.act_precision,
        )
    )  # fmt: skip
    logits = tokens * v_local
    forward, backward = cross_entropy_bytes(shard.fused_loss, shard.act_bytes)
    ops.append(
        _elementwise(
            shard, "cross_entropy", forward * logits, saved=shard.loss_logit_bytes * logits,
            tags=frozenset() if shard.fused_loss else EAGER_TAG,
            host_ops=1 if shard.fused_loss else CROSS_ENTROPY_EAGER_KERNELS[0],
            backward_bytes=None if backward is None else backward * logits,
        )
    )  # fmt: skip
    if shard.tp > 1:  # max and sum-exp all-reduces over the vocab shards (tiny)
        ops.append(_comm("tp_ce_reduce", CommKind.ALL_REDUCE, CommAxis.TP, shard.tp, 3 * 4 * tokens))
    return ops


def mtp_ops(model: ModelSpec, shard: Shard, vocab: int) -> list[Op]:
    """One DeepSeek-V3 multi-token-prediction module: two norms, a 2h -> h projection, one transformer
    layer (MoE in DeepSeek-V3) and the shared LM head with its loss."""
    h, tokens = model.hidden_size, shard.tokens
    ops = [_norm("mtp_norm_h", model, shard), _norm("mtp_norm_e", model, shard)]
    ops.append(_gemm("mtp_proj", tokens, h, 2 * h // shard.tp, shard, saved_input=tokens * 2 * h))
    ops += mla_attention_ops(model, shard) if model.is_mla else attention_ops(model, shard)
    ops += moe_ops(model, shard) if model.is_moe else mlp_ops(model, shard)
    ops += head_ops(model, shard, vocab)
    return [Op(**{**_fields(op), "name": f"mtp_{op.name}"}) for op in ops]


def _fields(op: Op) -> dict:
    return {s: getattr(op, s) for s in Op.__slots__}


def decoder_layer_ops(
    model: ModelSpec, shard: Shard, moe: bool, local: bool = False, attention_core: AttentionCore | None = None
) -> list[Op]:
    """Attention (MLA, with `attention_core` in place of its dense core; or GQA, with optional local attention:
    chunked or sliding window) and a dense or MoE MLP."""
    attn = mla_attention_ops(model, shard, attention_core) if model.is_mla else attention_ops(model, shard, local)
    return attn + (moe_ops(model, shard) if moe else mlp_ops(model, shard))


def gated_mixer_exit(prefix: str, model: ModelSpec, shard: Shard, width: int, saved: float) -> list[Op]:
    """The tail the gated linear-time mixers share (Mamba-2 and Gated DeltaNet): a gated RMSNorm of the mixer's
    output over `width` channels on this rank (reads output and gate, writes the gated output; saves
    `saved` bytes), the output projection back to hidden, the TP exit and the residual."""
    act, tokens, h = shard.act_bytes, shard.tokens, model.hidden_size
    return [
        _elementwise(shard, f"{prefix}_gated_norm", 3 * act * tokens * width, saved=saved,
                     flops=8 * tokens * width),
        _gemm(f"{prefix}_out_proj", tokens, h, width, shard, saved_input=tokens * width),
        *_tp_exit(f"tp_rs_{prefix}", shard, h),
        *_residual(f"{prefix}_residual", model, shard),
    ]  # fmt: skip
