"""`paraplan tune --agent`: the agent's options, its run after the search (or from a recipe), its readable log."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape

from paraplan.cli.common import check_outputs, console
from paraplan.errors import ConfigError
from paraplan.tune.agent import PROPOSERS, AgentOptions, AgentResult, AgentStep, StartPoint, run_agent
from paraplan.tune.agent.loop import DEFAULT_BUDGET
from paraplan.tune.agent.record import step_lines
from paraplan.tune.candidate import TuneProblem
from paraplan.tune.proposer import DEFAULT_TIMEOUT_S

Opt = typer.Option

AgentOpt = Annotated[
    bool,
    Opt(
        "--agent",
        help="after the search, an agent reads the best's breakdown and changes knobs the search does not enumerate "
        "(layout, virtual stages, recompute depth, overlap, dispatcher), checking and logging every step",
    ),
]
AgentProposerOpt = Annotated[
    str, Opt("--agent-proposer", help=f"{' | '.join(PROPOSERS)}: rules from the breakdown (no network), an LLM "
             "(--llm-url/--llm-model or $PARAPLAN_LLM_URL/$PARAPLAN_LLM_MODEL), or a recorded transcript")
]  # fmt: skip
AgentBudgetOpt = Annotated[int, Opt("--agent-budget", help="most proposals the agent judges")]
AgentTimeOpt = Annotated[float | None, Opt("--agent-time-limit", help="seconds for the agent")]
AgentTranscriptOpt = Annotated[
    str | None,
    Opt("--agent-transcript", help="replay: the JSONL of replies to read; llm: where to record the replies"),
]
AgentStartOpt = Annotated[
    str | None,
    Opt(
        "--agent-start",
        help="start the agent from this config (a published recipe: Megatron-LM, NeMo/Bridge, Primus, torchtitan) "
        "instead of the search's best; the search is skipped",
    ),
]


def agent_options(
    proposer: str,
    budget: int | None,
    time_limit_s: float | None,
    transcript: str | None,
    study: str | None,
    llm_url: str | None,
    llm_model: str | None,
    llm_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> AgentOptions:
    llm = None
    if proposer == "llm":
        from paraplan.tune.agent.proposers.llm import config_from

        check_outputs({"--agent-transcript": transcript})  # the replies are appended there
        llm = config_from(llm_url, llm_model, llm_timeout_s)
    options = AgentOptions(
        proposer=proposer,
        budget=DEFAULT_BUDGET if budget is None else budget,
        time_limit_s=time_limit_s,
        study_path=study,
        transcript=transcript,
        llm=llm,
    )
    problems = options.problems()
    if problems:
        raise ConfigError(problems)
    if proposer == "replay" and transcript:
        from paraplan.tune.agent.proposers.replay import read_transcript

        read_transcript(transcript)  # a missing or malformed transcript is refused before any work
    return options


def _print_step(step: AgentStep) -> None:
    style = {"kept": "green", "dropped": "yellow", "skipped": "red"}.get(step.status, "")
    lines = step_lines(step)
    console.print(f"[{style}]{escape(lines[0])}[/]" if style else escape(lines[0]), highlight=False, soft_wrap=True)
    for line in lines[1:]:
        console.print(line, highlight=False, soft_wrap=True, markup=False)


def run(problem: TuneProblem, starts: list[StartPoint], options: AgentOptions, show: bool) -> AgentResult:
    if show:
        console.print(
            f"[bold]agent ({options.proposer})[/]: each step is a hypothesis, a change, the checks, a verdict"
        )
    return run_agent(problem, starts, options, progress=_print_step if show else None)


def print_summary(result: AgentResult) -> None:
    start, best = result.start, result.best
    path = ", ".join(f"#{s.index} {s.source}" for s in result.path) or "none kept"
    console.print(
        f"[bold]agent[/] ({result.proposer}): {start.step_time_s:.3f} s ({start.source}) -> {best.step_time_s:.3f} s, "
        f"{result.gain_pct:+.1f}% throughput in {result.proposals} proposals ({result.elapsed_s:.1f} s); "
        f"path: {path}; stopped: {result.stopped}",
        highlight=False,
        soft_wrap=True,
    )
    if result.path:
        changed = _net_changes(start, best)
        console.print("best vs start: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()),
                      highlight=False, soft_wrap=True, markup=False)  # fmt: skip
    for note in result.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)


def _net_changes(start: AgentStep, best: AgentStep) -> dict[str, tuple[Any, Any]]:
    a, b = start.spec or {}, best.spec or {}
    return {k: (a.get(k), b.get(k)) for k in b if a.get(k) != b.get(k)}


def dump(result: AgentResult) -> str:
    return json.dumps({"agent": result.to_dict()}, default=float)
