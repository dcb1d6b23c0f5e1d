"""The tuner: seed planner, then the cross-axis search, then optional LLM proposals; results ranked.

Phases, each feeding the next through the table of what is known:
1. the deterministic seed planner (in this process: it warms the per-layer caches the workers inherit);
2. the search: exhaustive over every structure with its recompute chain when the space allows, else optuna
   (TPE; NSGA-II for several objectives), over the executor;
3. LLM proposals, when an endpoint is configured.
A study file records everything as it arrives; a time limit, a budget or Ctrl-C ends the search with what
was found.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from math import isnan

from paraplan.errors import ConfigError
from paraplan.specs.schedule import schedule as schedule_named
from paraplan.specs.training import TrainingSpec
from paraplan.tune.candidate import Candidate, TuneProblem, from_training
from paraplan.tune.evaluate import Evaluation, Evaluator, Task, TaskReport
from paraplan.tune.executors import Executor, SerialExecutor, make_executor
from paraplan.tune.memfilter import MemoryFilter
from paraplan.tune.optuna_search import OBJECTIVES, optuna_available
from paraplan.tune.proposer import LLMConfig, LLMProposer
from paraplan.tune.seed import seed_plan
from paraplan.tune.space import SearchSpace, SpaceLimits
from paraplan.tune.study import Study

METHODS = ("auto", "exhaustive", "tpe", "nsga2")
EXHAUSTIVE_MAX_GROUPS = 250_000
"""Above this many structures `auto` samples with optuna instead of enumerating."""
PROJECTIONS_PER_GROUP = 0.6
"""Planning figure for `auto` under a time limit: most groups are illegal, filtered or stop at their first
variant (measured 0.5-0.6 on dense and MoE spaces)."""
DEFAULT_PROJECTION_S = 5e-3
"""Seconds per projection when the seed planner did not measure it."""
DEFAULT_SAMPLING_BUDGET = 2000
TASKS_PER_WORKER = 16
"""The exhaustive search cuts its work in about this many tasks per worker, by estimated cost."""


@dataclass(frozen=True)
class TuneOptions:
    method: str = "auto"
    objectives: tuple[str, ...] = ("throughput",)
    top_k: int = 10
    budget: int | None = None
    """Most projections in the search phase (default: all for exhaustive, 2,000 trials for optuna)."""
    time_limit_s: float | None = None
    executor: str = "local"
    workers: int | None = None
    address: str | None = None
    study_path: str | None = None
    llm: LLMConfig | None = None
    llm_rounds: int = 2
    seed: int = 0
    groups_per_task: int = 32
    seed_planner: bool = True

    def problems(self) -> list[str]:
        p = []
        if self.method not in METHODS:
            p.append(f"unknown method '{self.method}': choose one of {', '.join(METHODS)}")
        bad = [o for o in self.objectives if o not in OBJECTIVES]
        if bad or not self.objectives:
            p.append(f"unknown objective(s) {', '.join(bad) or '(none)'}: choose from {', '.join(OBJECTIVES)}")
        if self.method == "tpe" and len(self.objectives) > 1:
            p.append("TPE here is single-objective: use --method nsga2 (or auto) for several objectives")
        if self.top_k < 1:
            p.append(f"--top must be >= 1 (got {self.top_k})")
        if self.budget is not None and self.budget < 1:
            p.append(f"--budget must be >= 1 (got {self.budget})")
        if self.time_limit_s is not None and not 0 < self.time_limit_s < float("inf"):  # NaN fails too: no limit
            p.append(f"--time-limit must be a number of seconds > 0 (got {self.time_limit_s})")
        if self.workers is not None and self.workers < 1:
            p.append(f"--workers must be >= 1 (got {self.workers})")
        return p


@dataclass(frozen=True)
class ProgressUpdate:
    phase: str
    done: int
    total: int
    evaluated: int
    elapsed_s: float
    best: Evaluation | None


@dataclass
class TuneResult:
    problem: TuneProblem
    method: str
    top: list[Evaluation]
    pareto: list[Evaluation]
    evaluations: list[Evaluation]
    evaluated: int
    """Projections made by this run (resumed ones not counted)."""
    illegal: int
    memory_rejected: int
    dominated: int
    elapsed_s: float
    search_elapsed_s: float
    search_evaluated: int
    interrupted: bool = False
    resumed: int = 0
    notes: list[str] = field(default_factory=list)
    stopped_by: str = ""
    """What ended the search before it was complete: "time limit", "budget" (or "" when it ran to the end)."""
    failed: int = 0
    """Items (structures, candidates) left unevaluated because their worker process died each time."""

    @property
    def candidates_per_s(self) -> float:
        """Projections per second over the whole run (after the memory filter)."""
        return self.evaluated / self.elapsed_s if self.elapsed_s > 0 else 0.0


def score(evaluation: Evaluation) -> float:
    """The single objective: cluster throughput (for one GPU count, the order of tokens/s per GPU)."""
    return evaluation.tokens_per_sec


def rank(evaluations: Iterable[Evaluation], top_k: int) -> list[Evaluation]:
    """The best `top_k` that fit: by throughput, then memory, then the candidate's order (`Candidate.sort_key`)."""
    fitting = [e for e in evaluations if e.fits]
    if len(fitting) > top_k:
        # the candidate's order only breaks ties: the first top_k by the whole key are among those whose (throughput,
        # memory) is at most the top_k-th smallest; the others are left out before their order keys are built (the
        # same list: the sort is stable and the filter keeps the order). NaN compares neither way: all are sorted
        heads = [(-score(e), e.peak_gib) for e in fitting]
        if not any(isnan(a) or isnan(b) for a, b in heads):
            cut = heapq.nsmallest(top_k, heads)[-1]
            fitting = [e for e, head in zip(fitting, heads, strict=True) if head <= cut]
    return sorted(fitting, key=lambda e: (-score(e), e.peak_gib, e.candidate.sort_key()))[:top_k]


