"""Evaluating candidates: legality (the one validator), the memory pre-filter, then the core projection.

A *group* is every recompute variant of one structure (same layout, batch, sharding, schedule, flags). Its
variants are tried cheapest-in-time first; a variant that fits makes the ones it dominates pointless:
no recompute beats any recompute, full recompute of n layers per chunk beats full recompute of more, and
selective beats full recompute of every layer (each recomputes a subset of the other's work and keeps more
memory). `prune=False` evaluates every variant (multi-objective runs want the memory-saving ones too).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from paraplan.cost.calibration import calibration_for
from paraplan.errors import ConfigError
from paraplan.memory.model import GIB, MemoryResult
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.result import Projection
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check
from paraplan.tune.candidate import Candidate, TuneProblem, to_training
from paraplan.tune.legality import candidate_problems, spec_problems
from paraplan.tune.memfilter import GroupMemory, MemoryFilter, StageCache
from paraplan.tune.space import SearchSpace


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One projected candidate: the figures the tuner ranks by."""

    candidate: Candidate
    step_time_s: float
    tokens_per_sec_per_gpu: float
    mfu: float
    peak_gib: float
    fits: bool
    source: str = ""
    train: TrainingSpec | None = None
    """The exact training spec, when the candidate was given as one (`--candidates`); else derived."""

    @property
    def tokens_per_sec(self) -> float:
        """Cluster throughput."""
        return self.tokens_per_sec_per_gpu * self.candidate.num_gpus


@dataclass(slots=True)
class TaskReport:
    """What one batch of work produced, with the count of each kind of rejection."""

    evaluations: list[Evaluation] = field(default_factory=list)
    illegal: int = 0
    memory_rejected: int = 0
    dominated: int = 0
    groups: int = 0
    groups_done: list[str] = field(default_factory=list)
    tag: int = 0
    rejections: list[tuple[Candidate, str]] = field(default_factory=list)
    """Why candidates given one by one (LLM proposals, candidate lists) were not evaluated."""
    failures: list[str] = field(default_factory=list)
    """Why the task could not run (its worker process died each time it was run)."""
    failed_items: int = 0
    """Items (structures, candidates) of the task left unevaluated by a failure."""
    stopped: bool = False
    """The task's deadline passed before all its items were done (the report holds those that were)."""


@dataclass(frozen=True, slots=True)
class Task:
    """A unit of work for an executor: groups (structures), single candidates, or exact training specs."""

    kind: str  # "groups" | "candidates" | "specs"
    items: tuple
    source: str
    prune: bool = True
    record_groups: bool = False
    """Return the finished groups' keys (for a study file's resume)."""
    tag: int = 0
    """Handed back in the report, so the caller knows which of its requests it answers."""
    deadline_unix: float | None = None
    """Wall-clock time (`time.time()`, comparable across processes and machines) after which the task takes no
    further item: a time limit then holds within one projection, not one task."""


def _past(deadline_unix: float | None) -> bool:
    return deadline_unix is not None and time.time() >= deadline_unix


def evaluation_of(c: Candidate, projection: Projection, source: str, train: TrainingSpec | None = None) -> Evaluation:
    return Evaluation(
        candidate=c,
        step_time_s=projection.step_time_s,
        tokens_per_sec_per_gpu=projection.tokens_per_sec_per_gpu,
        mfu=projection.mfu,
        peak_gib=projection.memory.peak.total_bytes / GIB,
        fits=projection.memory.fits,
        source=source,
        train=train,
    )


def dominates(fitting: tuple[str, int | None], other: tuple[str, int | None]) -> bool:
    """Whether a fitting recompute variant (mode, layers) makes `other` of the same group pointless."""
    mode, layers = fitting
    other_mode, other_layers = other
    if mode == "none":
        return True
    if mode == "full" and other_mode == "full":
        return (layers if layers is not None else 1 << 30) <= (other_layers if other_layers is not None else 1 << 30)
    return mode == "selective" and other_mode == "full" and other_layers is None


