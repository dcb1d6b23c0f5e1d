"""Fit the named calibration constants on measured runs, with leave-one-source-out cross-validation.

Constants are scoped per GPU family (GEMM and attention efficiency) or per framework (host launch time
per op, per-step overhead). The objective is the source-balanced MAPE (each source weighs the same);
large sources are subsampled with a fixed stride so that one fit stays cheap. A constant is only
fitted when the training sources contain rows of its scope; otherwise the documented default stays,
which is what a held-out source of an unseen GPU or framework gets.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from paraplan.cost.calibration import Calibration, calibration_for, family_of, representative_gpu
from paraplan.errors import ConfigError
from paraplan.progress import StepCallback
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.validate.measured import MeasuredRun, release_date, run_from_row
from paraplan.validate.ranking import GapBin, order_agreement
from paraplan.validate.report import ValidationReport, validate_rows
from paraplan.validate.sources import (
    GENERALIZATION_SPLITS,
    REPORT_ONLY_SOURCES,
    fitted_time_rows,
    is_fitted_source,
    is_time_row,
)

# (constant, scope, lower bound, upper bound, prior width): the width is how far (in natural-log units) the
# documented default is trusted. Efficiencies and the launch time per op are physical quantities whose
# defaults come from datasheets and kernel benchmarks (width 1); the per-step and per-micro-batch framework
# times are placeholders that no public source pins down (width 6: the data decides; at width 3 the pull
# towards the 50 ms placeholder still cost as much as the fit gained by moving a framework's step overhead to
# the few ms its rows show, so Megatron-DeepSpeed's stayed at 15 ms). The NVLink efficiency is a hardware quantity
# that nccl-tests measure (all-reduce bus bandwidth: 0.75-0.85 of the link on DGX A100 and H100), so it is trusted
# four times more (width 0.25): at width 1 a single outlier row (Megatron-Bridge's Qwen3-30B-A3B on 16 H100) took
# Hopper's to 0.59; at 0.25 every family's fits at 0.74-0.77 and the held-out error is lower (8.65% -> 8.59%).
# It is also bounded to the range nccl-tests span (0.7-0.9): when the fused bias-dropout-add made Megatron's
# layers faster, the fit took Ampere's to 0.69 to slow its TP runs back down (vTrain's single-node tp-only
# runs, projected 4% too fast, preferred it), a value no NVLink measurement shows; what those runs lack is not
# slower NVLink, and the bound leaves it visible as their error.
PARAMETERS: tuple[tuple[str, str, float, float, float], ...] = (
    ("gemm_efficiency", "family", 0.3, 0.95, 1.0),
    ("fp8_gemm_efficiency", "family", 0.2, 0.9, 1.0),
    ("attention_efficiency", "family", 0.15, 0.9, 1.0),
    ("attention_backward_efficiency", "family", 0.1, 0.9, 1.0),
    ("scale_up_efficiency", "family", 0.7, 0.9, 0.25),
    ("gpu_speed_cv", "family", 0.003, 0.15, 1.0),
    ("overlap_interference", "family", 0.01, 0.8, 1.0),
    ("host_launch_s", "framework", 2e-6, 1e-4, 1.0),
    ("step_overhead_s", "framework", 1e-3, 1.0, 6.0),
    ("microbatch_overhead_s", "framework", 1e-5, 0.05, 6.0),
)
# Penalty (in MAPE points) per unit of squared log-distance from the documented default, over the prior
# width squared: keeps the constants physical when the data cannot tell two of them apart.
PRIOR_WEIGHT = 0.25
ROUNDS = 2  # block-coordinate rounds: each GPU family's constants alone, then each framework's
# Rows per source in a fit (an even stride through larger sources). At 64 the stride through vTrain's 1,440
# single-node runs gave a sample whose MAPE was 0.6 points off the whole source's.
MAX_ROWS_PER_SOURCE = 128
# Mean relative change of the step time, when a framework constant doubles, below which that framework's rows
# cannot fit it and its documented default stays.
MIN_SENSITIVITY = 0.01


@dataclass(frozen=True)
class FitResult:
    table: dict[str, Any]  # the calibration.yaml content
    train_mape_pct: float
    per_source_train: dict[str, float]


FP8_NAMES = ("fp8", "fp8_cs", "fp8_blockwise", "mxfp8", "nvfp4")


def _relevant_keys(constant: str, scope: str, runs: Sequence[MeasuredRun]) -> set[str]:
    """Scope keys whose training rows the constant actually affects (others cannot be identified)."""
    keys: set[str] = set()
    for run in runs:
        fp8 = run.train.precision in FP8_NAMES
        if scope == "framework":
            keys.add(run.train.framework)
        elif constant == "fp8_gemm_efficiency" and fp8:
            keys.add(family_of(run.system.gpu.name))
        elif constant == "gemm_efficiency" and not fp8:
            keys.add(family_of(run.system.gpu.name))
        elif constant.startswith("attention") and run.train.attention_backend == "flash":
            keys.add(family_of(run.system.gpu.name))
        elif constant == "gpu_speed_cv" and run.system.num_gpus > 1:
            keys.add(family_of(run.system.gpu.name))
        elif constant == "scale_up_efficiency" and run.train.tp * run.train.ep * run.train.cp > 1:
            keys.add(family_of(run.system.gpu.name))
        elif constant == "overlap_interference" and _hides_comm(run):
            keys.add(family_of(run.system.gpu.name))
    return keys


def _hides_comm(run: MeasuredRun) -> bool:
    """Whether the model hides some of the run's collectives under compute (see `overlap_interference`)."""
    train = run.train
    return (
        (train.shards_params and not train.gathers_on_demand)
        or train.cp > 1
        or (train.ep > 1 and train.overlaps_ep)
        or (train.tp > 1 and train.tp_async_backward and not train.tp_comm_overlap)
    )


