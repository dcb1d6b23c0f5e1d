"""Fit a profile from measured samples: the outlier rule, then one regressor per operator and direction.

For each regressor the model family is chosen by 5-fold cross-validation (shuffled, fixed seed) among
- "gbm": gradient-boosted trees (squared loss on log time),
- "forest": a random forest,
- "physical": a polynomial in the log features, degree 1 (a power law, time ~ m^a n^b k^c) up to 2
  (3 for one feature), the degree chosen by the same cross-validation,
on log(features) plus, for GEMM and attention, log(work) (FLOPs up to a constant) as an extra tree input.
The score is the mean absolute percentage error (MAPE) of the predicted time. The lowest CV MAPE wins,
except that the physical fit is kept when within 0.5 percentage points of the best (it is smaller and
smoother between samples). A regressor is not shipped when its CV MAPE exceeds 25% (the core's analytic
model is used instead) or it has fewer than 6 samples.

scikit-learn is needed here (lazily imported); evaluating a fitted profile needs numpy only.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from paraplan.cost.profile import (
    MODEL_FAMILIES,
    LogModel,
    LogPolynomial,
    Profile,
    Regressor,
    TreeEnsemble,
    collective_regressor_name,
)
from paraplan.measure.analytic import AnalyticError, analytic_error, preset_for_device
from paraplan.measure.datasets import FEATURES, WORK_EXPONENTS, FileMapping, mapping_for, shape_columns, work
from paraplan.measure.outliers import OUTLIER_RULE, OutlierCounts, clean_rows
from paraplan.measure.samples import (
    SampleError,
    SampleFile,
    SampleTable,
    busy_reason,
    find_sample_files,
    read_sample_table,
    select_gpu,
)

MAX_CV_MAPE = 0.25
PHYSICAL_PREFERENCE = 0.005  # keep the physical fit when its CV MAPE is within this of the best
MIN_SAMPLES = 6
CV_FOLDS = 5

FIT_RULE = (
    f"one regressor per operator and direction on log features (+ log work for GEMM/attention); family chosen "
    f"by {CV_FOLDS}-fold shuffled CV MAPE among gbm, forest, physical (log-polynomial, degree by CV); physical "
    f"kept within {PHYSICAL_PREFERENCE * 100:.1f} pp of the best; not shipped above {MAX_CV_MAPE:.0%} CV MAPE "
    f"or below {MIN_SAMPLES} samples"
)


class MissingDependency(RuntimeError):
    """An optional package (scikit-learn, torch) that this command needs is not installed."""


def require(module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise MissingDependency(f"this command needs {module}: pip install 'paraplan[{extra}]'")


# ---- reports --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ColumnReport:
    """What the outlier rule did to one file's column."""

    label: str
    direction: str
    regressor: str
    counts: OutlierCounts


@dataclass(frozen=True, slots=True)
class RegressorReport:
    name: str
    kind: str
    direction: str
    n_samples: int
    n_dropped: int
    family: str | None = None
    cv_mape: float | None = None
    cv_mape_by_family: dict[str, float] = field(default_factory=dict)
    cv_mape_by_source: dict[str, float] = field(default_factory=dict)
    replicate_mape: float | None = None  # the data's own floor: see `replicate_mape`
    replicate_rows: int = 0
    analytic: AnalyticError | None = None  # the analytic cost model on the same samples (`measure.analytic`)
    shipped: bool = False
    reason: str = ""


@dataclass(frozen=True, slots=True)
class FitResult:
    profile: Profile
    regressors: list[RegressorReport]
    columns: list[ColumnReport]
    skipped: list[tuple[str, str]]  # (file label, reason)
    warnings: list[str] = field(default_factory=list)  # `fit_warnings`: also in the profile's provenance


