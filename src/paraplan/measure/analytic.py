"""The analytic cost model on a regressor's samples: the baseline a fitted profile has to beat.

`paraplan fit` prints, next to each regressor's cross-validated error, the error of the analytic model
(`paraplan.cost.compute` with the shipped calibration of the GPU's family) on the same cleaned samples.
A large figure says which operator the analytic model gets wrong on that GPU, which is the operator-level
part of the error analysis (the step-level part is `paraplan validate --by`).

Collectives have no baseline here: their time depends on the sampled system's links, which are not a preset.
Flash-attention features are those of causal attention, as `cost.profile` takes them (`measure.datasets` turns
full-square samples into their causal equivalent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost.calibration import Calibration, calibration_for
from paraplan.cost.compute import compute_time_s, optimizer_time_s
from paraplan.cost.profile import ELEMENTWISE_TRAFFIC, elementwise_traffic_bytes
from paraplan.graph.backward import ELEMENTWISE_BACKWARD_TRAFFIC, backward_ops
from paraplan.graph.kernels import cross_entropy_bytes, passes
from paraplan.graph.ops import AttentionShape, GemmShape, Op, OpKind, Phase
from paraplan.measure.datasets import BYTES_PER_ELEMENT
from paraplan.specs.presets import preset_for_device, system_preset
from paraplan.specs.system import GpuSpec

__all__ = ["AnalyticError", "analytic_error", "analytic_time_us", "preset_for_device"]


def _analytic_passes(base: str, activation_bytes: int) -> tuple[float, float]:
    """(forward, backward) bytes per element of the regressor's main tensor that `paraplan.graph.layers` moves for
    the kernel the samples time: fused LayerNorm, GELU, residual add, softmax and embedding; eager RMSNorm and
    rotary (the shipped samples time unfused ones, `cost.profile.EAGER_MEASURED`); Megatron's eager
    cross-entropy over 16-bit logits."""
    if base == "cross_entropy":
        forward, backward = cross_entropy_bytes(False, activation_bytes)
        return forward, backward if backward is not None else ELEMENTWISE_BACKWARD_TRAFFIC * forward
    if base in ("rmsnorm", "rotary", "swiglu"):
        forward = passes(base, False) * activation_bytes
    else:
        forward = ELEMENTWISE_TRAFFIC[base][0] * activation_bytes
    return forward, ELEMENTWISE_BACKWARD_TRAFFIC * forward


def _gemm_op(m: float, n: float, k: float, precision: str) -> Op:
    shape = GemmShape(m=int(m), n=int(n), k=int(k))
    size = BYTES_PER_ELEMENT.get(precision, 2)
    return Op(
        name="gemm",
        kind=OpKind.GEMM,
        phase=Phase.FORWARD,
        flops=2.0 * m * n * k,
        bytes_moved=float(size * (m * k + k * n + m * n)),
        gemm=shape,
        precision=precision,
    )


def _attention_op(batch_heads: float, seq: float, head_dim: float, precision: str) -> Op:
    shape = AttentionShape(
        batch=int(batch_heads), seq_q=int(seq), seq_kv=int(seq), heads=1, kv_heads=1,
        head_dim_qk=int(head_dim), head_dim_v=int(head_dim), causal=True,
    )  # fmt: skip
    size = BYTES_PER_ELEMENT.get(precision, 2)
    return Op(
        name="attn_core",
        kind=OpKind.ATTENTION,
        phase=Phase.FORWARD,
        flops=4.0 * batch_heads * seq * seq * head_dim,  # QK^T and PV over the full square (causal halves it)
        bytes_moved=float(size * batch_heads * seq * 4 * head_dim),  # Q, K, V in, O out
        attention=shape,
        precision=precision,
    )


def _seconds(forward: Op, direction: str, gpu: GpuSpec, cal: Calibration) -> float:
    ops = [forward] if direction == "fwd" else backward_ops(forward)
    return sum(compute_time_s(op, gpu, cal) for op in ops)


def analytic_time_us(
    kind: str, base: str, direction: str, features: np.ndarray, gpu_preset: str, precision: str
) -> np.ndarray | None:
    """The analytic model's time (us) of each feature row of a regressor, or None for collectives.

    `base`: the regressor's base name ("gemm", "layernorm", ...). Features as in `paraplan.measure.datasets`:
    GEMMs (m, n, k) of the forward shape (backward: dX and dW together), causal flash attention (batch x heads,
    seq, head_dim), memory-bound ops their bytes of traffic (`cost.profile` convention, turned into the bytes the
    analytic model moves for that kernel), optimizer steps their parameters per rank."""
    if kind == "collective":
        return None
    gpu = system_preset(gpu_preset, 1).gpu
    cal = calibration_for(gpu_preset, "")
    per_nominal_byte = 1.0  # analytic bytes per byte of the regressor's feature (`cost.profile` convention)
    if kind == "elementwise":
        size = BYTES_PER_ELEMENT.get(precision, 2)
        nominal = elementwise_traffic_bytes(base, direction == "fwd", 1.0, size)
        per_nominal_byte = _analytic_passes(base, size)[direction != "fwd"] / nominal
    out = np.empty(len(features))
    for i, row in enumerate(features):
        if kind == "gemm":
            seconds = _seconds(_gemm_op(*row, precision), direction, gpu, cal)
        elif kind == "attention":
            seconds = _seconds(_attention_op(*row, precision), direction, gpu, cal)
        elif kind == "elementwise":
            moved = float(row[0]) * per_nominal_byte
            op = Op(name="elementwise", kind=OpKind.ELEMENTWISE, phase=Phase.FORWARD, bytes_moved=moved)
            seconds = compute_time_s(op, gpu, cal)
        elif kind == "optimizer":
            seconds = optimizer_time_s(float(row[0]), gpu, cal)
        else:
            raise ValueError(f"unknown regressor kind {kind!r}")
        out[i] = seconds * 1e6
    return out


@dataclass(frozen=True, slots=True)
class AnalyticError:
    """How the analytic model does on a regressor's samples."""

    mape: float  # mean |analytic / measured - 1| (a fraction)
    ratio: float  # median measured / analytic: above 1, the analytic model is too fast


def analytic_error(
    kind: str,
    base: str,
    direction: str,
    features: np.ndarray,
    time_us: np.ndarray,
    gpu_preset: str | None,
    precision: str,
) -> AnalyticError | None:
    """The analytic model's error on the samples, or None without a baseline (no preset, no rows, collectives)."""
    if gpu_preset is None or len(time_us) == 0:
        return None
    predicted = analytic_time_us(kind, base, direction, features, gpu_preset, precision)
    if predicted is None:
        return None
    return AnalyticError(
        mape=float(np.mean(np.abs(predicted / time_us - 1.0))), ratio=float(np.median(time_us / predicted))
    )