def _identifiable(constant: str, framework: str, runs: Sequence[MeasuredRun]) -> bool:
    """Whether a framework's rows can tell the constant's value: doubling it from the default moves their
    projected step times by `MIN_SENSITIVITY` or more on average. A per-step overhead of 50 ms is invisible
    in steps of a minute, and left free it drifts wherever the noise of such rows takes it (Megatron-DeepSpeed's
    went to 0.12 s when fitted on vTrain's multi-node runs alone)."""
    members = [m for m in runs if m.train.framework == framework]
    base = _projector({})
    doubled = _projector({"framework": {framework: {constant: 2 * _default_value(constant, "framework", framework)}}})
    changes = []
    for m in members:
        try:
            changes.append(abs(doubled(m).step_time_s / base(m).step_time_s - 1.0))
        except Exception:  # noqa: BLE001 - a row the projection rejects says nothing
            continue
    return bool(changes) and sum(changes) / len(changes) >= MIN_SENSITIVITY


def subsample(rows: list[dict[str, str]], limit: int = MAX_ROWS_PER_SOURCE) -> list[dict[str, str]]:
    by_source: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_source[row["source"]].append(row)
    out: list[dict[str, str]] = []
    for members in by_source.values():
        stride = max(1, math.ceil(len(members) / limit))
        out.extend(members[::stride])
    return out


def _projector(table: dict[str, Any]):
    cache: dict[tuple[str, str], Calibration] = {}

    def run(m: MeasuredRun):
        key = (m.system.gpu.name, m.train.framework)
        if key not in cache:
            cache[key] = calibration_for(key[0], key[1], table=table)
        return project_specs(m.model, m.system, m.train, ProjectionOptions(calibration=cache[key]))

    return run


def _projectable(rows: list[dict[str, str]]) -> list[tuple[dict[str, str], MeasuredRun]]:
    """The rows a projection can be built from, each with its run."""
    out = []
    for row in rows:
        try:
            out.append((row, run_from_row(row)))
        except Exception:  # noqa: BLE001 - incomplete rows are listed by validate, not fitted
            continue
    return out