def pareto_front(evaluations: Iterable[Evaluation], objectives: Sequence[str]) -> list[Evaluation]:
    """Non-dominated fitting evaluations (throughput up, memory and GPU count down)."""

    def vector(e: Evaluation) -> tuple[float, ...]:
        out = []
        for o in objectives:
            out.append(
                -e.tokens_per_sec if o == "throughput" else e.peak_gib if o == "memory" else e.candidate.num_gpus
            )
        return tuple(out)

    ordered = sorted((e for e in evaluations if e.fits), key=lambda e: (vector(e), e.candidate.sort_key()))
    front: list[tuple[tuple[float, ...], Evaluation]] = []
    for e in ordered:
        v = vector(e)
        if any(all(a <= b for a, b in zip(f, v, strict=True)) for f, _ in front):
            continue
        front.append((v, e))
    return [e for _, e in front]


class _Ledger:
    """What is known: every evaluation by candidate, counters, the study file, progress."""

    def __init__(self, study: Study | None, progress: Callable[[ProgressUpdate], None] | None, started: float):
        self.study = study
        self.progress = progress
        self.started = started
        self.known: dict[Candidate, Evaluation] = {}
        self.extra: list[Evaluation] = []  # exact specs (--candidates), not keyed by candidate
        self.evaluated = self.illegal = self.memory_rejected = self.dominated = 0
        self.best: Evaluation | None = None
        self.phase, self.done, self.total = "", 0, 0
        self.rejections: list[tuple[Candidate, str]] = []
        self.failed_items = 0
        self.failures: list[str] = []

    def add(self, report: TaskReport, count_groups: bool = False) -> None:
        for e in report.evaluations:
            if e.train is None:
                if e.candidate in self.known:
                    continue
                self.known[e.candidate] = e
            else:
                self.extra.append(e)
            self.evaluated += 1
            if e.fits and (self.best is None or score(e) > score(self.best)):
                self.best = e
        self.illegal += report.illegal
        self.memory_rejected += report.memory_rejected
        self.dominated += report.dominated
        self.rejections += report.rejections
        self.failed_items += report.failed_items
        self.failures += report.failures
        if count_groups:
            self.done += report.groups
        if self.study is not None:
            self.study.record(report.evaluations, report.groups_done)
        self.notify()

    def notify(self) -> None:
        if self.progress is not None:
            self.progress(
                ProgressUpdate(
                    self.phase, self.done, self.total, self.evaluated, time.monotonic() - self.started, self.best
                )
            )

    def all(self) -> list[Evaluation]:
        return list(self.known.values()) + self.extra


