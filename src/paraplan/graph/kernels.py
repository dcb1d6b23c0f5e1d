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


def passes(kernel: str, fused: bool) -> float:
    """Forward memory passes of `kernel` per element of its main tensor."""
    return (FUSED_PASSES if fused else EAGER_PASSES)[kernel]