def _complete(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [row for row, _ in _projectable(rows)]


def _fittable_runs(rows: list[dict[str, str]]) -> list[tuple[dict[str, str], MeasuredRun]]:
    return [
        (row, run) for row, run in _projectable(fitted_time_rows(rows)) if (row.get("complete") or "1").strip() != "0"
    ]


def fittable(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Rows the constants are fitted on: step-time and throughput rows (memory rows are scored apart) of the
    sources that are not report-only (`validate.sources.REPORT_ONLY_SOURCES`: Megatron-Bridge 26.02 is the forward-
    in-time test), projectable, and complete as their source states them. A row the source marks incomplete
    (complete=0) but whose framework's semantics fill the gap (Megatron-LM 2020's batch per model instance) is
    validated, not fitted: a constant fitted on it would learn the assumption as well. With them in the fit, Volta's
    GEMM efficiency went to its 0.95 bound and Megatron-LM's step overhead to 99 ms, which cost Korthikanti's 2022
    rows 1.3 points (3.9% -> 5.1%)."""
    return [row for row, _ in _fittable_runs(rows)]


def fit(rows: list[dict[str, str]], max_evaluations: int = 400, progress: StepCallback | None = None) -> FitResult:
    """Fit the constants on `rows` (all of them; subsample first if they are many).

    Block-coordinate descent on the source-balanced MAPE plus the prior: each GPU family's constants, then
    each framework's, alone (Powell) on the sources with rows of that family or framework (its constants touch
    no other row, so that is the whole objective's change), `ROUNDS` times. One Powell over all constants at
    once stalls in this many dimensions, and one over all the family constants (22 of them) spent its
    `max_evaluations` on the first directions: the NVLink efficiencies and the chip spread never moved. The
    blocks are small and separable. `max_evaluations` bounds each block's search. `progress` is told after each
    block's search."""
    from scipy.optimize import minimize

    pairs = _fittable_runs(rows)
    rows = [row for row, _ in pairs]
    runs = [run for _, run in pairs]
    names: list[tuple[str, str, str]] = []
    start: list[float] = []
    bounds: list[tuple[float, float]] = []
    widths: list[float] = []
    for constant, scope, lo, hi, width in PARAMETERS:
        for key in sorted(_relevant_keys(constant, scope, runs)):
            if scope == "framework" and not _identifiable(constant, key, runs):
                continue
            names.append((scope, key, constant))
            default = _default_value(constant, scope, key)
            start.append(math.log(min(max(default, lo), hi)))
            bounds.append((math.log(lo), math.log(hi)))
            widths.append(width)

    def table_of(x: Sequence[float]) -> dict[str, Any]:
        table: dict[str, Any] = {"family": {}, "framework": {}}
        for (scope, key, constant), value in zip(names, x, strict=True):
            table[scope].setdefault(key, {})[constant] = float(math.exp(value))
        return table

    def prior(x: Sequence[float]) -> float:
        return PRIOR_WEIGHT * sum(((xi - si) / wi) ** 2 for xi, si, wi in zip(x, start, widths, strict=True))

    def minimise_block(x: list[float], block: list[int], block_rows: list[dict[str, str]], sources: int) -> None:
        """Move the constants at `block` (in place) to minimise the objective on `block_rows` (whose
        source-balanced MAPE, scaled by their share of all `sources`, is the objective's part they touch)."""
        share = len({r["source"] for r in block_rows}) / sources

        def objective(y: Sequence[float]) -> float:
            trial = list(x)
            for i, value in zip(block, y, strict=True):
                trial[i] = value
            return share * validate_rows(block_rows, projector=_projector(table_of(trial))).mape_pct + prior(trial)

        result = minimize(objective, [x[i] for i in block], method="Powell", bounds=[bounds[i] for i in block],
                          options={"maxfev": max_evaluations, "xtol": 1e-2, "ftol": 1e-4})  # fmt: skip
        for i, value in zip(block, result.x, strict=True):
            x[i] = float(value)

    x = list(start)
    sources = len({r["source"] for r in rows})
    scope_of_run = {"family": lambda run: family_of(run.system.gpu.name), "framework": lambda run: run.train.framework}
    blocks = sorted({(scope, key) for scope, key, _ in names}, key=lambda b: (b[0] != "family", b[1]))
    for round_index in range(ROUNDS):
        for block_index, (scope, key) in enumerate(blocks):
            block = [i for i, name in enumerate(names) if name[:2] == (scope, key)]
            members = {r["source"] for r, run in zip(rows, runs, strict=True) if scope_of_run[scope](run) == key}
            minimise_block(x, block, [r for r in rows if r["source"] in members], sources)
            if progress is not None:
                progress(round_index * len(blocks) + block_index + 1, ROUNDS * len(blocks), f"{scope} {key}")
    table = table_of(x)
    report = validate_rows(rows, projector=_projector(table))
    return FitResult(table, report.mape_pct, {k: v["mape_pct"] for k, v in report.per_source().items()})


def _default_value(constant: str, scope: str, key: str) -> float:
    if scope == "family":
        return float(getattr(calibration_for(representative_gpu(key), "", table={}), constant))
    return float(getattr(calibration_for("a100-sxm4-80gb", key, table={}), constant))


@dataclass(frozen=True)
class CrossValidation:
    held_out: dict[str, float]  # source -> MAPE when that source was left out of the fit
    fitted: dict[str, float]  # source -> MAPE with the fit on all sources
    final: FitResult
    scope: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # source -> its GPU families, frameworks
    # how often held-out projections order two layouts of one job right, by their projected gap
    ranking: list[GapBin] = field(default_factory=list)
    # scored with the final fit, never fitted: report-only sources' step-time MAPE, memory sources' MAPE
    report_only: dict[str, float] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)

    @property
    def held_out_mape_pct(self) -> float:
        return sum(self.held_out.values()) / len(self.held_out)

    @property
    def fitted_mape_pct(self) -> float:
        return sum(self.fitted.values()) / len(self.fitted)


