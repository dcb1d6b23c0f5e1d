"""Project every measured run and score the errors: per row, per source, source-balanced, ranking."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import date

from paraplan.errors import ConfigError
from paraplan.graph.partition import pipeline_split, split_stages
from paraplan.memory.model import MemoryResult
from paraplan.progress import StepCallback
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.result import Projection
from paraplan.validate import memory as memory_scores
from paraplan.validate.measured import Assumption, MeasuredRun, run_from_row
from paraplan.validate.memory import MemoryRow
from paraplan.validate.savers import memory_saver_for, states_recompute
from paraplan.validate.sources import MEMORY_METRIC, REPORT_ONLY_SOURCES, TIME_METRICS

Projector = Callable[[MeasuredRun], Projection]


def _run_of(row: dict[str, str], framework_version: date | None = None) -> MeasuredRun:
    """The row as a run; a cell the reader did not foresee costs this row only, with the reason."""
    try:
        return run_from_row(row, framework_version)
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
        raise ConfigError(f"row {row.get('id', '?')}: cannot be read ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class RowResult:
    id: str
    source: str
    metric: str
    measured: float
    predicted: float
    group: tuple[str, str, int]
    measured_step_s: float
    predicted_step_s: float
    attrs: tuple[tuple[str, str], ...] = ()  # gpu, arch, precision, framework, layout: for error analysis
    global_batch: int = 0
    assumed: tuple[Assumption, ...] = ()  # settings the source leaves out, taken from its framework's defaults
    microbatches: int = 0  # per pipeline and step (0: not known)
    cell: str = ""  # label of the runs that share everything but the global batch (`paraplan.validate.decompose`)
    cell_key: tuple = ()  # what they share: source, model, system and the training spec without its global batch
    depth_key: tuple = ()  # the cell's key without the model's depth (cells that differ only in it: `decompose`)
    depth_cell: str = ""  # label of those cells
    layers_per_rank: int = 0  # decoder layers on the busiest pipeline rank

    def group_key(self, fixed_batch: bool = False) -> tuple:
        """The ranking group: model, GPU and GPU count, and the global batch too when `fixed_batch`."""
        return (*self.group, self.global_batch) if fixed_batch else self.group

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class ValidationReport:
    rows: list[RowResult]  # step-time and throughput rows: the MAPE, the ranking and the decomposition
    skipped: list[tuple[str, str]]  # every row not projected (time and memory), with the reason
    memory_rows: list[MemoryRow] = field(default_factory=list)  # measured peak memory, scored apart
    memory_skipped: list[tuple[str, str]] = field(default_factory=list)  # the memory rows among `skipped`
    # rows their source's notes flag as a suspect measurement (`SOURCE_FLAG`): projected and shown with the flag's
    # words, scored apart (never in the MAPE, the fit or the ranking)
    flagged: list[tuple[RowResult, str]] = field(default_factory=list)

    def fitted_per_source(self) -> dict[str, dict[str, float]]:
        """`per_source` of the sources the calibration fits (`validate.sources.REPORT_ONLY_SOURCES` left out)."""
        return {s: v for s, v in self.per_source().items() if s not in REPORT_ONLY_SOURCES}

    @property
    def fitted_mape_pct(self) -> float:
        """Source-balanced MAPE over the sources the calibration fits: the figure it is judged by."""
        ps = self.fitted_per_source()
        return sum(v["mape_pct"] for v in ps.values()) / len(ps) if ps else float("nan")

    def report_only_per_source(self) -> dict[str, dict[str, float]]:
        """`per_source` of the report-only sources (scored, never fitted: forward in time)."""
        return {s: v for s, v in self.per_source().items() if s in REPORT_ONLY_SOURCES}

    def memory_per_source(self) -> dict[str, dict[str, float]]:
        return memory_scores.per_source(self.memory_rows)

    def per_source(self) -> dict[str, dict[str, float]]:
        by_source: dict[str, list[float]] = defaultdict(list)
        for r in self.rows:
            by_source[r.source].append(abs(r.error_pct))
        return {s: {"n": len(v), "mape_pct": sum(v) / len(v)} for s, v in sorted(by_source.items())}

    @property
    def mape_pct(self) -> float:
        """Source-balanced: the mean of per-source MAPEs (each source weighs the same)."""
        ps = self.per_source()
        return sum(v["mape_pct"] for v in ps.values()) / len(ps) if ps else float("nan")

    @property
    def row_mape_pct(self) -> float:
        return sum(abs(r.error_pct) for r in self.rows) / len(self.rows) if self.rows else float("nan")

    def kendall_tau(self, source_prefix: str = "", fixed_batch: bool = False) -> float:
        """Pooled Kendall tau over all pairs inside groups of the same model, GPU and GPU count (and global batch)."""
        rows = (r for r in self.rows if r.source.startswith(source_prefix))
        return kendall_within_groups(rows, fixed_batch)

    def fastest_gap_pct(
        self, source_prefix: str = "", fixed_batch: bool = False, per_sample: bool = False
    ) -> dict[str, float]:
        """Per group: how much slower (measured) the projected-fastest configuration is than the measured fastest.
        fixed_batch: groups also share the global batch (the tuner's question: the same job, another layout);
        otherwise a group's fastest run by step time is often simply its smallest batch. per_sample: fastest by
        time per sample (step time over global batch, i.e. throughput), which compares runs of different batches."""
        groups: dict[tuple, list[RowResult]] = defaultdict(list)
        for r in self.rows:
            if r.source.startswith(source_prefix):
                groups[r.group_key(fixed_batch)].append(r)

        def per(r: RowResult) -> float:
            return r.global_batch if per_sample and r.global_batch > 0 else 1.0

        gaps = {}
        for key, members in groups.items():
            if len(members) < 2:
                continue
            best = min(m.measured_step_s / per(m) for m in members)
            picked = min(members, key=lambda m: (m.predicted_step_s / per(m), m.id))
            gaps["/".join(map(str, key))] = 100.0 * (picked.measured_step_s / per(picked) - best) / best
        return gaps

    def assumed_by_source(self) -> dict[str, list[str]]:
        """Per source, each setting its rows were projected with that the source leaves out (a framework's default,
        or a choice the row's own data implies), with every value the rows took."""
        out: dict[str, dict[str, dict[str, None]]] = defaultdict(dict)
        for r in [*self.rows, *self.memory_rows]:
            for item in r.assumed:
                out[r.source].setdefault(item.key, {})[item.value_text] = None
        return {
            source: [f"{key}={'/'.join(values)}" if any(values) else key for key, values in items.items()]
            for source, items in sorted(out.items())
        }

    def mape_by(self, attribute: str) -> dict[str, dict[str, float]]:
        """MAPE and mean signed error grouped by an attribute (`ERROR_ATTRIBUTES`): where the model is wrong."""
        check_attribute(attribute)
        groups: dict[str, list[float]] = defaultdict(list)
        for r in self.rows:
            key = r.source if attribute == "source" else dict(r.attrs).get(attribute, "?")
            groups[key].append(r.error_pct)
        return {
            k: {"n": len(v), "mape_pct": sum(map(abs, v)) / len(v), "mean_error_pct": sum(v) / len(v)}
            for k, v in sorted(groups.items(), key=lambda kv: _natural(kv[0]))
        }

    def to_dict(self) -> dict:
        return {
            "rows": [
                {
                    "id": r.id,
                    "source": r.source,
                    "metric": r.metric,
                    "measured": r.measured,
                    "predicted": r.predicted,
                    "error_pct": r.error_pct,
                    "assumed": [str(item) for item in r.assumed],
                }
                for r in self.rows
            ],
            "skipped": [{"id": i, "reason": reason} for i, reason in self.skipped],
            "flagged": [{"id": r.id, "error_pct": r.error_pct, "flag": why} for r, why in self.flagged],
            "per_source": self.per_source(),
            "mape_pct": self.mape_pct,
            "row_mape_pct": self.row_mape_pct,
            "kendall_tau": self.kendall_tau(),
            # added keys: the step-time figure over the fitted sources, the report-only sources, and memory apart
            "fitted_sources_mape_pct": self.fitted_mape_pct,
            "report_only": {s: {**v, "why": REPORT_ONLY_SOURCES[s]} for s, v in self.report_only_per_source().items()},
            "memory": memory_scores.summary(self.memory_rows, self.memory_skipped),
        }


# What `ValidationReport.mape_by` can group rows by: their source, or an attribute of `_attributes`.
ERROR_ATTRIBUTES = (
    "source", "gpu", "arch", "model_family", "precision", "framework", "layout", "recompute", "sharding", "scale",
    "memory", "memory_use",
)  # fmt: skip


def check_attribute(attribute: str) -> None:
    if attribute not in ERROR_ATTRIBUTES:
        raise ConfigError(f"--by must be one of {', '.join(ERROR_ATTRIBUTES)} (got '{attribute}')")


def kendall_within_groups(rows: Iterable[RowResult], fixed_batch: bool = False) -> float:
    groups: dict[tuple, list[RowResult]] = defaultdict(list)
    for r in rows:
        groups[r.group_key(fixed_batch)].append(r)
    concordant = discordant = 0
    for members in groups.values():
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                a, b = members[i], members[j]
                dm = a.measured_step_s - b.measured_step_s
                dp = a.predicted_step_s - b.predicted_step_s
                if dm == 0 or dp == 0:
                    continue
                if (dm > 0) == (dp > 0):
                    concordant += 1
                else:
                    discordant += 1
    total = concordant + discordant
    return (concordant - discordant) / total if total else float("nan")


def default_projector(options: ProjectionOptions | None = None) -> Projector:
    def run(m: MeasuredRun) -> Projection:
        return project_specs(m.model, m.system, m.train, options)

    return run


def profile_projector(profile: str) -> Projector:
    """`auto`: rows on a GPU with a shipped profile use it, other rows stay analytic. A path: every row
    uses that profile where it covers an op (filter the rows with --source to one GPU's runs)."""
    from paraplan.cost.profiled import path_ref, shipped_ref

    given = None if profile == "auto" else path_ref(profile)  # a missing or malformed file: one error now

    def run(m: MeasuredRun) -> Projection:
        fitted = shipped_ref(m.system.gpu.name) if given is None else given
        return project_specs(m.model, m.system, m.train, ProjectionOptions(profile=fitted))

    return run


def step_time_of(metric: str, value: float, run: MeasuredRun) -> float:
    """Convert a row's metric to seconds per step (the ranking is on step time)."""
    if metric == "tokens_per_sec_per_gpu":
        return run.train.gbs * run.train.seq / (value * run.system.num_gpus)
    return value


# Brackets of the projected peak memory as a share of the GPU's HBM (`memory_use`). llm-foundry sizes its micro-batches
# to fill memory, and the fuller its rows are, the more the model overestimates their throughput (mean error -0.1%
# below 70%, +4.1% at 70-85%, +6.1% at 85-100%; 2026-12-02): the caching allocator's retries under memory pressure
# (a device sync and cudaFree/cudaMalloc each) are not modelled.
MEMORY_USE_BRACKETS = ((0.70, "0-70% of HBM"), (0.85, "70-85% of HBM"), (1.0, "85-100% of HBM"))


def _memory_use(memory: MemoryResult) -> str:
    share = memory.peak.total_bytes / memory.capacity_bytes
    return next((label for upper, label in MEMORY_USE_BRACKETS if share < upper), "over 100% of HBM")


def _attributes(run: MeasuredRun, memory: MemoryResult) -> tuple[tuple[str, str], ...]:
    t = run.train
    layout = "+".join(n for n, v in (("tp", t.tp), ("pp", t.pp), ("cp", t.cp), ("ep", t.ep), ("dp", t.dp)) if v > 1)
    return (
        ("gpu", run.system.gpu.name),
        ("arch", "moe" if run.model.is_moe else ("mla" if run.model.is_mla else "dense")),
        ("model_family", run.model.activation + "/" + run.model.norm),
        ("precision", t.precision),
        ("framework", t.framework),
        ("layout", layout or "single"),
        ("recompute", t.recompute_granularity),
        ("sharding", "fsdp" if t.shards_params else ("distopt" if t.shards_optimizer else "ddp")),
        ("scale", _scale(run.system.num_gpus, run.system.gpus_per_node)),
        # a measured run fitted in memory: "exceeds HBM" says it saved memory in a way the row does not state
        # (recompute, offloading), or that the memory model overestimates it
        ("memory", "fits" if memory.fits else "exceeds HBM"),
        ("memory_use", _memory_use(memory)),
    )


def _cell_label(run: MeasuredRun) -> str:
    t = run.train
    parts = [("tp", t.tp), ("pp", t.pp), ("vpp", t.vpp), ("cp", t.cp), ("ep", t.ep), ("dp", t.dp), ("mbs", t.mbs)]
    layout = " ".join(f"{name}{value}" for name, value in parts if value > 1 or name in ("dp", "mbs"))
    recompute = f" {t.recompute_granularity} recompute" if t.recompute_granularity != "none" else ""
    return f"{run.group[0]} / {run.group[1]} x{run.group[2]} / {layout} / {t.precision} seq {t.seq}{recompute}"


def _busiest_rank_layers(run: MeasuredRun) -> int:
    """Decoder layers on the pipeline rank that holds the most (over all its model chunks)."""
    t = run.train
    stages = split_stages(run.model, pipeline_split(t))
    return max(sum(stages[i].num_layers for i in row) for row in t.schedule.chunk_model_stage(t.pp, t.vpp))


def _depth_label(run: MeasuredRun) -> str:
    """The cell label with the model named by its width instead of its name (which holds its depth)."""
    m = run.model
    return f"h{m.hidden_size} ffn{m.ffn_hidden_size} a{m.num_attention_heads}" + _cell_label(run)[len(run.group[0]) :]


def _natural(label: str) -> tuple:
    """Sort key that orders the numbers inside labels by value ("5-16 GPUs" before "17-64 GPUs")."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", label))


def _scale(num_gpus: int, gpus_per_node: int) -> str:
    """One node, or the power-of-four bracket of the GPU count (synchronous jobs slow with size: `at_scale`)."""
    if num_gpus <= gpus_per_node:
        return "1 node"
    upper = 4
    while upper < num_gpus:  # integers: a float log can round a power of four up a bracket
        upper *= 4
    return f"{upper // 4 + 1}-{upper} GPUs"


def validate_rows(
    rows: list[dict[str, str]],
    source: str | None = None,
    projector: Projector | None = None,
    framework_version: date | None = None,
    progress: StepCallback | None = None,
) -> ValidationReport:
    """Project every row (of `source`, when given) and score it; `framework_version`: the release whose defaults the
    rows without a source date take (`validate.measured.run_from_row`); `progress` is told after each row."""
    projector = projector or default_projector()
    if source and not any(row.get("source") == source for row in rows):
        known = sorted({row.get("source", "") for row in rows} - {""})
        raise ConfigError(f"no rows of source '{source}'; the data has: {', '.join(known)}")
    results: list[RowResult] = []
    memory_rows: list[MemoryRow] = []
    skipped: list[tuple[str, str]] = []
    memory_skipped: list[tuple[str, str]] = []
    flagged: list[tuple[RowResult, str]] = []
    chosen = [row for row in rows if not source or row.get("source") == source]
    for done, row in enumerate(chosen, 1):
        if progress is not None:
            progress(done - 1, len(chosen), row.get("id", ""))  # told before each row (some `continue`) and at the end
        try:
            run = _run_of(row, framework_version)
            if run.metric not in (*TIME_METRICS, MEMORY_METRIC):
                raise ConfigError(f"unknown metric '{run.metric}'")
            proj = projector(run)
            if not proj.memory.fits and not states_recompute(row):  # it ran: with the saver a user would add
                saved = memory_saver_for(run)
                if saved is not None:
                    run, proj = saved, projector(saved)
        except ConfigError as exc:
            skipped.append((row.get("id", "?"), "; ".join(exc.problems)))
            if (row.get("metric") or "").strip() == MEMORY_METRIC:
                memory_skipped.append(skipped[-1])
            continue
        if run.metric == MEMORY_METRIC:  # scored apart: never in the step-time MAPE or the ranking
            notes = row.get("notes") or ""
            memory_rows.append(
                memory_scores.memory_row(run.id, run.source, run.value, notes, proj.memory, run.defaults_used)
            )
            continue
        predicted = proj.step_time_s if run.metric == "step_time_s" else proj.tokens_per_sec_per_gpu
        any_batch = replace(run.train, global_batch_size=0)
        result = RowResult(
            id=run.id,
            source=run.source,
            metric=run.metric,
            measured=run.value,
            predicted=predicted,
            group=run.group,
            measured_step_s=step_time_of(run.metric, run.value, run),
            predicted_step_s=proj.step_time_s,
            attrs=_attributes(run, proj.memory),
            global_batch=run.train.gbs,
            assumed=run.defaults_used,
            microbatches=run.train.num_microbatches,
            cell=_cell_label(run),
            cell_key=(run.source, run.model, run.system, any_batch),
            depth_key=(
                run.source,
                replace(run.model, name="", num_layers=1),
                run.system,
                any_batch,
            ),  # the model but its depth
            depth_cell=_depth_label(run),
            layers_per_rank=_busiest_rank_layers(run),
        )
        flag = source_flag(row.get("notes") or "")
        if flag:
            flagged.append((result, flag))
        else:
            results.append(result)
    if progress is not None:
        progress(len(chosen), len(chosen), "")
    return ValidationReport(results, skipped, memory_rows, memory_skipped, flagged)


# The word a row's notes use when its source (or whoever transcribed it) doubts the measurement (public.csv: "CAUTION:
# the 26.02.01 patch release lists ... for the identical configuration; the 26.02 value looks like a since-fixed
# regression"). Such a row is projected and shown, never scored: a constant fitted to it would encode the regression.
SOURCE_FLAG = "CAUTION:"


def source_flag(notes: str) -> str:
    """The flag's words in a row's notes ("" when the notes raise none)."""
    at = notes.find(SOURCE_FLAG)
    return notes[at + len(SOURCE_FLAG) :].split(";")[0].strip() if at >= 0 else ""