class Evaluator:
    """Evaluates tasks in one process. Its caches (and the core's per-layer caches) live as long as it does."""

    def __init__(self, problem: TuneProblem, space: SearchSpace, memory_filter: MemoryFilter | None = None) -> None:
        self.problem = problem
        self.space = space
        self.memory_filter = memory_filter or MemoryFilter()
        self._options: dict[tuple[str, str], ProjectionOptions] = {}
        self._cache: dict[Candidate, Evaluation] = {}
        self._cached_structures: set[Candidate] = set()
        """The structures (recompute none) of the candidates in `_cache`: a group of none of them skips the lookups."""
        self._stages = StageCache(problem.model)

    # ------------------------------------------------------------------ one candidate
    def screen(self, c: Candidate, train: TrainingSpec | None = None) -> tuple[TrainingSpec | None, str]:
        """(resolved training spec, "") when legal and admitted by the memory filter; (None, reason) otherwise."""
        resolved, reason, _ = self._screen(c, train)
        return resolved, reason

    def _screen(self, c: Candidate, train: TrainingSpec | None) -> tuple[TrainingSpec | None, str, MemoryResult | None]:
        """`screen`, with the memory per rank the default filter found for the resolved spec (the projection takes it,
        as the group path's do); None with another filter."""
        problems = spec_problems(self.problem, c.num_gpus, train) if train else candidate_problems(self.problem, c)
        if problems:
            return None, "illegal: " + "; ".join(problems), None
        system = self.problem.system(c.num_gpus)
        resolved = check(self.problem.model, system, train or to_training(self.problem, c))
        memory = None
        if type(self.memory_filter) is MemoryFilter:  # the projection's memory model: its memory, kept
            variant = (resolved.recompute_granularity, resolved.recompute_num_layers)
            group = GroupMemory(self.problem.model, system, resolved, self._stages)
            if group.fits(*variant):
                memory = group.memory(*variant)
        elif self.memory_filter.admits(self.problem.model, system, resolved):
            return resolved, "", None
        if memory is None:
            return None, "memory: rejected by the pre-filter (estimate above the usable HBM)", None
        return resolved, "", memory

    def options_for(self, system: SystemSpec, train: TrainingSpec) -> ProjectionOptions:
        """The core's default options with the calibration looked up once per GPU and framework and the problem's
        fitted profile, without the breakdown of the step (an evaluation keeps the figures it ranks by)."""
        key = (system.gpu.name, train.framework)
        options = self._options.get(key)
        if options is None:
            options = self._options[key] = ProjectionOptions(
                calibration=calibration_for(*key), profile=self.problem.profile, breakdown=False
            )
        return options

    def project(self, c: Candidate, train: TrainingSpec, memory: MemoryResult | None = None) -> Projection:
        """The core's projection (`memory`: the pre-filter's memory of this very spec, taken as it is)."""
        system = self.problem.system(c.num_gpus)
        return project_specs(self.problem.model, system, train, self.options_for(system, train), memory)

    def _project(
        self, c: Candidate, train: TrainingSpec, source: str, exact: bool, memory: MemoryResult | None = None
    ) -> tuple[Evaluation | None, str]:
        try:
            evaluation = evaluation_of(c, self.project(c, train, memory), source, train if exact else None)
        except ConfigError as exc:  # the validator is the judge; a rule the screen missed still rejects
            return None, "illegal: " + "; ".join(exc.problems)
        if not exact:
            self._cache[c] = evaluation
            self._cached_structures.add(c.with_axes(recompute="none", recompute_layers=None))
        return evaluation, ""

    def evaluate(self, c: Candidate, source: str, train: TrainingSpec | None = None) -> tuple[Evaluation | None, str]:
        """Screen and project one candidate (`train`: an exact spec to use instead of the derived one)."""
        cached = self._cache.get(c) if train is None else None
        if cached is not None:
            return cached, ""
        resolved, reason, memory = self._screen(c, train)
        if resolved is None:
            return None, reason
        return self._project(c, resolved, source, train is not None, memory)

    # ------------------------------------------------------------------ tasks
    def run(self, task: Task) -> TaskReport:
        report = TaskReport(tag=task.tag)
        if task.kind == "groups":
            for base in task.items:
                if _past(task.deadline_unix):
                    report.stopped = True
                    break
                self._group(base, task.source, task.prune, report)
                report.groups += 1
                if task.record_groups:
                    report.groups_done.append(base.key())
            return report
        for item in task.items:
            if _past(task.deadline_unix):
                report.stopped = True
                break
            c, train = (item, None) if task.kind == "candidates" else item
            evaluation, reason = self.evaluate(c, task.source, train)
            if evaluation is not None:
                report.evaluations.append(evaluation)
            else:
                report.rejections.append((c, reason))
                if reason.startswith("illegal"):
                    report.illegal += 1
                else:
                    report.memory_rejected += 1
        return report

    def _group(self, base: Candidate, source: str, prune: bool, report: TaskReport) -> None:
        """Every recompute variant of one structure, cheapest first, skipping what a fitting one dominates."""
        options = self.space.recompute_options(base)
        base_train = to_training(self.problem, base)
        system = self.problem.system(base.num_gpus)
        if candidate_problems(self.problem, base, base_train):
            report.illegal += len(options)
            return
        memory = GroupMemory(self.problem.model, system, base_train, self._stages)
        cached = base in self._cached_structures  # else no variant is in `_cache`: each candidate built when projected
        if not cached and memory.cannot_fit():  # every variant would be rejected, one after the other
            report.memory_rejected += len(options)
            return
        fitting: list[tuple[str, int | None]] = []
        for option in options:
            if prune and any(dominates(f, option) for f in fitting):
                report.dominated += 1
                continue
            mode, layers = option
            c = None
            evaluation = None
            if cached:
                c = base if mode == "none" else base.with_axes(recompute=mode, recompute_layers=layers)
                evaluation = self._cache.get(c)
            if evaluation is None:
                if not memory.fits(mode, layers):
                    report.memory_rejected += 1
                    continue
                if c is None:
                    c = base if mode == "none" else base.with_axes(recompute=mode, recompute_layers=layers)
                train = base_train if mode == "none" else memory.train_for(mode, layers)
                evaluation, reason = self._project(c, train, source, False, memory.memory(mode, layers))
                if evaluation is None:
                    report.illegal += 1
                    continue
            report.evaluations.append(evaluation)
            if evaluation.fits:
                fitting.append(option)