def source_scope(rows: list[dict[str, str]]) -> dict[str, dict[str, list[str]]]:
    """Per source, the GPU families and frameworks of its projectable rows: which projections its error speaks
    for (`paraplan.validate.evidence`)."""
    scope: dict[str, dict[str, set[str]]] = defaultdict(lambda: {"families": set(), "frameworks": set()})
    for row in rows:
        try:
            run = run_from_row(row)
        except ConfigError:  # a row its source leaves incomplete speaks for nothing
            continue
        scope[run.source]["families"].add(family_of(run.system.gpu.name))
        scope[run.source]["frameworks"].add(run.train.framework)
    return {source: {k: sorted(v) for k, v in parts.items()} for source, parts in sorted(scope.items())}


# A held-out fit: fit on the first rows (subsampled), score the second with that fit.
HeldOutJob = tuple[list[dict[str, str]], list[dict[str, str]], int]


def _held_out(job: HeldOutJob) -> ValidationReport:
    train, test, max_evaluations = job
    fitted = fit(subsample(train), max_evaluations)
    return validate_rows(test, projector=_projector(fitted.table))


def _run_jobs(
    jobs: list[HeldOutJob], workers: int, on_done: Callable[[int], None] | None = None
) -> list[ValidationReport]:
    """The held-out fits, in a process pool when `workers` > 1; `on_done(i)` after job `i` finishes."""
    if workers > 1 and len(jobs) > 1:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(_held_out, job): i for i, job in enumerate(jobs)}
            for future in as_completed(futures):
                if on_done is not None:
                    on_done(futures[future])
            return [future.result() for future in futures]
    reports = []
    for i, job in enumerate(jobs):
        reports.append(_held_out(job))
        if on_done is not None:
            on_done(i)
    return reports


class _Counter:
    """Held-out fits finished across the calls of one calibration, told to a `StepCallback`."""

    def __init__(self, total: int, progress: StepCallback | None) -> None:
        self.total, self.done, self.progress = total, 0, progress

    def labelled(self, labels: list[str]) -> Callable[[int], None]:
        def on_done(i: int) -> None:
            self.done += 1
            if self.progress is not None:
                self.progress(self.done, self.total, labels[i])

        return on_done


# The generalization splits of `paraplan calibrate` (issue 32): each holds a group of runs out of the fit and scores
# it. "source": one publication at a time; "gpu_generation": one GPU family (`family_of`: Volta, Ampere, Hopper,
# Blackwell, ...), its fitted constants fall back to their neighbours' or defaults; "framework": one framework's rows
# (its per-framework constants stay at their documented defaults); "forward": the releases from `FORWARD_FROM` on,
# fitted on those before it.
SPLITS = ("source", *GENERALIZATION_SPLITS)
# Megatron-Bridge 26.02 (February 2026) is the forward set: every fitted source is a release before 2026
# (`validate.measured.release_date`; an undated row counts as before: vTrain MICRO'24, Megatron-LM's functional tests).
FORWARD_FROM = date(2026, 1, 1)


def _split_key(split: str, row: dict[str, str], run: MeasuredRun, forward_from: date) -> str:
    if split == "source":
        return run.source
    if split == "gpu_generation":
        return family_of(run.system.gpu.name)
    if split == "framework":
        return run.train.framework
    if split == "forward":
        day = release_date(row)
        return f"from {forward_from.isoformat()}" if day and day >= forward_from else "before"
    raise ConfigError(f"unknown split '{split}': choose from {', '.join(SPLITS)}")


