"""Fitted performance profiles: a versioned JSON format and its evaluation (numpy only, no pickle).

A profile holds regressors fitted on measured operator and collective timings of one GPU
(`paraplan fit`, see `paraplan.measure.fit`). When a profile covers an operator, the core uses it in
place of the analytic estimate (DESIGN.md section 4, "Fitted profiles").

Regressors and their raw features (all strictly positive; the models work on their logarithms):

| regressor                         | features                         | the core's input                         |
|-----------------------------------|----------------------------------|------------------------------------------|
| `gemm.fwd`, `gemm.bwd`            | m, n, k                          | `Op.gemm` (forward shape [m,k] x [k,n])  |
| `attention.fwd`, `attention.bwd`  | batch_heads, seq, head_dim       | `Op.attention` (causal, flash)           |
| `<elementwise>.fwd`, `.bwd`       | bytes                            | `Op.bytes_moved` (convention below)      |
| `optimizer`                       | params                           | parameters on the rank                   |
| `<collective>.<nodes>x<gpn>`      | bytes                            | `CommShape.bytes` (see `collective`)     |

`gemm.bwd` is the time of both backward GEMMs (input and weight gradient) of a forward shape; the
backward ops carry their own shapes, as `paraplan.graph.backward` emits them: dX (BACKWARD_INPUT) is
(m, k, n) and dW (BACKWARD_WEIGHT) is (k, n, m) for the forward (m, n, k). Each gets the measured
backward of that forward shape times its share, estimated by the forward regressor on its own shape
(half each when a shape lies outside the sampled range). `attention.bwd` and `<elementwise>.bwd` hold
the whole backward of the op, all of it input gradient (B): their BACKWARD_WEIGHT time is 0.

Elementwise byte convention (the same formulas as `paraplan.graph.layers`): `Op.bytes_moved` of a
forward memory-bound op is `elements x (activation_passes x bytes_per_element + fp32_passes x 4)`
with the counts from `ELEMENTWISE_TRAFFIC`; its backward moves 1.5x that (reads the saved input and
the output gradient, writes the input gradient; `paraplan.graph.backward`). `elements` is the op's
main tensor: tokens x hidden for norms, residual and embedding; tokens x FFN/tp for the activation
(its input for GELU; gate and up are both read for SwiGLU); tokens x (q + k heads)/tp x head_dim for
rotary; batch x heads/tp x seq x seq for softmax; tokens x vocab/tp logits for cross-entropy.

File format (`format_version` 1), one JSON object:
```
{"format": "paraplan-profile", "format_version": 1,
 "gpu": "NVIDIAA100-SXM4-80GB", "source": "...", "precision": "fp16", "created_utc": "...",
 "provenance": {...free-form: source files, outlier rule, fit rule, dropped rows, notes...},
 "regressors": {"gemm.fwd": {
     "kind": "gemm", "direction": "fwd", "features": ["m", "n", "k"],
     "feature_min": [...], "feature_max": [...],          # raw units, over the fitted samples
     "cv_mape": 0.03, "n_samples": 8000, "notes": {...},
     "model": {"family": "gbm" | "forest" | "physical",
               "inputs": [[1, 0, 0], ...],                 # z = inputs @ log(x)
               "poly": {"powers": [[...]], "coef": [...]},  # sum coef * prod z**powers
               "trees": {"depth": d, "init": y0,            # init + sum over trees of one leaf each
                         "feature": [[...]], "threshold": [[...]], "leaf": [[...]]}}
 }, ...}}
```
`y = poly(z) + trees(z)` is log(time in microseconds): "physical" has only the polynomial; "gbm" and
"forest" a degree-1 polynomial (power law) plus trees fitted to its residuals. Trees are complete
binary trees in heap order (children of node i are 2i+1 and 2i+2); `feature` -1 means "always go
left"; a sample goes right when z[feature] > threshold.

Out-of-range rule: a regressor answers None when any feature lies outside [min/2, 2*max] of the samples
it was fitted on; the core then uses its analytic model. Collectives are fitted per topology (nodes x
GPUs per node) and answer None for any topology that was not measured (no extrapolation); which system's
collectives a profile times is `paraplan.cost.collectives`'s rule.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from paraplan.cost.comm import Modelled
from paraplan.graph.backward import ELEMENTWISE_BACKWARD_TRAFFIC
from paraplan.graph.kernels import EAGER_PASSES, cross_entropy_bytes
from paraplan.graph.ops import CommKind, CommShape, Op, OpKind, Phase

PROFILE_FORMAT = "paraplan-profile"
PROFILE_FORMAT_VERSION = 1
OUT_OF_RANGE_FACTOR = 2.0  # a feature outside [min / 2, max * 2] of the fitted samples -> None
SIGNIFICANT_DIGITS = 7  # tree numbers are stored rounded: keeps files small, far below measurement noise
POLY_SIGNIFICANT_DIGITS = 12  # polynomial coefficients multiply powers of logs: keep more digits

MODEL_FAMILIES = ("gbm", "forest", "physical")

# Per element of the op's main tensor: (passes at the activation precision, passes in fp32). Forward;
# the backward moves BACKWARD_TRAFFIC_FACTOR times as much. Matches paraplan.graph.layers.
ELEMENTWISE_TRAFFIC: dict[str, tuple[int, int]] = {
    "layernorm": (2, 0),  # read x, write y
    "rmsnorm": (2, 0),
    "gelu": (2, 0),  # read x, write act(x)
    "swiglu": (3, 0),  # read gate and up, write silu(gate) * up (elements: the FFN width)
    "residual": (3, 0),  # read a and b, write a + b
    "rotary": (2, 0),  # read q (or k), write it rotated
    "softmax": (2, 0),
    "embedding": (2, 0),  # gather rows, write the output
    "cross_entropy": (1, 2),  # read 16-bit logits; write and read them back in fp32 (Megatron)
}
BACKWARD_TRAFFIC_FACTOR = ELEMENTWISE_BACKWARD_TRAFFIC
FP32_BYTES = 4


def elementwise_traffic_bytes(base: str, forward: bool, elements: float, bytes_per_element: float) -> float:
    """Bytes of the convention above for a memory-bound op on `elements` of its main tensor."""
    activation_passes, fp32_passes = ELEMENTWISE_TRAFFIC[base]
    forward_bytes = elements * (activation_passes * bytes_per_element + fp32_passes * FP32_BYTES)
    return forward_bytes if forward else BACKWARD_TRAFFIC_FACTOR * forward_bytes


# Op names -> elementwise regressor. A name matches through any run of its "_"-separated words
# ("final_norm", "mtp_norm_h", "mlp_act"), longest run first; names with a word of
# ELEMENTWISE_EXCLUDED ("attn_residual_dropout", "router_topk") match nothing. A plain "norm" is costed
# as the fused LayerNorm kernel: the RMSNorm samples are an unfused implementation, about 4x slower
# than the fused kernels frameworks use for RMSNorm today. SwiGLU/GeGLU/squared-ReLU activations are
# memory-bound like GELU and use the GELU regressor on their own bytes.
ELEMENTWISE_ALIASES: dict[str, str] = {
    "layernorm": "layernorm",
    "norm": "layernorm",
    "rmsnorm": "rmsnorm",
    "gelu": "gelu",
    "act": "gelu",
    "activation": "gelu",
    "swiglu": "gelu",
    "geglu": "gelu",
    "squared_relu": "gelu",
    "rotary": "rotary",
    "rope": "rotary",
    "residual": "residual",
    "res_add": "residual",
    "softmax": "softmax",
    "cross_entropy": "cross_entropy",
    "embedding": "embedding",
}
# Regressors whose samples time the eager PyTorch implementation (`paraplan.measure.bench`: F.rms_norm, the
# rotate-half rotary, silu(gate) * up; the RMSNorm kernel samples in ../shared are unfused too): an op tagged
# "eager" with one of these kernels uses them directly (`elementwise_features`).
EAGER_MEASURED = ("rmsnorm", "rotary", "swiglu")
ELEMENTWISE_EXCLUDED = frozenset({"dropout", "topk", "permute", "unpermute", "mask", "quantize", "cast"})

# Precisions whose kernels run at the same rate share a class: A100/H100 tensor cores run fp16 and bf16
# at the same peak (NVIDIA A100 and H100 datasheets).
PRECISION_CLASS: dict[str, str] = {"fp16": "half", "bf16": "half", "fp32": "fp32", "tf32": "tf32", "fp8": "fp8"}

# Collective regressor name prefix per CommKind. Reduce-scatter falls back to all-gather: ring
# reduce-scatter and ring all-gather move the same (n-1)/n of the buffer per rank (nccl-tests,
# doc/PERFORMANCE.md, "bus bandwidth").
COLLECTIVE_NAMES: dict[CommKind, str] = {
    CommKind.ALL_REDUCE: "all_reduce",
    CommKind.ALL_GATHER: "all_gather",
    CommKind.REDUCE_SCATTER: "reduce_scatter",
    CommKind.ALL_TO_ALL: "all_to_all",
    CommKind.SEND_RECV: "send_recv",
}


class ProfileError(ValueError):
    """A profile file that cannot be read: wrong format, version or content."""


def _rounded(values: np.ndarray | Sequence[float], digits: int = SIGNIFICANT_DIGITS) -> list[Any]:
    array = np.asarray(values, dtype=float)
    if array.ndim > 1:
        return [_rounded(row, digits) for row in array]
    return [float(f"{v:.{digits}g}") for v in array]


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """Sum of complete binary regression trees (gradient boosting, or a forest with leaves pre-divided)."""

    depth: int
    init: float
    feature: np.ndarray  # int [trees, 2**depth - 1]; -1 = always left
    threshold: np.ndarray  # float [trees, 2**depth - 1]
    leaf: np.ndarray  # float [trees, 2**depth]

    def predict(self, z: np.ndarray) -> np.ndarray:
        """z: [samples, inputs] -> [samples]."""
        n_samples, n_trees = z.shape[0], self.feature.shape[0]
        node = np.zeros((n_samples, n_trees), dtype=np.int64)
        trees = np.arange(n_trees)[None, :]
        rows = np.arange(n_samples)[:, None]
        for _ in range(self.depth):
            feature = self.feature[trees, node]
            value = z[rows, np.maximum(feature, 0)]
            go_right = (feature >= 0) & (value > self.threshold[trees, node])
            node = 2 * node + 1 + go_right
        leaf_index = node - (2**self.depth - 1)
        return self.init + self.leaf[trees, leaf_index].sum(axis=1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "depth": self.depth,
            "init": _rounded([self.init])[0],
            "feature": self.feature.astype(int).tolist(),
            "threshold": _rounded(self.threshold),
            "leaf": _rounded(self.leaf),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TreeEnsemble:
        depth = int(data["depth"])
        feature = np.asarray(data["feature"], dtype=np.int64).reshape(-1, 2**depth - 1)
        threshold = np.asarray(data["threshold"], dtype=float).reshape(feature.shape)
        leaf = np.asarray(data["leaf"], dtype=float).reshape(-1, 2**depth)
        if leaf.shape[0] != feature.shape[0]:
            raise ProfileError("tree arrays disagree on the number of trees")
        return cls(depth=depth, init=float(data["init"]), feature=feature, threshold=threshold, leaf=leaf)


@dataclass(frozen=True, eq=False)
class LogPolynomial:
    """y = sum_t coef[t] * prod_j z[j] ** powers[t, j]: a polynomial in log features."""

    powers: np.ndarray  # int [terms, inputs]
    coef: np.ndarray  # [terms]

    def predict(self, z: np.ndarray) -> np.ndarray:
        terms = np.prod(z[:, None, :] ** self.powers[None, :, :], axis=2)
        return terms @ self.coef

    def to_dict(self) -> dict[str, Any]:
        return {"powers": self.powers.astype(int).tolist(), "coef": _rounded(self.coef, POLY_SIGNIFICANT_DIGITS)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LogPolynomial:
        powers = np.asarray(data["powers"], dtype=np.int64)
        coef = np.asarray(data["coef"], dtype=float)
        if powers.ndim != 2 or powers.shape[0] != coef.shape[0]:
            raise ProfileError("polynomial powers and coefficients disagree")
        return cls(powers=powers, coef=coef)


@dataclass(frozen=True, eq=False)
class LogModel:
    """log(time_us) = poly(z) + trees(z), z = inputs @ log(features); either part may be absent.

    Tree families carry a degree-1 polynomial (a power law) as their base, so that between the last
    sample and the edge of the valid range they follow the power law instead of staying flat.
    """

    family: str
    inputs: np.ndarray  # [inputs, features] exponents
    poly: LogPolynomial | None = None
    trees: TreeEnsemble | None = None

    def predict_log_us(self, features: np.ndarray) -> np.ndarray:
        z = np.log(np.asarray(features, dtype=float)) @ self.inputs.T
        y = np.zeros(z.shape[0])
        if self.poly is not None:
            y += self.poly.predict(z)
        if self.trees is not None:
            y += self.trees.predict(z)
        return y

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"family": self.family, "inputs": self.inputs.tolist()}
        if self.poly is not None:
            data["poly"] = self.poly.to_dict()
        if self.trees is not None:
            data["trees"] = self.trees.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LogModel:
        family = data.get("family")
        if family not in MODEL_FAMILIES:
            raise ProfileError(f"unknown model family {family!r}")
        if "poly" not in data and "trees" not in data:
            raise ProfileError('a model needs a "poly" or a "trees" part')
        inputs = np.asarray(data["inputs"], dtype=float)
        poly = LogPolynomial.from_dict(data["poly"]) if "poly" in data else None
        trees = TreeEnsemble.from_dict(data["trees"]) if "trees" in data else None
        if poly is not None and poly.powers.shape[1] != inputs.shape[0]:
            raise ProfileError("polynomial powers do not match the model inputs")
        return cls(family=family, inputs=inputs, poly=poly, trees=trees)


@dataclass(frozen=True, eq=False)
class Regressor:
    """One fitted regressor: raw features -> time, valid inside the sampled range."""

    name: str
    kind: str  # "gemm" | "attention" | "elementwise" | "optimizer" | "collective"
    direction: str  # "fwd" | "bwd" | "step"
    features: tuple[str, ...]
    feature_min: tuple[float, ...]
    feature_max: tuple[float, ...]
    model: LogModel
    cv_mape: float | None = None  # cross-validated mean absolute percentage error, as a fraction
    n_samples: int = 0
    notes: Mapping[str, Any] = field(default_factory=dict)

    def in_range(self, x: Sequence[float]) -> bool:
        return all(
            v > 0 and lo / OUT_OF_RANGE_FACTOR <= v <= hi * OUT_OF_RANGE_FACTOR
            for v, lo, hi in zip(x, self.feature_min, self.feature_max, strict=True)
        )

    def predict_us(self, features: np.ndarray) -> np.ndarray:
        """Batch prediction in microseconds, without the range check. features: [samples, features]."""
        return np.exp(self.model.predict_log_us(np.atleast_2d(features)))

    def time_us(self, x: Sequence[float]) -> float | None:
        if not self.in_range(x):
            return None
        return float(self.predict_us(np.asarray([x], dtype=float))[0])

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "direction": self.direction,
            "features": list(self.features),
            "feature_min": _rounded(self.feature_min),
            "feature_max": _rounded(self.feature_max),
            "cv_mape": None if self.cv_mape is None else round(self.cv_mape, 5),
            "n_samples": self.n_samples,
            "notes": dict(self.notes),
            "model": self.model.to_dict(),
        }

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any]) -> Regressor:
        features = tuple(str(f) for f in data["features"])
        feature_min = tuple(float(v) for v in data["feature_min"])
        feature_max = tuple(float(v) for v in data["feature_max"])
        model = LogModel.from_dict(data["model"])
        if not (len(features) == len(feature_min) == len(feature_max) == model.inputs.shape[1]):
            raise ProfileError(f"regressor {name!r}: feature lists disagree")
        cv_mape = data.get("cv_mape")
        return cls(
            name=name,
            kind=str(data["kind"]),
            direction=str(data["direction"]),
            features=features,
            feature_min=feature_min,
            feature_max=feature_max,
            model=model,
            cv_mape=None if cv_mape is None else float(cv_mape),
            n_samples=int(data.get("n_samples", 0)),
            notes=dict(data.get("notes", {})),
        )


def collective_regressor_name(kind: str, nodes: int, gpus_per_node: int) -> str:
    return f"{kind}.{nodes}x{gpus_per_node}"


def elementwise_regressor(op_name: str) -> str | None:
    """The elementwise regressor base name for an op name, or None ("final_norm" -> "layernorm")."""
    words = re.split(r"[_.\-]", op_name.lower())
    if ELEMENTWISE_EXCLUDED.intersection(words):
        return None
    for length in range(len(words), 0, -1):
        for start in range(len(words) - length, -1, -1):
            candidate = "_".join(words[start : start + length])
            if candidate in ELEMENTWISE_ALIASES:
                return ELEMENTWISE_ALIASES[candidate]
    return None


def elementwise_features(op: Op) -> list[tuple[str, float]]:
    """(regressor base, its bytes feature) candidates for an elementwise op, best first. An eager-PyTorch op
    whose kernel has samples of that same eager implementation (`EAGER_MEASURED`) is looked up there at the
    nominal bytes of its shape (the fused passes, as the samples record them); then by its name, at the bytes
    it moves (a profile without the eager samples times eager RMSNorm as LayerNorm passes, SwiGLU as GELU's)."""
    out = []
    if "eager" in op.tags:
        kernel = next((k for k in EAGER_MEASURED if k in op.tags), None)
        if kernel is not None:
            nominal_passes = ELEMENTWISE_TRAFFIC[kernel][0]  # what the samples record (all kernels here: no fp32)
            out.append((kernel, float(op.bytes_moved) * nominal_passes / EAGER_PASSES[kernel]))
    base = elementwise_regressor(op.name)
    if base == "cross_entropy":  # the samples record the convention's bytes, whichever implementation ran
        out.append((base, _cross_entropy_nominal_bytes(op)))
    elif base is not None:
        out.append((base, float(op.bytes_moved)))
    return out


def _cross_entropy_nominal_bytes(op: Op) -> float:
    """The loss's bytes under ELEMENTWISE_TRAFFIC, from the bytes its implementation moves (`graph.kernels`)."""
    act_bytes = FP32_BYTES if op.precision == "fp32" else 2
    forward = op.phase is Phase.FORWARD
    per_forward, per_backward = cross_entropy_bytes("eager" not in op.tags, act_bytes)
    per_element = per_forward if forward else (per_backward or BACKWARD_TRAFFIC_FACTOR * per_forward)
    return elementwise_traffic_bytes("cross_entropy", forward, op.bytes_moved / per_element, act_bytes)


class Profile:
    """A set of fitted regressors for one GPU, and the mapping from the core's operators onto them."""

    def __init__(
        self,
        gpu: str,
        source: str,
        precision: str,
        regressors: Mapping[str, Regressor],
        created_utc: str = "",
        provenance: Mapping[str, Any] | None = None,
    ) -> None:
        self.gpu = gpu
        self.source = source
        self.precision = precision
        self.regressors: dict[str, Regressor] = dict(regressors)
        self.created_utc = created_utc
        self.provenance: dict[str, Any] = dict(provenance or {})
        self._cache: dict[tuple[str, tuple[float, ...]], float | None] = {}
        # what the collective lookups ask of the regressors, once (`has_collective`, `measured_gpus_per_node`)
        self._has_collective: dict[CommKind, bool] = {}
        self._gpus_per_node: list[int | None] = []

    # ---- file format -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PROFILE_FORMAT,
            "format_version": PROFILE_FORMAT_VERSION,
            "gpu": self.gpu,
            "source": self.source,
            "precision": self.precision,
            "created_utc": self.created_utc,
            "provenance": self.provenance,
            "regressors": {name: r.to_dict() for name, r in sorted(self.regressors.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Profile:
        if not isinstance(data, Mapping) or data.get("format") != PROFILE_FORMAT:
            raise ProfileError(f'not a paraplan profile (expected "format": "{PROFILE_FORMAT}")')
        version = data.get("format_version")
        if version != PROFILE_FORMAT_VERSION:
            raise ProfileError(f"profile format_version {version!r}; this paraplan reads {PROFILE_FORMAT_VERSION}")
        try:
            regressors = {name: Regressor.from_dict(name, r) for name, r in data["regressors"].items()}
            return cls(
                gpu=str(data["gpu"]),
                source=str(data.get("source", "")),
                precision=str(data.get("precision", "fp16")),
                regressors=regressors,
                created_utc=str(data.get("created_utc", "")),
                provenance=data.get("provenance", {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ProfileError):
                raise
            raise ProfileError(f"malformed profile: {exc!r}") from exc

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"cannot read profile {path}: {exc.strerror}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProfileError(f"profile {path} is not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        """Write the JSON with one line per top-level field and per regressor (readable diffs, small file)."""
        data = self.to_dict()
        regressors = data.pop("regressors")

        def compact(value: Any) -> str:
            return json.dumps(value, separators=(",", ":"))

        lines = [f"{json.dumps(key)}: {compact(value)}" for key, value in data.items()]
        body = ",\n".join(f"  {json.dumps(name)}: {compact(r)}" for name, r in regressors.items())
        lines.append('"regressors": {\n' + body + "\n}")
        Path(path).write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")

    # ---- evaluation --------------------------------------------------------------------------------
    def _time_us(self, name: str, x: tuple[float, ...]) -> float | None:
        key = (name, x)
        if key not in self._cache:
            regressor = self.regressors.get(name)
            self._cache[key] = None if regressor is None else regressor.time_us(x)
            if len(self._cache) > 200_000:  # bound the memo; results are pure functions of the key
                self._cache.clear()
        return self._cache[key]

    def _precision_matches(self, precision: str) -> bool:
        ours = PRECISION_CLASS.get(self.precision.lower(), self.precision.lower())
        return PRECISION_CLASS.get(precision.lower(), precision.lower()) == ours

    def _resolve(self, op: Op) -> tuple[str, float] | None:
        """(regressor name, seconds) for an op, or None when the profile does not cover it."""
        if op.kind == OpKind.COMM or not self._precision_matches(op.precision):
            return None
        direction = "fwd" if op.phase == Phase.FORWARD else "bwd"
        if op.kind == OpKind.GEMM and op.gemm is not None:
            return self._gemm(op)
        if op.kind == OpKind.ATTENTION and op.attention is not None:
            shape = op.attention
            if not shape.causal:
                return None  # the regressors are of causal attention; non-causal does twice the work per token pair
            if "alibi" in op.tags:
                return None  # a bias runs the Triton kernel, not the FlashAttention the samples timed
            seq = math.sqrt(shape.seq_q * shape.seq_kv)  # same causal work as seq_q x seq_kv
            head_dim = (shape.head_dim_qk + shape.head_dim_v) / 2
            name = f"attention.{direction}"
            # Flash attention's grid runs over (query tiles, batch x heads): batch and heads enter as one.
            t_us = self._time_us(name, (float(shape.batch * shape.heads), seq, head_dim))
            if t_us is None:
                return None
            # Attention has no weights: its whole backward is B (input gradient), W is empty.
            return name, 0.0 if op.phase == Phase.BACKWARD_WEIGHT else t_us * 1e-6
        if op.kind == OpKind.ELEMENTWISE:
            if op.bytes_moved <= 0:
                return None
            base, feature_bytes = next(
                ((b, x) for b, x in elementwise_features(op) if f"{b}.{direction}" in self.regressors), (None, 0.0)
            )
            if base is None:
                return None
            name = f"{base}.{direction}"
            t_us = self._time_us(name, (feature_bytes,))
            if t_us is None:
                return None
            # The samples time the whole backward of a norm (dx and dgamma) as one call: it is all B.
            return name, 0.0 if op.phase == Phase.BACKWARD_WEIGHT else t_us * 1e-6
        return None

    def _gemm(self, op: Op) -> tuple[str, float] | None:
        assert op.gemm is not None
        a, b, c, count = float(op.gemm.m), float(op.gemm.n), float(op.gemm.k), op.gemm.count
        if op.phase == Phase.FORWARD:
            t_us = self._time_us("gemm.fwd", (a, b, c))
            return None if t_us is None else ("gemm.fwd", count * t_us * 1e-6)
        # Recover the forward (m, n, k): dX is (m, k, n), dW is (k, n, m).
        m, n, k = (a, c, b) if op.phase == Phase.BACKWARD_INPUT else (c, b, a)
        t_backward_us = self._time_us("gemm.bwd", (m, n, k))
        if t_backward_us is None:
            return None
        t_input = self._time_us("gemm.fwd", (m, k, n))
        t_weight = self._time_us("gemm.fwd", (k, n, m))
        t_own = self._time_us("gemm.fwd", (a, b, c))
        if t_input is None or t_weight is None or t_own is None:
            share = 0.5  # both backward GEMMs have the forward's FLOPs
        else:
            share = t_own / (t_input + t_weight)
        return "gemm.bwd", count * t_backward_us * share * 1e-6

    def op_time_s(self, op: Op) -> float | None:
        """Seconds for one op on one GPU, or None when not covered or outside the sampled range."""
        resolved = self._resolve(op)
        return None if resolved is None else resolved[1]

    def covers(self, op: Op) -> str | None:
        """The regressor `op_time_s` uses for this op (for the breakdown's source column), or None."""
        resolved = self._resolve(op)
        return None if resolved is None else resolved[0]

    def has_collective(self, kind: CommKind) -> bool:
        """Whether any topology of this collective was fitted (reduce-scatter: of all-gather too)."""
        known = self._has_collective.get(kind)
        if known is None:
            names = [COLLECTIVE_NAMES.get(kind)]
            if kind is CommKind.REDUCE_SCATTER:
                names.append(COLLECTIVE_NAMES[CommKind.ALL_GATHER])
            known = any(r.kind == "collective" and r.name.split(".")[0] in names for r in self.regressors.values())
            self._has_collective[kind] = known
        return known

    @property
    def measured_gpus_per_node(self) -> int | None:
        """GPUs per node of the system the collectives were measured on: the most GPUs per node among the fitted
        topologies (a measurement places no more in a node than it has); None without collective regressors."""
        if not self._gpus_per_node:
            counts = [
                int(match.group(1))
                for r in self.regressors.values()
                if r.kind == "collective" and (match := re.search(r"\.\d+x(\d+)$", r.name))
            ]
            self._gpus_per_node.append(max(counts, default=None))
        return self._gpus_per_node[0]

    def collective(self, comm: CommShape, nodes: int, gpus_per_node: int) -> tuple[str, float] | Modelled:
        """(regressor, seconds) of one collective on a group spread over `nodes` x `gpus_per_node` GPUs, or why the
        analytic model applies: no regressor of this collective (`Modelled.NO_SAMPLES`), none for this topology
        (`OTHER_TIER`: no extrapolation), a message outside the sampled range (`OUT_OF_RANGE`).

        Features: all-reduce, all-to-all and send/recv use `comm.bytes`; all-gather (and reduce-scatter, costed as
        all-gather where it has no regressor of its own) the per-rank shard `comm.bytes / group_size`, the measured
        quantity. Which profile applies to which system: `cost.collectives.measured_collective`.
        """
        kind = COLLECTIVE_NAMES.get(comm.kind)
        if kind is None or comm.routing is not None or not self.has_collective(comm.kind):
            return Modelled.NO_SAMPLES  # the samples time plain collectives, not a deduplicating MoE dispatch
        if comm.kind != CommKind.SEND_RECV and comm.group_size != nodes * gpus_per_node:
            return Modelled.OTHER_TIER
        name = collective_regressor_name(kind, nodes, gpus_per_node)
        if comm.kind == CommKind.REDUCE_SCATTER and name not in self.regressors:
            name = collective_regressor_name("all_gather", nodes, gpus_per_node)
        if name not in self.regressors:
            return Modelled.OTHER_TIER
        per_rank = comm.kind in (CommKind.ALL_GATHER, CommKind.REDUCE_SCATTER)
        message_bytes = comm.bytes / comm.group_size if per_rank else comm.bytes
        t_us = self._time_us(name, (float(message_bytes),)) if message_bytes > 0 else None
        return Modelled.OUT_OF_RANGE if t_us is None else (name, t_us * 1e-6)

    def collective_time_s(self, comm: CommShape, nodes: int, gpus_per_node: int) -> float | None:
        """Seconds of `collective`, or None where the analytic model applies."""
        answer = self.collective(comm, nodes, gpus_per_node)
        return None if isinstance(answer, Modelled) else answer[1]

    def optimizer_time_s(self, params_on_rank: int) -> float | None:
        """Seconds for one optimizer (Adam) step over `params_on_rank` parameters, or None."""
        if params_on_rank <= 0:
            return None
        t_us = self._time_us("optimizer", (float(params_on_rank),))
        return None if t_us is None else t_us * 1e-6

    def __repr__(self) -> str:
        return f"Profile(gpu={self.gpu!r}, regressors={len(self.regressors)}, source={self.source!r})"


# Shipped profiles (package data under paraplan/cost/profiles), by GPU preset name.
SHIPPED_PROFILES: dict[str, str] = {
    "a100-sxm4-80gb": "a100-sxm4-80gb.json",
    "a100-80gb": "a100-sxm4-80gb.json",
    "gh200": "gh200.json",
}


def shipped_profile(gpu_preset: str) -> Profile | None:
    """The profile shipped with paraplan for a GPU preset ("a100-sxm4-80gb", "gh200"), or None."""
    file_name = SHIPPED_PROFILES.get(gpu_preset.lower())
    return None if file_name is None else load_shipped(file_name)


@cache
def load_shipped(file_name: str) -> Profile | None:
    """A profile shipped as package data (`profiles/<file_name>`), loaded once per process; None if absent."""
    resource = resources.files("paraplan.cost").joinpath("profiles", file_name)
    if not resource.is_file():
        return None
    return Profile.from_dict(json.loads(resource.read_text(encoding="utf-8")))
