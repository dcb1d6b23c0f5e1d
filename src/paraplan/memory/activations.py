"""Activation bytes one layer keeps per in-flight micro-batch, from the tensors its operators save.

For the GPT layer this reproduces Korthikanti et al. 2022 exactly: s*b*h*(34 + 5*a*s/h) bytes without
parallelism or recompute; s*b*h*(10 + 24/t + 5*a*s/(h*t)) with tensor parallelism; divided by t
throughout with sequence parallelism; 34*s*b*h/t with selective recompute and sequence parallelism;
and only the layer input, 2*s*b*h, with full recompute.
"""

from __future__ import annotations

from collections.abc import Sequence

from paraplan.graph.ops import Op


def recomputed_ops(forward: Sequence[Op], recompute: str) -> list[Op]:
    if recompute == "full":
        return list(forward)
    if recompute == "selective":
        return [op for op in forward if "selective" in op.tags]
    return []


def saved_bytes(forward: Sequence[Op], recompute: str, layer_input_bytes: float) -> float:
    """Bytes kept for backward. Under full recompute only the layer input (a checkpoint) is kept."""
    if recompute == "full":
        return layer_input_bytes
    dropped = sum(op.saved_bytes for op in recomputed_ops(forward, recompute))
    return sum(op.saved_bytes for op in forward) - dropped