def split_jobs(
    rows: list[dict[str, str]], split: str, max_evaluations: int, forward_from: date = FORWARD_FROM
) -> list[tuple[str, HeldOutJob]]:
    """(held-out group, job) of one split over the time rows of `rows`. Leave-one-out splits hold out each group of
    the fitted rows in turn; the forward split fits on the rows before `forward_from` and scores every time row from
    then on, report-only sources included (`fit` keeps those out of any fit)."""
    every = [(row, run) for row, run in _projectable(rows) if is_time_row(row)]
    keyed = [(_split_key(split, row, run, forward_from), row) for row, run in every]
    if split == "forward":
        test = [row for key, row in keyed if key != "before"]
        train = [row for key, row in keyed if key == "before"]
        return [(f"from {forward_from.isoformat()}", (train, test, max_evaluations))] if test and train else []
    fitted = [(key, row) for key, row in keyed if is_fitted_source(row["source"])]
    groups = sorted({key for key, _ in fitted})
    return [
        (group, ([r for k, r in fitted if k != group], [r for k, r in fitted if k == group], max_evaluations))
        for group in groups
    ]


@dataclass(frozen=True)
class SplitScores:
    """One split's held-out error: per held-out group, each source's rows in it (count and MAPE)."""

    split: str
    held_out: dict[str, dict[str, dict[str, float]]]  # group -> source -> {"n", "mape_pct"}, fitted without the group

    def group_mape_pct(self, group: str) -> float:
        """A group's source-balanced MAPE."""
        per = self.held_out[group]
        return sum(v["mape_pct"] for v in per.values()) / len(per) if per else float("nan")

    def per_source(self) -> dict[str, float]:
        """Each source's MAPE over its rows, each scored in the fit that held its group out."""
        total: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for per in self.held_out.values():
            for source, v in per.items():
                total[source][0] += v["n"]
                total[source][1] += v["n"] * v["mape_pct"]
        return {source: err / n for source, (n, err) in sorted(total.items()) if n}

    @property
    def mape_pct(self) -> float:
        """Source-balanced MAPE over every held-out row (each row is held out once in a split)."""
        per = self.per_source()
        return sum(per.values()) / len(per) if per else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {
            "mape_pct": round(self.mape_pct, 2),
            "per_source": {s: round(v, 2) for s, v in self.per_source().items()},
            "groups": {
                group: {
                    "mape_pct": round(self.group_mape_pct(group), 2),
                    "per_source": {s: round(v["mape_pct"], 2) for s, v in sorted(per.items())},
                }
                for group, per in sorted(self.held_out.items())
            },
        }


def generalization_splits(
    rows: list[dict[str, str]],
    splits: Sequence[str] = SPLITS[1:],
    max_evaluations: int = 400,
    workers: int = 1,
    forward_from: date = FORWARD_FROM,
    progress: StepCallback | None = None,
    counter: _Counter | None = None,
) -> dict[str, SplitScores]:
    """Score each split's held-out groups (`split_jobs`), all held-out fits in one pool; `progress` is told after
    each fit (`counter`: the count of a calibration this is part of)."""
    for split in splits:
        if split not in SPLITS:
            raise ConfigError(f"unknown split '{split}': choose from {', '.join(SPLITS)}")
    labelled = [
        (split, group, job) for split in splits for group, job in split_jobs(rows, split, max_evaluations, forward_from)
    ]
    counter = counter or _Counter(len(labelled), progress)
    on_done = counter.labelled([f"without {split} {group}" for split, group, _ in labelled])
    reports = _run_jobs([job for _, _, job in labelled], workers, on_done)
    out: dict[str, SplitScores] = {split: SplitScores(split, {}) for split in splits}
    for (split, group, _), report in zip(labelled, reports, strict=True):
        out[split].held_out[group] = report.per_source()
    return out


def leave_one_source_out(
    rows: list[dict[str, str]],
    max_evaluations: int = 400,
    workers: int = 1,
    progress: StepCallback | None = None,
    counter: _Counter | None = None,
) -> CrossValidation:
    """Fit without each source in turn and score it; then fit on all. Only the rows `fittable` allows take part;
    the report-only sources and the memory rows are scored with the final fit (`CrossValidation.report_only`,
    `.memory`). `workers` > 1 runs the held-out fits in a process pool. `progress` is told after each fit
    (`counter`: the count of a calibration this is part of)."""
    every = _complete(rows)
    rows = _complete(fitted_time_rows(every))
    labelled = split_jobs(rows, "source", max_evaluations)
    counter = counter or _Counter(len(labelled) + 1, progress)
    done = _run_jobs([job for _, job in labelled], workers, counter.labelled([f"without {s}" for s, _ in labelled]))
    reports = {source: report for (source, _), report in zip(labelled, done, strict=True)}
    held_out = {source: report.mape_pct for source, report in reports.items()}
    ranking = order_agreement(row for report in reports.values() for row in report.rows)
    final = fit(subsample(rows), max_evaluations)
    counter.labelled(["on every source"])(0)
    full = validate_rows(rows, projector=_projector(final.table))
    fitted_per_source = {k: v["mape_pct"] for k, v in full.per_source().items()}
    fitted_ids = {r["id"] for r in rows}
    rest = validate_rows([r for r in every if r["id"] not in fitted_ids], projector=_projector(final.table))
    report_only = {k: v["mape_pct"] for k, v in rest.report_only_per_source().items()}
    memory = {k: v["mape_pct"] for k, v in rest.memory_per_source().items()}
    return CrossValidation(held_out, fitted_per_source, final, source_scope(every), ranking, report_only, memory)