def replicate_mape(features: np.ndarray, time_us: np.ndarray) -> tuple[float | None, int]:
    """How well the samples predict themselves: over rows whose features repeat exactly, the mean relative
    error of the median of the other rows with the same features (leave one out), and how many rows that is.
    No regressor of these features can beat it on average over those rows: it is the measurements' own
    run-to-run spread. (None, 0) when no features repeat."""
    groups: dict[tuple[float, ...], list[float]] = {}
    for row, t in zip(np.round(features, 6).tolist(), time_us.tolist(), strict=True):
        groups.setdefault(tuple(row), []).append(t)
    errors = [
        abs(float(np.median(times[:i] + times[i + 1 :])) / t - 1.0)
        for times in groups.values()
        if len(times) > 1
        for i, t in enumerate(times)
    ]
    return (float(np.mean(errors)), len(errors)) if errors else (None, 0)


# ---- model families ---------------------------------------------------------------------------------
def _poly_powers(n_inputs: int, degree: int) -> np.ndarray:
    terms = [p for p in itertools.product(range(degree + 1), repeat=n_inputs) if sum(p) <= degree]
    return np.asarray(sorted(terms, key=lambda p: (sum(p), [-v for v in p])), dtype=np.int64)


class _LogPolynomialFit:
    """Least squares (with a tiny ridge) of log time on a polynomial of the first `n_active` log inputs."""

    def __init__(self, degree: int, n_active: int | None = None) -> None:
        self.degree = degree
        self.n_active = n_active
        self.powers = np.zeros((0, 0), dtype=np.int64)
        self.coef = np.zeros(0)

    def _design(self, z: np.ndarray) -> np.ndarray:
        return np.prod(z[:, None, :] ** self.powers[None, :, :], axis=2)

    def fit(self, z: np.ndarray, y: np.ndarray) -> _LogPolynomialFit:
        active = z.shape[1] if self.n_active is None else self.n_active
        powers = _poly_powers(active, self.degree)
        self.powers = np.hstack([powers, np.zeros((len(powers), z.shape[1] - active), dtype=np.int64)])
        design = self._design(z)
        ridge = 1e-8 * len(y)
        gram = design.T @ design + ridge * np.eye(design.shape[1])
        self.coef = np.linalg.solve(gram, design.T @ y)
        return self

    def predict(self, z: np.ndarray) -> np.ndarray:
        return self._design(z) @ self.coef


class _PowerLawPlusTrees:
    """A power law (degree-1 log polynomial of the raw features) plus a tree ensemble on its residuals."""

    def __init__(self, trees: Any, n_active: int) -> None:
        self.base = _LogPolynomialFit(1, n_active)
        self.trees = trees

    def fit(self, z: np.ndarray, y: np.ndarray) -> _PowerLawPlusTrees:
        self.base.fit(z, y)
        self.trees.fit(z, y - self.base.predict(z))
        return self

    def predict(self, z: np.ndarray) -> np.ndarray:
        return self.base.predict(z) + self.trees.predict(z)


@dataclass(frozen=True, slots=True)
class Candidate:
    family: str
    label: str
    uses_work: bool  # trees see log(work) as an extra input
    make: Callable[[int], Any]  # n_samples -> unfitted estimator


def _candidates(n_features: int, seed: int) -> list[Candidate]:
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor

    multi = n_features > 1
    gbm_trees, gbm_depth = (300, 4) if multi else (100, 3)
    forest_trees, forest_depth = (30, 8) if multi else (20, 6)

    def gbm(n: int) -> _PowerLawPlusTrees:
        trees = GradientBoostingRegressor(
            n_estimators=min(gbm_trees, 10 * n),  # a few samples need few trees
            max_depth=gbm_depth,
            learning_rate=0.1,
            subsample=0.8 if n >= 20 else 1.0,
            random_state=seed,
        )
        return _PowerLawPlusTrees(trees, n_features)

    def forest(_n: int) -> _PowerLawPlusTrees:
        trees = RandomForestRegressor(
            n_estimators=forest_trees, max_depth=forest_depth, min_samples_leaf=2, random_state=seed
        )
        return _PowerLawPlusTrees(trees, n_features)

    candidates = [
        Candidate("gbm", f"power law + gbm {gbm_trees}x{gbm_depth}", True, gbm),
        Candidate("forest", f"power law + forest {forest_trees}x{forest_depth}", True, forest),
    ]
    for degree in range(1, (2 if multi else 3) + 1):
        candidates.append(
            Candidate("physical", f"log polynomial degree {degree}", False, lambda _n, d=degree: _LogPolynomialFit(d))
        )
    return candidates