def _choose_method(options: TuneOptions, groups: int, workers: int, projection_s: float) -> str:
    """`auto`: enumerate when the space allows (size, time limit), else sample with optuna when it is there."""
    if options.method != "auto":
        return options.method
    estimated_s = groups * PROJECTIONS_PER_GROUP * projection_s / max(1, workers)
    too_slow = options.time_limit_s is not None and estimated_s > options.time_limit_s
    if (groups > EXHAUSTIVE_MAX_GROUPS or too_slow) and optuna_available():
        return "nsga2" if len(options.objectives) > 1 else "tpe"
    return "exhaustive"


def _plan_key(c: Candidate, gbs: int) -> tuple:
    """Structures with this key share the pipeline simulator's plan (schedule, pp, vpp, micro-batches)."""
    return (gbs // (c.mbs * c.dp), c.pp, c.schedule, c.vpp, c.ep_overlap)


PROJECTION_OVERHEAD_TASKS = 2000
"""What a projection costs besides playing its tasks, in tasks (about 0.3 ms against 150 ns a task)."""


def _cost(c: Candidate, gbs: int) -> int:
    """Estimated cost of projecting a structure: the simulator plays 2 * pp * chunks * micro-batches tasks."""
    return (
        2 * c.pp * schedule_named(c.schedule).chunks_per_rank(c.vpp) * (gbs // (c.mbs * c.dp))
        + PROJECTION_OVERHEAD_TASKS
    )


def _work_order(structures: list[Candidate], gbs: int) -> tuple[list[Candidate], list[int]]:
    """The costliest plans first (the workers then end together on cheap ones), each plan's structures
    together (one worker builds the plan, the costliest thing to rebuild), then shard and process groups
    (per-layer cost entries); with each structure's `_cost` (estimated once)."""
    costs = [_cost(c, gbs) for c in structures]
    keys = [
        (-cost, _plan_key(c, gbs), c.num_gpus, c.precision, c.tp, c.cp, c.sp, c.mbs)
        for c, cost in zip(structures, costs, strict=True)
    ]
    order = sorted(range(len(structures)), key=keys.__getitem__)  # stable, as sorting the structures by their keys
    return [structures[i] for i in order], [costs[i] for i in order]


def _group_tasks(
    structures: list[Candidate],
    gbs: int,
    options: TuneOptions,
    prune: bool,
    record: bool,
    stop: Callable[[], bool],
    max_cost: float = float("inf"),
    deadline_unix: float | None = None,
    costs: Sequence[int] | None = None,
) -> Iterator[Task]:
    """Batches of about `groups_per_task` structures in work order, cut between plan keys, so that one worker
    builds each plan and its neighbours reuse it; a batch whose estimated cost reaches `max_cost` is cut
    sooner, so that no worker is left with a long tail of work. `costs`: each structure's `_cost`, known already."""
    costs = costs if costs is not None else [_cost(c, gbs) for c in structures]
    keys = [_plan_key(c, gbs) for c in structures]
    batch: list[Candidate] = []
    cost = 0
    for i, structure in enumerate(structures):
        batch.append(structure)
        cost += costs[i]
        last = i + 1 == len(structures)
        boundary = last or keys[i + 1] != keys[i]
        if (boundary and len(batch) >= options.groups_per_task) or cost >= max_cost or last:
            if stop():
                return
            yield Task("groups", tuple(batch), "exhaustive", prune, record, deadline_unix=deadline_unix)
            batch, cost = [], 0


@dataclass
class _Run:
    """The state one `tune` call threads through its phases."""

    problem: TuneProblem
    options: TuneOptions
    space: SearchSpace
    evaluator: Evaluator
    ledger: _Ledger
    study: Study | None
    deadline: float | None
    notes: list[str] = field(default_factory=list)
    executor: Executor | None = None
    method: str = ""
    done_groups: set[str] = field(default_factory=set)
    resumed: int = 0
    projection_s: float = DEFAULT_PROJECTION_S
    search_started: float = 0.0
    search_elapsed_s: float = 0.0
    search_evaluated_before: int = 0
    stopped_by: str = ""

    def over_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def stop(self) -> bool:
        budget = self.options.budget
        over_budget = budget is not None and self.ledger.evaluated - self.search_evaluated_before >= budget
        return over_budget or self.over_time()

    def task_deadline(self) -> float | None:
        """The time limit as a wall-clock time, for tasks that run in other processes (`Task.deadline_unix`)."""
        return None if self.deadline is None else time.time() + (self.deadline - time.monotonic())

    def note_stop(self, what: str) -> None:
        """Say (once) that the time limit or the budget stopped `what` ("the search after 5 of 9 trials")."""
        if self.stopped_by:
            return
        self.stopped_by = "time limit" if self.over_time() else "budget"
        limit = (
            f"time limit of {self.options.time_limit_s:g} s"
            if self.stopped_by == "time limit"
            else f"budget of {self.options.budget:,}"
        )
        resume = " (resume with the same --study)" if self.study is not None else ""
        self.notes.append(f"the {limit} stopped {what}: the results are what was found{resume}")


def tune(
    problem: TuneProblem,
    limits: SpaceLimits | None = None,
    options: TuneOptions | None = None,
    *,
    candidates: Sequence[Candidate | TrainingSpec] | None = None,
    progress: Callable[[ProgressUpdate], None] | None = None,
) -> TuneResult:
    """Search the space (or only `candidates`) and rank what fits. See the module docstring."""
    options = options or TuneOptions()
    problems = options.problems()
    if problems:
        raise ConfigError(problems)
    started = time.monotonic()
    space = SearchSpace(problem, limits or SpaceLimits())
    study = Study(options.study_path, problem.key(), problem.model.name) if options.study_path else None
    run = _Run(
        problem=problem,
        options=options,
        space=space,
        evaluator=Evaluator(problem, space, MemoryFilter()),
        ledger=_Ledger(study, progress, started),
        study=study,
        deadline=None if options.time_limit_s is None else started + options.time_limit_s,
        method="candidates" if candidates is not None else options.method,
    )
    interrupted = False
    try:
        _resume(run)
        _warm_up_loops()
        if candidates is not None:
            _rank_candidates(run, candidates)
        else:
            _seed(run)
            _search(run)
            if options.llm is not None and not run.over_time():  # the budget is the search's
                _llm_rounds(run)
    except KeyboardInterrupt:
        interrupted = True
        run.notes.append(
            "interrupted: the results below are what was found" + (" (resume with the same --study)" if study else "")
        )
    finally:
        if run.executor is not None:
            run.executor.close()
        if study is not None:
            study.close()
    if run.search_started and not run.search_elapsed_s:  # interrupted during the search
        run.search_elapsed_s = time.monotonic() - run.search_started
    ledger = run.ledger
    everything = ledger.all()
    restarts = getattr(run.executor, "restarts", 0)
    if restarts:
        deaths = ", ".join(sorted(set(getattr(run.executor, "deaths", []))))
        run.notes.append(
            f"the worker pool was started again {restarts} time(s) after a worker died ({deaths}); "
            "the tasks it lost were run again"
        )
    if ledger.failed_items:
        reasons = "; ".join(sorted(set(ledger.failures)))
        run.notes.append(f"{ledger.failed_items:,} item(s) not evaluated: {reasons}")
    if run.method == "candidates":
        run.notes += [f"not evaluated: {c.describe()}: {reason}" for c, reason in ledger.rejections[:20]]
    return TuneResult(
        problem=problem,
        method=run.method,
        top=rank(everything, options.top_k),
        pareto=pareto_front(everything, options.objectives) if len(options.objectives) > 1 else [],
        evaluations=everything,
        evaluated=ledger.evaluated,
        illegal=ledger.illegal,
        memory_rejected=ledger.memory_rejected,
        dominated=ledger.dominated,
        elapsed_s=time.monotonic() - started,
        search_elapsed_s=run.search_elapsed_s,
        search_evaluated=ledger.evaluated - run.search_evaluated_before,
        interrupted=interrupted,
        resumed=run.resumed,
        notes=run.notes,
        stopped_by=run.stopped_by,
        failed=ledger.failed_items,
    )


def _resume(run: _Run) -> None:
    """What a study file already holds for this problem becomes known (and is not recomputed)."""
    if run.study is None:
        return
    loaded, run.done_groups = run.study.load()
    ledger = run.ledger
    for e in loaded:
        ledger.known[e.candidate] = e
        if e.fits and (ledger.best is None or score(e) > score(ledger.best)):
            ledger.best = e
    run.resumed = len(loaded)
    if loaded:
        run.notes.append(
            f"resumed {len(loaded)} evaluations and {len(run.done_groups)} finished groups from {run.study.path}"
        )


def _rank_candidates(run: _Run, candidates: Sequence[Candidate | TrainingSpec]) -> None:
    """The `--candidates` mode: evaluate exactly these, nothing else."""
    ledger = run.ledger
    ledger.phase, ledger.total = "candidates", len(candidates)
    items = [_candidate_item(run.problem, c) for c in candidates]
    run.executor = _executor(run.options, run.evaluator, len(items))
    per_task = max(1, -(-len(items) // (4 * run.executor.workers)))
    deadline_unix = run.task_deadline()
    tasks = [
        Task("specs", tuple(items[i : i + per_task]), "candidates", deadline_unix=deadline_unix)
        for i in range(0, len(items), per_task)
    ]
    for report in run.executor.run(tasks):
        ledger.done += len(report.evaluations) + len(report.rejections)
        ledger.add(report)
    if ledger.done + ledger.failed_items < ledger.total and run.over_time():
        run.note_stop(f"the ranking after {ledger.done:,} of {ledger.total:,} candidates")


def _warm_up_loops() -> None:
    """Load (or compile) the simulator's compiled loops before the seed planner times a projection and before
    the pool forks: the workers inherit them."""
    from paraplan.sim import loops_jit

    if loops_jit.available():
        loops_jit.warm_up()


def _seed(run: _Run) -> None:
    """The seed planner, in this process (it warms the caches the pool's forked workers inherit); it also
    measures what one projection costs, for `auto`."""
    if not run.options.seed_planner:
        return
    ledger = run.ledger
    ledger.phase = "seed"
    ledger.notify()
    started = time.process_time()
    evaluations, report = seed_plan(run.space, run.evaluator, score, stop=run.over_time)
    if evaluations:
        run.projection_s = (time.process_time() - started) / len(evaluations)
    report.evaluations = [e for e in evaluations if e.candidate not in ledger.known]
    ledger.add(report)


def _search(run: _Run) -> None:
    """The cross-axis search: exhaustive over every structure, or optuna."""
    options, ledger = run.options, run.ledger
    workers = options.workers or _default_workers(options)
    run.method = _choose_method(options, run.space.count_structures(), workers, run.projection_s)
    if run.over_time():
        run.note_stop("the search before it started")
        return
    run.executor = make_executor(options.executor, run.evaluator, options.workers, options.address)
    run.search_started = time.monotonic()
    run.search_evaluated_before = ledger.evaluated
    if run.method == "exhaustive":
        _exhaustive(run)
    else:
        from paraplan.tune.optuna_search import OptunaSearch

        search = OptunaSearch(run.space, run.method, options.objectives, options.seed)
        search.warm_start(list(ledger.known.values()))
        trials = options.budget or DEFAULT_SAMPLING_BUDGET
        ledger.phase, ledger.done, ledger.total = run.method, 0, trials
        for report in search.run(run.executor, ledger.known, trials, run.deadline, run.method, run.task_deadline()):
            ledger.done = search.asked
            ledger.add(report)
        if run.over_time() and search.asked < trials:
            run.note_stop(f"the {run.method} search after {search.asked:,} of {trials:,} trials")
    run.search_elapsed_s = time.monotonic() - run.search_started


ENUMERATION_CHECK_EVERY = 1024
"""Structures listed between two looks at the clock while the space is enumerated."""


def _exhaustive(run: _Run) -> None:
    """Every structure with its recompute chain, costliest plans first; the listing of the space, the tasks and the
    workers all stop at the time limit."""
    options, ledger, gbs, executor = run.options, run.ledger, run.problem.gbs, run.executor
    assert executor is not None
    ledger.phase = "exhaustive"
    structures: list[Candidate] = []
    for i, structure in enumerate(run.space.structures()):
        if i % ENUMERATION_CHECK_EVERY == 0 and run.over_time():
            run.note_stop(f"the listing of the space after {i:,} of {run.space.count_structures():,} structures")
            return
        if not run.done_groups or structure.key() not in run.done_groups:
            structures.append(structure)
    structures, costs = _work_order(structures, gbs)
    ledger.done, ledger.total = 0, len(structures)
    prune = len(options.objectives) == 1
    max_cost = sum(costs) / (TASKS_PER_WORKER * executor.workers)
    tasks = _group_tasks(
        structures, gbs, options, prune, run.study is not None, run.stop, max_cost, run.task_deadline(), costs
    )
    for report in executor.run(tasks):
        ledger.add(report, count_groups=True)
    if ledger.done < ledger.total and run.stop():
        run.note_stop(f"the exhaustive search after {ledger.done:,} of {ledger.total:,} structures")


def _default_workers(options: TuneOptions) -> int:
    import os

    return 1 if options.executor == "serial" else (os.cpu_count() or 1)


def _executor(options: TuneOptions, evaluator: Evaluator, items: int) -> Executor:
    if items < 64 and options.executor == "local":
        return SerialExecutor(evaluator)
    return make_executor(options.executor, evaluator, options.workers, options.address)


def _candidate_item(problem: TuneProblem, c: Candidate | TrainingSpec) -> tuple[Candidate, TrainingSpec | None]:
    if isinstance(c, Candidate):
        from paraplan.tune.candidate import to_training

        return c, to_training(problem, c)
    num_gpus = problem.gpu_counts[0]
    return from_training(problem, c, num_gpus), c


def _llm_rounds(run: _Run) -> None:
    """Ask the configured language model for cross-axis candidates, given the best found so far. Whatever the
    endpoint does, the tune goes on: each kind of problem is one note (with a count), a failed endpoint ends the
    proposals, and no request outlasts the time limit."""
    llm = run.options.llm
    assert llm is not None and run.executor is not None
    proposer = LLMProposer(llm)
    ledger, space = run.ledger, run.space
    ledger.phase = "llm"
    log = _ProblemLog()
    try:
        for _ in range(run.options.llm_rounds):
            if run.over_time():
                break
            timeout_s = llm.timeout_s if run.deadline is None else min(llm.timeout_s, run.deadline - time.monotonic())
            proposals, problems = proposer.propose(space, rank(ledger.known.values(), 20), max(0.1, timeout_s))
            for problem in problems:
                log.add(problem.kind, problem.message)
            fresh: list[Candidate] = []
            for c in proposals:
                if c in ledger.known or c in fresh:
                    continue
                if not space.admits(c):
                    log.add("outside constraints", f"LLM proposal outside the constraints: {c.describe()}")
                    continue
                fresh.append(c)
            if any(p.endpoint_failed for p in problems):
                break  # the endpoint failed (unreachable, timeout, redirect, HTTP error): do not ask again
            if not fresh:
                continue
            task = Task("candidates", tuple(fresh), "llm", deadline_unix=run.task_deadline())
            for report in run.executor.run([task]):
                for c, reason in report.rejections:
                    log.add("rejected: " + reason.split(":")[0], f"LLM proposal {c.describe()} rejected: {reason}")
                ledger.add(report)
    finally:  # Ctrl-C keeps what the rounds found out
        run.notes += log.lines()


class _ProblemLog:
    """Problems by kind: the first message of each kind, and how many more there were."""

    def __init__(self) -> None:
        self._first: dict[str, str] = {}
        self._count: dict[str, int] = {}

    def add(self, kind: str, message: str) -> None:
        self._first.setdefault(kind, message)
        self._count[kind] = self._count.get(kind, 0) + 1

    def lines(self) -> list[str]:
        return [
            message if self._count[kind] == 1 else f"{message} (and {self._count[kind] - 1} more like it)"
            for kind, message in self._first.items()
        ]
