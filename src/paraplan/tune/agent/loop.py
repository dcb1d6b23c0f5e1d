"""The investigation loop: diagnose the incumbent, ask the proposer, check and project each proposal, keep the best
that improves, log every step; until the budget, the time limit or the proposer runs out.

Each round the proposer sees the incumbent's diagnosis (the named parts of its step, memory, stages) and the log.
Every proposal goes through the same checks: its changes applied (`changes.apply_changes`: the job stays fixed),
the one validator (`specs.validate.check`, inside the projection), the memory model's verdict, the projected step.
A round keeps its best proposal that fits and is faster than the incumbent (or as fast with less memory); the
others are dropped with the reason. A study file records every step as its round ends; the same run started
again with the file goes on from there.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from paraplan.errors import ConfigError
from paraplan.specs.training import TrainingSpec
from paraplan.tune.agent.changes import apply_changes, diff, spec_from_json, spec_key, spec_to_json
from paraplan.tune.agent.diagnosis import Diagnosis, diagnose
from paraplan.tune.agent.persist import AgentStudy
from paraplan.tune.agent.proposers import PROPOSERS, Proposal, Proposer
from paraplan.tune.agent.record import AgentStep, step_lines
from paraplan.tune.candidate import TuneProblem
from paraplan.tune.proposer import LLMConfig

SAME_TIME = 1e-4
"""Step times within 0.01% are the same speed (then less memory wins)."""
SAME_MEMORY_GIB = 0.05
DEFAULT_BUDGET = 60
PROJECTION_ERRORS = (ValueError, TypeError, ArithmeticError, KeyError, IndexError)
"""What an odd proposal (a proposer's typo: a layout of zeros, a string for a count) may raise past the validator."""


@dataclass(frozen=True)
class AgentOptions:
    proposer: str = "rules"
    budget: int = DEFAULT_BUDGET
    """Most proposals judged (resumed ones count)."""
    time_limit_s: float | None = None
    study_path: str | None = None
    transcript: str | None = None
    """replay: the JSONL transcript to read; llm: where to append the replies (a transcript to replay)."""
    llm: LLMConfig | None = None
    rules: tuple[str, ...] | None = None
    """Only these rules (default: every registered rule)."""
    max_rounds: int = 100

    def problems(self) -> list[str]:
        p = []
        if self.proposer not in PROPOSERS:
            p.append(f"unknown agent proposer '{self.proposer}': choose one of {', '.join(PROPOSERS)}")
        if self.budget < 1:
            p.append(f"--agent-budget must be >= 1 (got {self.budget})")
        if self.time_limit_s is not None and not 0 < self.time_limit_s < float("inf"):
            p.append(f"--agent-time-limit must be a number of seconds > 0 (got {self.time_limit_s})")
        if self.proposer == "replay" and not self.transcript:
            p.append("--agent-proposer replay needs --agent-transcript FILE (JSONL of recorded replies)")
        if self.proposer == "llm" and self.llm is None:
            p.append("--agent-proposer llm needs an endpoint (--llm-url and --llm-model, or $PARAPLAN_LLM_URL)")
        return p


@dataclass(frozen=True)
class StartPoint:
    name: str
    """Where it comes from: "recipe", "search best", "seed best", ..."""
    train: TrainingSpec


@dataclass
class AgentResult:
    proposer: str
    steps: list[AgentStep]
    elapsed_s: float
    stopped: str
    """Why the loop ended."""
    resumed: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def start(self) -> AgentStep:
        return next(s for s in self.steps if s.kind == "start" and s.status == "kept")

    @property
    def path(self) -> list[AgentStep]:
        """The kept proposals, in order: the way from the start to the best."""
        return [s for s in self.steps if s.kind == "proposal" and s.status == "kept"]

    @property
    def best(self) -> AgentStep:
        return (self.path or [self.start])[-1]

    @property
    def best_train(self) -> TrainingSpec:
        assert self.best.spec is not None
        return spec_from_json(self.best.spec)

    @property
    def proposals(self) -> int:
        return sum(1 for s in self.steps if s.kind == "proposal" and s.status != "skipped")

    @property
    def gain_pct(self) -> float:
        """Throughput gained over the start (same GPUs and batch: the step time ratio), in percent."""
        start, best = self.start.step_time_s, self.best.step_time_s
        assert start is not None and best is not None
        return 100.0 * (start / best - 1.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "proposer": self.proposer,
            "start": {"source": self.start.source, "step_time_s": self.start.step_time_s},
            "best": {"step_time_s": self.best.step_time_s, "spec": self.best.spec, "peak_gib": self.best.peak_gib},
            "gain_pct": self.gain_pct,
            "path": [s.index for s in self.path],
            "proposals": self.proposals,
            "resumed": self.resumed,
            "stopped": self.stopped,
            "elapsed_s": self.elapsed_s,
            "notes": self.notes,
            "steps": [s.to_dict() for s in self.steps],
        }

    def log_lines(self) -> list[str]:
        lines: list[str] = []
        for s in self.steps:
            lines += step_lines(s)
        return lines


def run_key(problem: TuneProblem, proposer: str, starts: Sequence[StartPoint], options: AgentOptions) -> str:
    text = json.dumps(
        {"problem": problem.key(), "proposer": proposer, "starts": [spec_key(s.train) for s in starts],
         "rules": options.rules, "transcript": options.transcript if proposer == "replay" else None},
        sort_keys=True,
    )  # fmt: skip
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def make_proposer(options: AgentOptions) -> Proposer:
    if options.proposer == "rules":
        from paraplan.tune.agent.proposers.rules import RulesProposer

        return RulesProposer(options.rules)
    if options.proposer == "replay":
        from paraplan.tune.agent.proposers.replay import ReplayProposer, read_transcript

        assert options.transcript is not None
        return ReplayProposer(read_transcript(options.transcript))
    from paraplan.tune.agent.proposers.llm import llm_proposer

    assert options.llm is not None
    return llm_proposer(options.llm, options.transcript)


def _better(new: Diagnosis, incumbent: Diagnosis) -> str:
    """Why `new` replaces the incumbent, or "" when it does not (it must fit)."""
    if not new.fits:
        return ""
    if not incumbent.fits:
        return "fits, where the incumbent is over the usable memory"
    ratio = new.step_time_s / incumbent.step_time_s
    if ratio < 1 - SAME_TIME:
        return f"faster: {incumbent.step_time_s:.3f} s -> {new.step_time_s:.3f} s ({100 * (ratio - 1):+.2f}%)"
    if ratio <= 1 + SAME_TIME and new.peak_gib < incumbent.peak_gib - SAME_MEMORY_GIB:
        return f"as fast, {incumbent.peak_gib - new.peak_gib:.1f} GiB less memory"
    return ""


def _memory_text(d: Diagnosis) -> str:
    verdict = "fits" if d.fits else "OOM"
    return f"{verdict}: peak {d.peak_gib:.1f} GiB of {d.usable_gib:.1f} GiB usable"


class _Loop:
    def __init__(
        self, problem: TuneProblem, options: AgentOptions, proposer: Proposer, study: AgentStudy | None
    ) -> None:
        self.problem, self.options, self.proposer, self.study = problem, options, proposer, study
        self.steps: list[AgentStep] = []
        self.tried: dict[str, int] = {}
        """Each spec judged (its key) -> the step that judged it."""
        self.incumbent: Diagnosis | None = None
        self.started = time.monotonic()

    # ------------------------------------------------------------------ bookkeeping
    def out_of_time(self) -> bool:
        limit = self.options.time_limit_s
        return limit is not None and time.monotonic() - self.started >= limit

    @property
    def judged(self) -> int:
        return sum(1 for s in self.steps if s.kind == "proposal" and s.status != "skipped")

    def commit(self, steps: list[AgentStep]) -> None:
        self.steps += steps
        if self.study is not None:
            for s in steps:
                self.study.record(s)

    def new_step(self, round_: int, kind: str, source: str, hypothesis: str, offset: int = 0) -> AgentStep:
        return AgentStep(index=len(self.steps) + offset, round=round_, kind=kind, source=source, hypothesis=hypothesis)

    # ------------------------------------------------------------------ starting points and resume
    def resume(self, loaded: list[AgentStep]) -> int:
        """Take up a recorded run: its steps, what it tried, its incumbent. Returns the rounds it played."""
        self.steps = list(loaded)
        self.tried = {json.dumps(s.spec, sort_keys=True): s.index for s in loaded if s.spec is not None}
        kept = [s for s in loaded if s.status == "kept" and s.spec is not None]
        if kept:
            self.incumbent = diagnose(self.problem, spec_from_json(kept[-1].spec))  # type: ignore[arg-type]
        return max((s.round for s in loaded), default=0)

    def start(self, starts: Sequence[StartPoint]) -> None:
        steps: list[AgentStep] = []
        candidates: list[tuple[AgentStep, Diagnosis]] = []
        for point in starts:
            step = self.new_step(0, "start", point.name, f"starting point: {point.name}", len(steps))
            steps.append(step)
            try:
                d = diagnose(self.problem, point.train)
            except ConfigError as exc:
                step.validator, step.status, step.reason = "; ".join(exc.problems), "skipped", "illegal"
                continue
            self._fill(step, d)
            self.tried[json.dumps(step.spec, sort_keys=True)] = step.index
            candidates.append((step, d))
        if not candidates:
            problems = [f"{s.source}: {s.validator}" for s in steps]
            raise ConfigError(["no starting point passes the validator", *problems])
        fitting = [c for c in candidates if c[1].fits] or candidates
        chosen, self.incumbent = min(fitting, key=lambda c: c[1].step_time_s)
        for step, _ in candidates:
            step.status = "kept" if step is chosen else "dropped"
            step.reason = "the incumbent" if step is chosen else f"slower than #{chosen.index} ({chosen.source})"
        self.commit(steps)

    def _fill(self, step: AgentStep, d: Diagnosis) -> None:
        step.validator = "passed"
        step.memory, step.memory_fits, step.peak_gib = _memory_text(d), d.fits, d.peak_gib
        step.step_time_s = d.step_time_s
        step.spec = spec_to_json(d.train)
        step.breakdown_s = {k: round(v, 6) for k, v in d.parts.items()}

    # ------------------------------------------------------------------ one round
    def judge(self, round_: int, proposal: Proposal, offset: int) -> tuple[AgentStep, Diagnosis | None] | None:
        """The step for one proposal (None: it repeats a spec already tried)."""
        assert self.incumbent is not None
        incumbent = self.incumbent
        step = self.new_step(round_, "proposal", proposal.source, proposal.hypothesis, offset)
        step.requested = {k: list(v) if isinstance(v, tuple) else v for k, v in proposal.changes.items()}
        step.incumbent_step_time_s = incumbent.step_time_s
        try:
            train, step.adjustments = apply_changes(
                incumbent.model, incumbent.system, incumbent.train, proposal.changes
            )
        except ConfigError as exc:
            step.validator, step.reason = "refused: " + "; ".join(exc.problems), "not a change the agent may make"
            return step, None
        key = json.dumps(spec_to_json(train), sort_keys=True)
        if key in self.tried:
            if proposal.source != "llm":
                return None  # a rule proposes what follows from the incumbent: a repeat is no news
            step.status, step.reason = "skipped", f"already judged at #{self.tried[key]}"
            return step, None
        self.tried[key] = step.index
        step.changes = {k: [_plain(a), _plain(b)] for k, (a, b) in diff(incumbent.train, train).items()}
        try:
            d = diagnose(self.problem, train)
        except ConfigError as exc:
            step.validator, step.reason = "; ".join(exc.problems), "illegal"
            return step, None
        except PROJECTION_ERRORS as exc:
            step.validator, step.reason = f"projection failed: {type(exc).__name__}: {exc}", "illegal"
            return step, None
        self._fill(step, d)
        self.tried.setdefault(json.dumps(step.spec, sort_keys=True), step.index)
        if not d.fits:
            step.reason = "over the usable memory"
        return step, d

    def round(self, round_: int) -> tuple[bool, bool]:
        """(kept something, the proposer has more to say)."""
        assert self.incumbent is not None
        answer = self.proposer.propose(self.incumbent, self.steps)
        steps: list[AgentStep] = []
        for problem in answer.problems:
            step = self.new_step(round_, "error", self.proposer.name, problem, len(steps))
            step.status, step.reason = "skipped", "no proposal"
            steps.append(step)
        judged: list[tuple[AgentStep, Diagnosis]] = []
        for proposal in answer.proposals:
            judged_now = sum(s.kind == "proposal" and s.status != "skipped" for s in steps)
            if self.judged + judged_now >= self.options.budget or self.out_of_time():
                break
            result = self.judge(round_, proposal, len(steps))
            if result is None:
                continue
            step, d = result
            steps.append(step)
            if d is not None:
                judged.append((step, d))
        best: tuple[AgentStep, Diagnosis, str] | None = None
        for step, d in judged:
            why = _better(d, self.incumbent)
            if why and (best is None or _better(d, best[1])):
                best = (step, d, why)
        for step, d in judged:
            if best is not None and step is best[0]:
                step.status, step.reason = "kept", best[2]
            elif _better(d, self.incumbent):
                step.reason = f"improves, but #{best[0].index if best else '?'} improves more"
            elif d.fits:
                gain = step.gain_pct or 0.0
                step.reason = f"slower ({-gain:+.2f}%)" if gain < -100 * SAME_TIME else "no faster"
        self.commit(steps)
        if best is not None:
            self.incumbent = best[1]
        more = bool(answer.proposals or answer.problems) and not answer.exhausted
        return best is not None, more


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def run_agent(
    problem: TuneProblem,
    starts: Sequence[StartPoint],
    options: AgentOptions | None = None,
    *,
    proposer: Proposer | None = None,
    progress: Callable[[AgentStep], None] | None = None,
) -> AgentResult:
    """Improve on the fastest fitting start (see the module docstring). `proposer` overrides `options.proposer`
    (a custom one); `progress` is called with every step as its round ends."""
    options = options or AgentOptions()
    problems = [p for p in options.problems() if proposer is None or "proposer" not in p]
    if problems:
        raise ConfigError(problems)
    if not starts:
        raise ConfigError("the agent needs a starting point")
    proposer = proposer or make_proposer(options)
    study = (
        AgentStudy(options.study_path, problem.key(), run_key(problem, proposer.name, starts, options))
        if options.study_path
        else None
    )
    loop = _Loop(problem, options, proposer, study)
    notes: list[str] = []
    stopped = "budget"
    try:
        loaded = study.load() if study is not None else []
        rounds = loop.resume(loaded) if loaded else 0
        if loaded:
            notes.append(f"resumed {len(loaded)} steps ({rounds} rounds) from {options.study_path}")
            proposer.skip_rounds(rounds)
        else:
            loop.start(starts)
        shown = 0 if loaded else len(loop.steps)
        if progress is not None:
            for s in loop.steps[:shown]:
                progress(s)
        round_ = rounds + 1
        while True:
            if loop.judged >= options.budget:
                stopped = f"budget of {options.budget} proposals"
                break
            if loop.out_of_time():
                stopped = f"time limit of {options.time_limit_s:g} s"
                break
            if round_ > options.max_rounds:
                stopped = f"{options.max_rounds} rounds"
                break
            before = len(loop.steps)
            kept, more = loop.round(round_)
            if progress is not None:
                for s in loop.steps[before:]:
                    progress(s)
            if not more:
                rules = proposer.name == "rules"
                stopped = "no rule applies to the incumbent" if rules else "the proposer has nothing more to propose"
                break
            if not kept and proposer.name == "rules" and len(loop.steps) == before:
                stopped = "every rule's proposal for the incumbent was tried"
                break
            if not kept and proposer.name == "rules":
                stopped = "no rule's proposal improves on the incumbent"
                break
            round_ += 1
    except KeyboardInterrupt:
        stopped = "interrupted" + (" (resume with the same --study)" if study is not None else "")
    finally:
        if study is not None:
            study.close()
    return AgentResult(proposer.name, loop.steps, time.monotonic() - loop.started, stopped, len(loaded), notes)
