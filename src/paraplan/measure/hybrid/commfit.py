"""Fit the communication model's alpha-beta constants to collectives measured among the local devices.

Inside one scale-up domain the model (`paraplan.cost.comm.collective_time_s`, with efficiency 1) is
linear in three unknowns, 1/B (seconds per byte), S_half/B (the size-dependent efficiency term) and the
per-step latency alpha:
    all-reduce           2(k-1)/k * (S + S_half)/B + 2(k-1) alpha
    all-gather, r-scatter  (k-1)/k * (S + S_half)/B +  (k-1) alpha
    send/recv                       (S + S_half)/B +         alpha
    all-to-all         ((k-1)/k * S + S_half/k)/B + (k-1)/min(k-1, 8) alpha
so a non-negative least-squares fit on relative error (each sample weighted by 1/time) finds them.
Kinds and sizes the target uses can weigh more (`weight`), so the fit is best where the projection needs it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from paraplan.cost.calibration import Calibration
from paraplan.graph.ops import CommKind
from paraplan.measure.hybrid.collectives import CollectiveSample
from paraplan.specs.system import SystemSpec


@dataclass(frozen=True, slots=True)
class CommFit:
    bytes_per_s: float
    half_bytes: float
    latency_s: float
    error_by_kind: dict[str, float]  # median relative error of the fit per collective kind
    samples: int
    source: str  # e.g. "gloo among 2 local processes"

    def time_s(self, kind: CommKind, nbytes: float, world: int) -> float:
        row = _features(kind, nbytes, world)
        return float(row @ np.array([1 / self.bytes_per_s, self.half_bytes / self.bytes_per_s, self.latency_s]))

    def apply(self, system: SystemSpec, cal: Calibration, scale_out: bool = True) -> tuple[SystemSpec, Calibration]:
        """The system and calibration whose scale-up tier (and scale-out tier, when `scale_out`) follow the
        fit; efficiencies are 1 because the fitted bandwidth is already the achieved one."""
        gbps = self.bytes_per_s / 1e9
        values: dict[str, float] = {"scale_up_gbps": gbps, "scale_up_latency_us": self.latency_s * 1e6}
        cal_values: dict[str, float] = {"scale_up_efficiency": 1.0}
        if scale_out:
            values |= {"nic_gbps": gbps * 8, "nic_latency_us": self.latency_s * 1e6}
            cal_values |= {"scale_out_efficiency": 1.0, "comm_half_bytes": self.half_bytes}
        return system.with_overrides(**values), replace(cal, **cal_values)

    def to_dict(self) -> dict[str, object]:
        return {
            "bandwidth_gbps": self.bytes_per_s / 1e9,
            "half_bytes": self.half_bytes,
            "latency_us": self.latency_s * 1e6,
            "error_by_kind": self.error_by_kind,
            "samples": self.samples,
            "source": self.source,
        }


def _features(kind: CommKind, nbytes: float, k: int) -> np.ndarray:
    if kind is CommKind.SEND_RECV:
        return np.array([nbytes, 1.0, 1.0])
    if kind is CommKind.ALL_TO_ALL:
        return np.array([nbytes * (k - 1) / k, 1.0 / k, (k - 1) / min(k - 1, 8)])
    passes = 2.0 if kind is CommKind.ALL_REDUCE else 1.0
    share = passes * (k - 1) / k
    return np.array([share * nbytes, share, passes * (k - 1)])


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a handful of unknowns, the first (1/B) always in: the best over
    every active set that contains it."""
    best, best_err = np.zeros(a.shape[1]), float("inf")
    others = range(1, a.shape[1])
    for size in range(a.shape[1]):
        for rest in itertools.combinations(others, size):
            cols = (0, *rest)
            x_sub, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if np.any(x_sub < 0):
                continue
            x = np.zeros(a.shape[1])
            x[list(cols)] = x_sub
            err = float(np.sum((a @ x - b) ** 2))
            if err < best_err:
                best, best_err = x, err
    return best


def fit_comm(
    samples: Sequence[CollectiveSample], source: str, weight: Callable[[CollectiveSample], float] | None = None
) -> CommFit | None:
    """None when there are no samples or the fit finds no bandwidth term. `weight` multiplies a sample's
    weight in the fit (the kinds and sizes the target uses)."""
    valid = [s for s in samples if s.time.expected_s > 0]
    if not valid:
        return None
    rows, target, w = [], [], []
    for s in valid:
        t = s.time.expected_s
        rows.append(_features(s.kind, s.nbytes, s.world))
        target.append(t)
        w.append((weight(s) if weight else 1.0) / t)
    a, b, wv = np.array(rows), np.array(target), np.array(w)
    coef = _nnls(a * wv[:, None], b * wv)
    if coef[0] <= 0:
        return None
    bytes_per_s = 1.0 / coef[0]
    predicted = a @ coef
    errors: dict[str, list[float]] = {}
    for s, p, t in zip(valid, predicted, b, strict=True):
        errors.setdefault(s.kind.value, []).append(abs(p - t) / t)
    return CommFit(
        bytes_per_s=bytes_per_s,
        half_bytes=coef[1] * bytes_per_s,
        latency_s=coef[2],
        error_by_kind={k: float(np.median(v)) for k, v in errors.items()},
        samples=len(b),
        source=source,
    )
