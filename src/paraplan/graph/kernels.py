"""Memory passes of the memory-bound operators: fused kernels against eager PyTorch.

Frameworks that fuse (Megatron-LM / NeMo with TransformerEngine or Apex, torch.compile) run an RMSNorm, a
SwiGLU or a rotary embedding as one kernel: read the input once, write the output once. Eager PyTorch runs
one aten kernel per elementary operation, each reading and writing the whole tensor. A pass is one read or
one write of the op's main tensor, per element, forward (`paraplan.graph.backward` moves 1.5x that).
"""

from __future__ import annotations

FUSED_PASSES: dict[str, float] = {
    "rmsnorm": 2,  # read x, write y
    "swiglu": 3,  # read gate and up, write silu(gate) * up (per element of the FFN width)
    "rotary": 2,  # read q (or k), write it rotated
}
EAGER_PASSES: dict[str, float] = {
    # torch.nn.functional.rms_norm without a fused kernel: x.pow(2) (r, w), .mean(-1) (r),
    # x * rsqrt(mean + eps) (r, w), * weight (r, w)
    "rmsnorm": 7,
    "swiglu": 5,  # silu(gate) (r, w), then * up (r, r, w)
    # Megatron's unfused rotate-half: x * cos (r, w), -x2 (r/2, w/2), cat (r, w), * sin (r, w), + (r, r, w)
    "rotary": 9,
}
SPLIT_GRAD_PASSES = 2.0
"""The backward of splitting a fused projection's output (Q/K/V, gate/up) in eager PyTorch concatenates the
gradients into a new tensor (read, write); a fused kernel writes them in place."""


# Cross-entropy over the logits in fp32, bytes per logit element. Megatron's vocab-parallel cross-entropy in
# eager PyTorch (tensor_parallel/cross_entropy.py, the path unless `--cross-entropy-loss-fusion`): max (r 4),
# in-place subtract (r 4, w 4), exp (r 4, w 4), sum (r 4), in-place divide keeping the softmax (r 4, w 4);
# backward multiplies the softmax by the loss gradient in place (r 4, w 4). With 16-bit logits, `.float()`
# adds a cast each way (r 2, w 4 forward; r 4, w 2 backward).
# Checked on the A100 samples of that same kernel chain (../shared/data/kernel-samples, Perlmutter
# `parallel_cross_entropy_128`, 16-bit logits, mp 1): 17 ps forward and 5.6 ps backward per logit element,
# about 35 and 11 bytes at the 2.04 TB/s of HBM (38 and 14 counted here).
CROSS_ENTROPY_EAGER_FP32_BYTES = (32.0, 8.0)
CROSS_ENTROPY_EAGER_KERNELS = (12, 4)  # forward also builds the target mask and gathers the target logits
# A fused kernel (Megatron-core `fused_vocab_parallel_cross_entropy`, TransformerEngine): reads the logits
# once and keeps the fp32 softmax (r + 2 x 4); backward moves 1.5x that (`paraplan.graph.backward`).
CROSS_ENTROPY_FUSED_FP32_BYTES = 8.0


def cross_entropy_bytes(fused: bool, logit_bytes: int) -> tuple[float, float | None]:
    """(forward, backward) bytes per logit element of the loss over `logit_bytes`-wide logits (backward
    None: the generic 1.5x of the forward)."""
    if fused:
        return logit_bytes + CROSS_ENTROPY_FUSED_FP32_BYTES, None
    cast = 0.0 if logit_bytes == 4 else logit_bytes + 4.0
    forward, backward = CROSS_ENTROPY_EAGER_FP32_BYTES
    return forward + cast, backward + cast


# Megatron's fused scale-mask-softmax kernel runs only for 16-bit scores with 16 < sk <= 4096, sq and sk
# multiples of 4 and batch x heads-per-rank a multiple of the kernel's batches per block (4 for sk > 128)
# (`FusedScaleMaskSoftmax.is_kernel_available`, Megatron-LM and Megatron-DeepSpeed fused_softmax.py).
SOFTMAX_KERNEL_BATCHES = 4
SOFTMAX_KERNEL_MAX_SEQ = 4096
# Otherwise it runs eager PyTorch in fp32 (`forward_torch_softmax`; query-key layer scaling, on by default until
# 2023, forces the fp32 softmax), bytes per score: scale (r 4, w 4), masked_fill (r 4 + 1 mask, w 4), softmax
# (r 4, w 4); autograd runs it back: softmax backward (r 8, w 4), masked_fill (r 4 + 1, w 4), scale (r 4, w 4).
# 16-bit scores add .float() before and .half() after, each way (r 2, w 4 and r 4, w 2).
SOFTMAX_EAGER_FP32_BYTES = (25.0, 29.0)
SOFTMAX_EAGER_FP32_KERNELS = 3


def fused_softmax_available(attn_batches: int, seq_q: int, seq_kv: int) -> bool:
    return (
        16 < seq_kv <= SOFTMAX_KERNEL_MAX_SEQ
        and seq_q % 4 == 0
        and seq_kv % 4 == 0
        and attn_batches % SOFTMAX_KERNEL_BATCHES == 0
    )


def eager_softmax(score_bytes: int) -> tuple[float, float, int]:
    """(forward bytes, backward bytes, kernels) per score of the eager fp32 softmax over `score_bytes`-wide scores."""
    casts = 0 if score_bytes == 4 else 2  # each reads one width and writes the other
    forward, backward = SOFTMAX_EAGER_FP32_BYTES
    return (
        forward + casts * (score_bytes + 4.0),
        backward + casts * (score_bytes + 4.0),
        SOFTMAX_EAGER_FP32_KERNELS + casts,
    )


def passes(kernel: str, fused: bool) -> float:
    """Forward memory passes of `kernel` per element of its main tensor."""
    return (FUSED_PASSES if fused else EAGER_PASSES)[kernel]
