"""Sampling search with optuna for spaces too large to enumerate, and for multi-objective runs.

TPE (single objective: cluster throughput) or NSGA-II (throughput vs peak memory vs GPU count). Trials are
asked in batches and evaluated by the executor, so the pool stays busy; a candidate seen before is told
from the cache. The study is in memory and warm-started from earlier evaluations (the seed planner's, and
those a study file kept), so a resumed search continues where it stopped.
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from paraplan.errors import ConfigError
from paraplan.tune.candidate import Candidate
from paraplan.tune.evaluate import Evaluation, Task, TaskReport
from paraplan.tune.executors import Executor
from paraplan.tune.space import BOOL_AXES, SearchSpace

OBJECTIVES = {"throughput": "maximize", "memory": "minimize", "gpus": "minimize"}
INFEASIBLE_GIB = 1e6
NEIGHBOUR_TRIES = 20
TRIALS_PER_TASK = 4
"""Small tasks spread a batch over the workers."""
BATCH_TRIALS = 64
"""Trials asked before any is told: a fixed number, not one per worker, so that a seed gives the same trials on any
executor; 16 tasks keep a pool of 16 workers busy."""
INFEASIBLE = "infeasible"
"""Constraint name: 1 for an illegal, filtered or out-of-memory trial, 0 for one that fits."""


def objective_values(evaluation: Evaluation | None, objectives: tuple[str, ...], num_gpus: int) -> list[float]:
    """Objective values of a trial; infeasible (illegal, filtered or OOM) trials get the worst throughput."""
    values = []
    for name in objectives:
        if name == "throughput":
            values.append(evaluation.tokens_per_sec if evaluation is not None and evaluation.fits else 0.0)
        elif name == "memory":
            values.append(evaluation.peak_gib if evaluation is not None else INFEASIBLE_GIB)
        else:
            values.append(float(num_gpus))
    return values


class OptunaSearch:
    def __init__(self, space: SearchSpace, method: str, objectives: tuple[str, ...], seed: int = 0) -> None:
        optuna = import_optuna(method)

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = space
        self.objectives = objectives
        self._optuna = optuna
        self.grouped = objectives == ("throughput",)
        """Single objective: a trial is a structure, evaluated with its recompute chain (the group's best
        variant that fits is the trial's value), so the sampler searches fewer axes."""
        self._group_best: dict[Candidate, float] = {}
        self._found: dict[Candidate, Evaluation] = {}
        self._rng = random.Random(seed)
        self.asked = 0
        """Trials asked so far (the progress of a sampling search)."""
        self.choices = self._choices()
        directions = [OBJECTIVES[o] for o in objectives]
        # optuna >= 5 takes constraints per trial (Trial.set_constraint); older releases through a callback
        self._per_trial_constraints = hasattr(optuna.trial.Trial, "set_constraint")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if method == "nsga2":
                callback = None if self._per_trial_constraints else _constraints
                sampler = optuna.samplers.NSGAIISampler(seed=seed, constraints_func=callback)
            else:
                sampler = optuna.samplers.TPESampler(
                    seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=20
                )
        self.study = optuna.create_study(directions=directions, sampler=sampler)

    def _choices(self) -> dict[str, list]:
        space = self.space
        model = space.problem.model
        max_tp = max(space.tp_values() or [1])
        per_chunk = model.num_layers
        recompute = ["none", "selective"] + [f"full:{n}" for n in _powers(per_chunk - 1)] + ["full"]
        allowed = space.limits.allowed.get("recompute")
        if allowed:
            recompute = [label for label in recompute if _recompute_of(label) in allowed]
        choices: dict[str, list] = {
            "num_gpus": list(space.problem.gpu_counts),
            "precision": space.precision_values(),
            "tp": space.tp_values(),
            "cp": space.cp_values(),
            "pipeline": [f"{p}/{s}/{v}" for p, s, v in space.axis_values("pipeline", None)],  # type: ignore[arg-type]
            "mbs": space.mbs_values(),
            "ep": space.ep_values(),
            "etp": space.etp_values(max_tp) if model.is_moe else [0],
            "sp": space.sp_values(max_tp) or [False],
            "sharding": space.sharding_values(),
            "recompute": recompute,
        }
        if self.grouped:
            del choices["recompute"]
        for flag in BOOL_AXES[1:]:
            choices[flag] = space.flag_values(flag, applies=flag != "ep_overlap" or model.is_moe)
        return choices

    def _distributions(self) -> dict:
        dist = self._optuna.distributions.CategoricalDistribution
        return {name: dist(values) for name, values in self.choices.items() if len(values) > 1}

    def params_of(self, c: Candidate) -> dict[str, object] | None:
        params = {
            "num_gpus": c.num_gpus,
            "precision": c.precision,
            "tp": c.tp,
            "cp": c.cp,
            "pipeline": f"{c.pp}/{c.schedule}/{c.vpp}",
            "mbs": c.mbs,
            "ep": c.ep,
            "etp": c.etp if self.space.problem.model.is_moe else 0,
            "sp": c.sp if c.tp > 1 else self.choices["sp"][0],
            "sharding": c.sharding,
            "recompute": c.recompute_label,
            "overlap_grad_reduce": c.overlap_grad_reduce or self.choices["overlap_grad_reduce"][0],
            "overlap_param_gather": c.overlap_param_gather or self.choices["overlap_param_gather"][0],
            "tp_comm_overlap": c.tp_comm_overlap or self.choices["tp_comm_overlap"][0],
            "ep_overlap": c.ep_overlap or self.choices["ep_overlap"][0],
        }
        if self.grouped:
            del params["recompute"]
        if any(value not in self.choices[name] for name, value in params.items()):
            return None
        return {name: value for name, value in params.items() if len(self.choices[name]) > 1}

    def candidate_of(self, sampled: dict[str, object]) -> Candidate:
        params = {name: values[0] for name, values in self.choices.items()} | sampled  # fixed axes are not sampled
        pp, schedule, vpp = str(params["pipeline"]).split("/")
        recompute, layers = _recompute_of(str(params.get("recompute", "none")))
        tp = int(params["tp"])  # type: ignore[call-overload]
        etp = int(params["etp"]) or tp  # type: ignore[call-overload]
        c = Candidate.of(
            num_gpus=int(params["num_gpus"]),  # type: ignore[call-overload]
            precision=str(params["precision"]),
            tp=tp,
            cp=int(params["cp"]),  # type: ignore[call-overload]
            pp=int(pp),
            vpp=int(vpp),
            schedule=schedule,
            ep=int(params["ep"]),  # type: ignore[call-overload]
            etp=min(etp, tp),
            mbs=int(params["mbs"]),  # type: ignore[call-overload]
            sp=bool(params["sp"]),
            sharding=str(params["sharding"]),
            recompute=recompute,
            recompute_layers=layers,
            overlap_grad_reduce=bool(params["overlap_grad_reduce"]),
            overlap_param_gather=bool(params["overlap_param_gather"]),
            tp_comm_overlap=bool(params["tp_comm_overlap"]),
            ep_overlap=bool(params["ep_overlap"]),
        )
        return self.space.normalize(c)

    def _trial(self, params: dict[str, object], values: list[float], feasible: bool):  # noqa: ANN202
        infeasible = 0.0 if feasible else 1.0
        extra = (
            {"constraints": {INFEASIBLE: infeasible}}
            if self._per_trial_constraints
            else {"user_attrs": {"constraint": [infeasible]}}
        )
        return self._optuna.trial.create_trial(
            params=params, distributions=self._distributions(), values=values, **extra
        )

    def warm_start(self, evaluations: list[Evaluation]) -> None:
        """Tell the study what is already known (seed planner, a resumed study file)."""
        trials = []
        if self.grouped:
            for e in evaluations:  # a structure with no fitting variant yet is left to be searched
                if e.fits:
                    structure = e.candidate.structure()
                    self._group_best[structure] = max(e.tokens_per_sec, self._group_best.get(structure, 0.0))
            for structure, value in self._group_best.items():
                params = self.params_of(structure)
                if params is not None:
                    trials.append(self._trial(params, [value], value > 0))
        else:
            for e in evaluations:
                params = self.params_of(e.candidate)
                if params is not None:
                    trials.append(
                        self._trial(params, objective_values(e, self.objectives, e.candidate.num_gpus), e.fits)
                    )
        if trials:
            self.study.add_trials(trials)

    def run(
        self,
        executor: Executor,
        known: dict[Candidate, Evaluation],
        budget: int,
        deadline: float | None,
        source: str,
        deadline_unix: float | None = None,
    ) -> Iterator[TaskReport]:
        """Ask, evaluate, tell until `budget` trials or the deadline, in batches of `BATCH_TRIALS` trials: a batch
        is asked (TPE's constant liar covers the trials not yet told), evaluated by the executor in parallel, and
        told in the order it was asked, its reports yielded in that order. What the sampler sees therefore
        depends on the seed alone, not on the number of workers or on which task finished first."""
        distributions = self._distributions()
        while self.asked < budget and (deadline is None or time.monotonic() < deadline):
            tasks, asked, mutants = self._ask_batch(min(BATCH_TRIALS, budget - self.asked), known, distributions)
            tasks = [replace(task, source=source, deadline_unix=deadline_unix) for task in tasks]
            reports = {report.tag: report for report in executor.run(tasks)} if tasks else {}
            ordered = [reports.get(task.tag) or TaskReport(tag=task.tag) for task in tasks]
            for report in ordered:
                for e in report.evaluations:
                    if self.grouped:
                        if e.fits:
                            structure = e.candidate.structure()
                            self._group_best[structure] = max(self._group_best.get(structure, 0.0), e.tokens_per_sec)
                    else:
                        self._found[e.candidate] = e
            for trial, c in asked:
                self._tell(trial, c, known)
            self._add_trials(mutants, known)
            yield from ordered

    def _ask_batch(
        self, count: int, known: dict[Candidate, Evaluation], distributions: dict
    ) -> tuple[list[Task], list[tuple[Any, Candidate]], list[Candidate]]:
        """(tasks of about `TRIALS_PER_TASK` new candidates, the trials to tell once they are evaluated, the
        neighbours evaluated in place of repeats). A trial that repeats a known candidate is told at once and a
        random one-axis neighbour is evaluated instead."""
        kind = "groups" if self.grouped else "candidates"
        tasks: list[Task] = []
        asked: list[tuple[Any, Candidate]] = []
        mutants: list[Candidate] = []
        queued: set[Candidate] = set()
        while count > 0:
            trials = [self.study.ask(distributions) for _ in range(min(TRIALS_PER_TASK, count))]
            count -= len(trials)
            self.asked += len(trials)
            todo: list[Candidate] = []
            for trial in trials:
                c = self.candidate_of(trial.params)
                if c in queued:  # asked twice in this batch: told with the first one's result
                    asked.append((trial, c))
                elif self._known(c, known):
                    self._tell(trial, c, known)  # a repeat: answer it, and try a neighbour instead
                    neighbour = self._neighbour(c, known, queued)
                    if neighbour is not None:
                        queued.add(neighbour)
                        todo.append(neighbour)
                        mutants.append(neighbour)
                else:
                    queued.add(c)
                    todo.append(c)
                    asked.append((trial, c))
            if todo:
                tasks.append(Task(kind, tuple(sorted(todo, key=Candidate.sort_key)), "", tag=len(tasks) + 1))
        return tasks, asked, mutants

    def _neighbour(self, c: Candidate, known: dict[Candidate, Evaluation], taken: set[Candidate]) -> Candidate | None:
        """A random one-axis change of a repeated proposal that is neither known nor already queued."""
        params = self.params_of(c)
        if params is None:
            return None
        axes = [name for name, values in self.choices.items() if len(values) > 1]
        for _ in range(NEIGHBOUR_TRIES):
            if not axes:
                return None
            axis = self._rng.choice(axes)
            changed = self.candidate_of({**params, axis: self._rng.choice(self.choices[axis])})
            if changed not in taken and not self._known(changed, known):
                return changed
        return None

    def _add_trials(self, candidates: list[Candidate], known: dict[Candidate, Evaluation]) -> None:
        """Tell the sampler about evaluated neighbours, as finished trials."""
        trials = []
        for c in candidates:
            params = self.params_of(c)
            if params is None:
                continue
            if self.grouped:
                value = self._group_best.setdefault(c, 0.0)
                trials.append(self._trial(params, [value], value > 0))
            else:
                evaluation = self._found.get(c) or known.get(c)
                fits = evaluation is not None and evaluation.fits
                trials.append(self._trial(params, objective_values(evaluation, self.objectives, c.num_gpus), fits))
        if trials:
            self.study.add_trials(trials)

    def _known(self, c: Candidate, known: dict[Candidate, Evaluation]) -> bool:
        return c in self._group_best if self.grouped else (c in known or c in self._found)

    def _tell(self, trial: Any, c: Candidate, known: dict[Candidate, Evaluation]) -> None:
        if self.grouped:
            value = self._group_best.setdefault(c, 0.0)  # evaluated: no variant fits when none was recorded
            feasible, values = value > 0, [value]
        else:
            evaluation = self._found.get(c) or known.get(c)
            feasible = evaluation is not None and evaluation.fits
            values = objective_values(evaluation, self.objectives, c.num_gpus)
        if self._per_trial_constraints:
            trial.set_constraint(INFEASIBLE, 0.0 if feasible else 1.0)
        else:
            trial.set_user_attr("constraint", [0.0 if feasible else 1.0])
        self.study.tell(trial, values)


def import_optuna(method: str) -> Any:
    try:
        import optuna
    except ImportError:
        raise ConfigError(
            f"--method {method} needs optuna, which is not installed: install paraplan's 'tune' extra "
            "(pip install optuna) or use --method exhaustive"
        ) from None
    return optuna


def optuna_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("optuna") is not None


def _constraints(trial) -> list[float]:  # noqa: ANN001 - optuna's FrozenTrial (optuna < 5)
    return list(trial.user_attrs.get("constraint", [1.0]))


def _powers(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def _recompute_of(label: str) -> tuple[str, int | None]:
    if label.startswith("full:"):
        return "full", int(label.removeprefix("full:"))
    return label, None