def _inputs_matrix(kind: str, n_features: int, uses_work: bool) -> np.ndarray:
    rows = list(np.eye(n_features))
    if uses_work and n_features > 1:
        rows.append(np.asarray(WORK_EXPONENTS[kind], dtype=float))
    return np.asarray(rows)


def _complete_tree(tree: Any, depth: int, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An sklearn tree (max_depth <= depth) as heap-ordered complete arrays; leaves multiplied by `scale`."""
    internal = 2**depth - 1
    feature = np.full(internal, -1, dtype=np.int64)
    threshold = np.zeros(internal)
    leaf = np.zeros(2**depth)

    def walk(node: int, position: int, level: int) -> None:
        if level == depth:
            leaf[position - internal] = scale * float(tree.value[node].ravel()[0])
            return
        left, right = tree.children_left[node], tree.children_right[node]
        if left == -1:  # a leaf above full depth: "always left", both subtrees carry its value
            walk(node, 2 * position + 1, level + 1)
            walk(node, 2 * position + 2, level + 1)
            return
        feature[position] = tree.feature[node]
        threshold[position] = tree.threshold[node]
        walk(left, 2 * position + 1, level + 1)
        walk(right, 2 * position + 2, level + 1)

    walk(0, 0, 0)
    return feature, threshold, leaf


def _export(candidate: Candidate, estimator: Any, z: np.ndarray) -> tuple[LogPolynomial, TreeEnsemble | None]:
    if isinstance(estimator, _LogPolynomialFit):
        return LogPolynomial(powers=estimator.powers, coef=estimator.coef), None
    base = LogPolynomial(powers=estimator.base.powers, coef=estimator.base.coef)
    model = estimator.trees
    if candidate.family == "gbm":
        trees = [e.tree_ for e in model.estimators_[:, 0]]
        scale = model.learning_rate
    else:
        trees = [e.tree_ for e in model.estimators_]
        scale = 1.0 / len(trees)
    depth = max(1, max(t.max_depth for t in trees))
    arrays = [_complete_tree(t, depth, scale) for t in trees]
    feature = np.stack([a[0] for a in arrays])
    threshold = np.stack([a[1] for a in arrays])
    leaf = np.stack([a[2] for a in arrays])
    ensemble = TreeEnsemble(depth=depth, init=0.0, feature=feature, threshold=threshold, leaf=leaf)
    init = float(np.mean(model.predict(z) - ensemble.predict(z)))  # the boosting prior (mean residual)
    return base, TreeEnsemble(depth=depth, init=init, feature=feature, threshold=threshold, leaf=leaf)


def _mape(pred_log: np.ndarray, y_us: np.ndarray) -> np.ndarray:
    return np.abs(np.exp(pred_log) / y_us - 1.0)


def _out_of_fold(candidate: Candidate, z: np.ndarray, log_y: np.ndarray, seed: int) -> np.ndarray:
    from sklearn.model_selection import KFold

    folds = KFold(n_splits=min(CV_FOLDS, len(log_y)), shuffle=True, random_state=seed)
    prediction = np.empty_like(log_y)
    for train, test in folds.split(z):
        estimator = candidate.make(len(train)).fit(z[train], log_y[train])
        prediction[test] = estimator.predict(z[test])
    return prediction


# ---- fitting one regressor --------------------------------------------------------------------------
@dataclass
class _Pool:
    kind: str
    direction: str
    features: list[np.ndarray] = field(default_factory=list)
    times_us: list[np.ndarray] = field(default_factory=list)
    sources: list[np.ndarray] = field(default_factory=list)
    dropped: int = 0
    notes: dict[str, Any] = field(default_factory=dict)


def fit_regressor(
    name: str,
    kind: str,
    direction: str,
    features: np.ndarray,
    time_us: np.ndarray,
    sources: Sequence[str] | None = None,
    seed: int = 0,
    notes: dict[str, Any] | None = None,
    families: Sequence[str] = MODEL_FAMILIES,
) -> tuple[Regressor | None, RegressorReport]:
    """Choose a model family by cross-validation, refit on all rows, export. Features are raw (positive).

    `families` restricts the candidates (all three by default)."""
    n_samples, n_features = features.shape
    source_array = np.asarray(sources if sources is not None else ["samples"] * n_samples)
    base = {"name": name, "kind": kind, "direction": direction, "n_samples": n_samples, "n_dropped": 0}
    if n_samples < MIN_SAMPLES:
        return None, RegressorReport(**base, reason=f"only {n_samples} samples (need {MIN_SAMPLES})")
    log_x, log_y = np.log(features), np.log(time_us)
    scored: list[tuple[float, Candidate, np.ndarray]] = []
    for candidate in (c for c in _candidates(n_features, seed) if c.family in families):
        z = log_x @ _inputs_matrix(kind, n_features, candidate.uses_work).T
        prediction = _out_of_fold(candidate, z, log_y, seed)
        scored.append((float(_mape(prediction, time_us).mean()), candidate, prediction))
    by_family: dict[str, float] = {}
    for score, candidate, _ in scored:
        by_family[candidate.family] = min(score, by_family.get(candidate.family, np.inf))
    best_score, best, best_prediction = min(scored, key=lambda s: s[0])
    physical = [s for s in scored if s[1].family == "physical"]
    if physical and min(physical, key=lambda s: s[0])[0] <= best_score + PHYSICAL_PREFERENCE:
        best_score, best, best_prediction = min(physical, key=lambda s: s[0])
    errors = _mape(best_prediction, time_us)
    by_source = {s: float(errors[source_array == s].mean()) for s in sorted(set(source_array.tolist()))}
    floor, floor_rows = replicate_mape(features, time_us)
    report = RegressorReport(
        **base,
        family=best.family,
        cv_mape=best_score,
        cv_mape_by_family={k: round(v, 5) for k, v in by_family.items()},
        cv_mape_by_source=by_source if len(by_source) > 1 else {},
        replicate_mape=floor,
        replicate_rows=floor_rows,
    )
    if best_score > MAX_CV_MAPE:
        return None, replace(report, reason=f"CV MAPE {best_score:.0%} above {MAX_CV_MAPE:.0%}")
    inputs = _inputs_matrix(kind, n_features, best.uses_work)
    z = log_x @ inputs.T
    estimator = best.make(n_samples).fit(z, log_y)
    all_notes = dict(notes or {})
    all_notes.update(
        model=best.label,
        cv_mape_by_family=report.cv_mape_by_family,
        **({"cv_mape_by_source": {k: round(v, 5) for k, v in by_source.items()}} if len(by_source) > 1 else {}),
        **({"replicate_mape": round(floor, 5), "replicate_rows": floor_rows} if floor is not None else {}),
    )
    regressor = Regressor(
        name=name,
        kind=kind,
        direction=direction,
        features=FEATURES[kind],
        feature_min=tuple(float(v) for v in features.min(axis=0)),
        feature_max=tuple(float(v) for v in features.max(axis=0)),
        model=LogModel(best.family, inputs, *_export(best, estimator, z)),
        cv_mape=best_score,
        n_samples=n_samples,
        notes=all_notes,
    )
    # Store what the file will hold: numbers rounded as in the JSON.
    regressor = Regressor.from_dict(name, regressor.to_dict())
    return regressor, replace(report, shipped=True)


# ---- the whole profile ------------------------------------------------------------------------------
def _columns_of(file: SampleFile, table: SampleTable) -> list[tuple[str, str, np.ndarray]]:
    """(label, regressor base suffix, row mask) per topology: collective rows are split by nodes x GPUs."""
    rows = np.ones(len(table), dtype=bool)
    if file.category != "nccl":
        return [(file.label, "", rows)]
    nodes = table.column("nodes", default=file.nodes or 1)
    gpn = table.column("GPUsPerNode", default=file.gpus_per_node or 1)
    out = []
    for n, g in sorted(set(zip(nodes.astype(int).tolist(), gpn.astype(int).tolist(), strict=True))):
        mask = (nodes == n) & (gpn == g)
        label = file.label if file.nodes is not None else f"{file.label}[{n}x{g}]"
        out.append((label, f"{n}x{g}", mask))
    return out


def _regressor_name(mapping: FileMapping, direction: str, topology: str) -> str:
    if mapping.kind == "collective":
        nodes, gpn = (int(v) for v in topology.split("x"))
        return collective_regressor_name(mapping.base, nodes, gpn)
    if mapping.kind == "optimizer":
        return "optimizer"
    return f"{mapping.base}.{direction}"


def _pool_notes(mapping: FileMapping, direction: str) -> dict[str, Any]:
    if mapping.kind == "elementwise":
        return {"bytes": f"elementwise_traffic_bytes({mapping.base!r}, forward={direction == 'fwd'}, ...)"}
    if mapping.kind == "collective":
        per_rank = mapping.base in ("all_gather", "reduce_scatter")
        what = "per-rank shard (CommShape.bytes / group size)" if per_rank else "message (CommShape.bytes)"
        return {"bytes": what}
    if mapping.kind == "gemm" and direction == "bwd":
        return {"covers": "dX and dW of the forward shape together; split by the forward regressor"}
    return {}


def fit_profile(
    root: Path,
    gpu: str | None = None,
    source: str | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> FitResult:
    """Read the samples under `root`, clean them, fit every regressor and build the Profile.

    Raises SampleError for unusable input and MissingDependency without scikit-learn.
    """
    require("sklearn", "fit")
    say = progress or (lambda _message: None)
    gpu_name, files = select_gpu(find_sample_files(root), gpu)
    precisions = sorted({f.precision for f in files})
    if len(precisions) > 1:
        raise SampleError(f"samples of {gpu_name} mix precisions ({', '.join(precisions)}); keep one per folder")
    preset = preset_for_device(gpu_name)  # the analytic baseline's GPU (None: no baseline)
    aggregated = {f.op for f in files if f.category == "nccl" and f.nodes is not None}
    pools: dict[str, _Pool] = {}
    columns: list[ColumnReport] = []
    skipped: list[tuple[str, str]] = []
    for file in files:
        mapping = mapping_for(file.category, file.op)
        if isinstance(mapping, str):
            skipped.append((file.label, mapping))
            continue
        if file.category == "nccl" and file.nodes is None and file.op in aggregated:
            skipped.append((file.label, "union of the per-topology files of the same collective"))
            continue
        say(f"cleaning {file.label}")
        table = read_sample_table(file)
        shapes = shape_columns(table)
        for label, topology, rows in _columns_of(file, table):
            for direction, time_column in mapping.directions:
                name = _regressor_name(mapping, direction, topology)
                try:
                    features = mapping.features(table, direction)[rows]
                except SampleError:
                    raise
                except (KeyError, ValueError) as exc:
                    raise SampleError(f"{file.label}: cannot derive features ({exc})") from exc
                time_us = table.column(time_column)[rows]
                forward_us = None
                if direction == "bwd" and mapping.backward_at_least_forward:
                    forward_us = table.column("F_dur(us)")[rows]
                keep, counts = clean_rows(shapes[rows], time_us, work(mapping.kind, features), forward_us, seed)
                keep &= np.all(np.isfinite(features) & (features > 0), axis=1)
                columns.append(ColumnReport(label, direction, name, counts))
                pool = pools.setdefault(name, _Pool(mapping.kind, direction, notes=_pool_notes(mapping, direction)))
                pool.features.append(features[keep])
                pool.times_us.append(time_us[keep])
                pool.sources.append(np.full(int(keep.sum()), file.op, dtype=object))
                pool.dropped += counts.dropped
    if not pools:
        raise SampleError(f"no usable sample files for {gpu_name} under {root}")
    regressors: dict[str, Regressor] = {}
    reports: list[RegressorReport] = []
    for name, pool in sorted(pools.items()):
        say(f"fitting {name}")
        n_features = len(FEATURES[pool.kind])
        features = np.vstack(pool.features) if pool.features else np.zeros((0, n_features))
        time_us = np.concatenate(pool.times_us) if pool.times_us else np.zeros(0)
        sources = np.concatenate(pool.sources).tolist() if pool.sources else []
        regressor, report = fit_regressor(name, pool.kind, pool.direction, features, time_us, sources, seed, pool.notes)
        base = name.split(".")[0]
        baseline = analytic_error(pool.kind, base, pool.direction, features, time_us, preset, precisions[0])
        report = replace(report, n_dropped=pool.dropped, analytic=baseline)
        rejected = sorted({c.counts.reason for c in columns if c.regressor == name and c.counts.rejected})
        if len(time_us) == 0 and rejected:
            report = replace(report, reason="every sample column rejected by the outlier rule: " + "; ".join(rejected))
        reports.append(report)
        if regressor is not None:
            regressors[name] = regressor
    warnings = fit_warnings(root, reports)
    provenance = _provenance(root, reports, columns, skipped)
    if warnings:
        provenance["warnings"] = warnings
    profile = Profile(
        gpu=gpu_name,
        source=source or root.name,
        precision=precisions[0],
        regressors=regressors,
        created_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        provenance=provenance,
    )
    return FitResult(profile=profile, regressors=reports, columns=columns, skipped=skipped, warnings=warnings)


NEARLY_EMPTY_SHARE = 0.5
"""A profile that ships fewer than this share of the regressors its samples call for is nearly empty: most of a
projection with it falls back to the analytic model, which the profile was meant to replace."""


def fit_warnings(root: Path, reports: list[RegressorReport]) -> list[str]:
    """What makes a fitted profile doubtful: samples timed on a busy machine (`paraplan measure`'s `measure.json`
    under `root`), and a nearly empty profile (the regressors that did not pass the fit rule, by name)."""
    warnings = []
    for metadata in sorted(root.rglob("measure.json")):
        reason = busy_reason(metadata)
        if reason:
            where = metadata.parent.relative_to(root).as_posix()
            warnings.append(
                f"samples{'' if where == '.' else ' in ' + where} were measured on a busy machine: {reason}; "
                "their times carry other jobs' work (measure again when the machine is quiet)"
            )
    shipped = [r.name for r in reports if r.shipped]
    missing = [r.name for r in reports if not r.shipped]
    if reports and len(shipped) < NEARLY_EMPTY_SHARE * len(reports):
        warnings.append(
            f"nearly empty profile: {len(shipped)} of {len(reports)} regressors passed the fit rule; "
            f"not fitted: {', '.join(missing)} (the analytic model costs those operators)"
        )
    return warnings


def _provenance(
    root: Path, reports: list[RegressorReport], columns: list[ColumnReport], skipped: list[tuple[str, str]]
) -> dict[str, Any]:
    import sklearn

    from paraplan.measure.datasets import SAMPLE_VOCAB, VOCAB_DIVISIBLE_BY

    files: dict[str, dict[str, Any]] = defaultdict(dict)
    for column in columns:
        c = column.counts
        entry: dict[str, Any] = {"rows": c.rows, "dropped": c.dropped}
        if c.rejected:
            entry["rejected"] = c.reason
        else:
            entry.update(invalid=c.invalid, backward_lt_forward=c.physics, statistical=c.statistical)
        files[column.label][column.direction] = entry
    return {
        "tool": "paraplan fit (paraplan.measure.fit)",
        "samples": root.name,
        "outlier_rule": OUTLIER_RULE,
        "fit_rule": FIT_RULE,
        "sample_vocab": f"linear_final/cross-entropy vocabulary: {SAMPLE_VOCAB} padded to {VOCAB_DIVISIBLE_BY} x mp",
        "versions": {"numpy": np.__version__, "scikit-learn": sklearn.__version__},
        "files": dict(files),
        "skipped_files": {label: reason for label, reason in skipped},
        "not_shipped": {r.name: r.reason for r in reports if not r.shipped},
    }