def not_fitted_table(report: ValidationReport, data_name: str) -> dict[str, Any]:
    """calibration.yaml's `not_fitted` block: the sources scored with the shipped constants but never fitted (the
    report-only sources' step-time MAPE and the memory sources' MAPE), as `report` measured them."""
    return not_fitted_block(
        {k: v["mape_pct"] for k, v in report.report_only_per_source().items()},
        {k: v["mape_pct"] for k, v in report.memory_per_source().items()},
        data_name,
    )


def not_fitted_block(report_only: dict[str, float], memory: dict[str, float], data_name: str) -> dict[str, Any]:
    reasons = "; ".join(f"{s}: {REPORT_ONLY_SOURCES[s]}" for s in sorted(report_only))
    return {
        "source": f"scored with the constants above on {data_name} ({date.today().isoformat()}), not fitted: the "
        f"report-only sources ({reasons}) and measured peak memory per GPU (memory_gib rows, scored apart from "
        "step time)",
        "step_time_mape_pct": {k: round(v, 2) for k, v in sorted(report_only.items())},
        "memory_mape_pct": {k: round(v, 2) for k, v in sorted(memory.items())},
    }


def fitted_constants(table: dict[str, Any]) -> dict[str, int]:
    """How many constants a fitted table holds, per scope ("family", "framework") and in all ("total")."""
    counts = {
        scope: sum(len(values or {}) for values in (table.get(scope) or {}).values())
        for scope in ("family", "framework")
    }
    return {**counts, "total": sum(counts.values())}


def provenance_table(
    cv: CrossValidation, data_name: str, splits: dict[str, SplitScores] | None = None
) -> dict[str, Any]:
    table = dict(cv.final.table)
    table["source"] = (
        f"fitted by `paraplan calibrate` on {data_name} ({date.today().isoformat()}): Powell on the "
        f"source-balanced MAPE, at most {MAX_ROWS_PER_SOURCE} rows per source (framework constants the rows "
        f"cannot tell keep their defaults); fitted MAPE "
        f"{cv.fitted_mape_pct:.1f}%, leave-one-source-out MAPE {cv.held_out_mape_pct:.1f}%"
    )
    table["held_out_mape_pct"] = {k: round(v, 2) for k, v in cv.held_out.items()}
    table["fitted_mape_pct"] = {k: round(v, 2) for k, v in cv.fitted.items()}
    table["source_scope"] = cv.scope
    if splits:
        table["generalization_mape_pct"] = {split: scores.to_dict() for split, scores in splits.items()}
    if cv.report_only or cv.memory:
        table["not_fitted"] = not_fitted_block(cv.report_only, cv.memory, data_name)
    if cv.ranking:
        table["ranking_resolution"] = {
            "source": f"held-out projections of {data_name}: pairs of runs of one job (same source, model, GPU, "
            "GPU count and global batch) by projected gap; agree_pct: the projected-faster measured faster",
            "bins": [b.to_dict() for b in cv.ranking],
        }
    return table


def calibration_counter(
    rows: list[dict[str, str]],
    splits: Sequence[str],
    max_evaluations: int,
    forward_from: date = FORWARD_FROM,
    progress: StepCallback | None = None,
) -> _Counter:
    """The count of fits of a whole calibration (`leave_one_source_out`, then `generalization_splits` over
    `splits`), to pass to both as `counter` so that `progress` sees one total."""
    every = _complete(rows)
    fits = len(split_jobs(_complete(fitted_time_rows(every)), "source", max_evaluations)) + 1
    fits += sum(len(split_jobs(rows, split, max_evaluations, forward_from)) for split in splits)
    return _Counter(fits, progress)
