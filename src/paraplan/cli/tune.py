"""`paraplan tune`: the fastest configurations that fit, with the commands that reproduce them."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from paraplan.cli import agent as agent_cli
from paraplan.cli import reports
from paraplan.cli.common import (
    AnalyticOpt,
    CrossEntropyFusionOpt,
    GpuOpt,
    KernelFusionOpt,
    ModelOpt,
    MoeDispatcherOpt,
    ProfileOpt,
    check_outputs,
    console,
    err_console,
    fitted_profile,
    handle_errors,
    model_from_options,
)
from paraplan.cli.progress import LineProgress, progress_interval_s
from paraplan.cli.spec_options import TRAINING_OPTIONS, show_spec_defaults, spec_values
from paraplan.cost.calibration import fitted_table
from paraplan.errors import ConfigError
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import setting_problems
from paraplan.textfiles import load_json, read_text_file
from paraplan.tune.candidate import Candidate, TuneProblem
from paraplan.tune.evaluate import Evaluation
from paraplan.tune.explain import Explanation, explain
from paraplan.tune.proposer import DEFAULT_TIMEOUT_S, LLMConfig
from paraplan.tune.reproduce import megatron_args, paraplan_command, training_of
from paraplan.tune.space import SearchSpace, SpaceLimits, parse_constraints
from paraplan.tune.tuner import ProgressUpdate, TuneOptions, TuneResult, rank, tune
from paraplan.validate.evidence import evidence_for
from paraplan.validate.ranking import GapBin, bin_for, bins_from_table, evidence_phrase, gap_pct

Opt = typer.Option
TIE_TOLERANCE = 1e-6
"""Step times this close are a tie: the explanation compares the winner with the first slower one."""


def _gpu_counts(text: str | None) -> list[int]:
    if not text:
        raise ConfigError("the GPU count is required (--gpus N, or several: --gpus 512,1024)")
    counts: list[int] = []
    for item in text.split(","):
        try:
            value = int(item)
        except ValueError:
            raise ConfigError(f"--gpus expects integers separated by commas (got '{text}')") from None
        if value < 1:
            raise ConfigError(f"--gpus must be >= 1 (got {value})")
        counts.append(value)
    return sorted(set(counts))


def _systems(
    gpu: str | None, counts: list[int], system_file: str | None, overrides: dict[str, Any]
) -> tuple[SystemSpec, ...]:
    from paraplan.cli.common import system_from_options

    return tuple(system_from_options(gpu, n, system_file, overrides) for n in counts)


def _precisions(text: str | None, system: SystemSpec) -> list[str] | None:
    if not text:
        return None
    if text == "all":
        from paraplan.specs.training import PRECISIONS

        return [
            p
            for p in PRECISIONS
            if system.gpu.supports(p) and (p not in ("mxfp8", "nvfp4") or system.gpu.fp4_tflops > 0)
        ]
    return [p.strip() for p in text.split(",") if p.strip()]


def _read_candidates(path: str, space: SearchSpace) -> list[Candidate]:
    """A JSON list of objects (given inline, or in a file) or a CSV file with a header, keyed by axis names (tp, pp,
    vpp, cp, mbs, ...)."""
    file = Path(path)
    text = path if path.lstrip().startswith("[") else read_text_file(file, "--candidates")
    if text is path:
        path = "(inline JSON)"
    if file.suffix.lower() == ".json" or text.lstrip().startswith("["):
        rows = load_json(text, f"--candidates {path}")
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ConfigError(f"--candidates {path}: expected a JSON list of objects")
    else:
        rows = [{k: v for k, v in r.items() if v not in (None, "")} for r in csv.DictReader(text.splitlines())]
    problems: list[str] = []
    out: list[Candidate] = []
    for i, row in enumerate(rows, 1):
        try:
            out.append(space.candidate_from_mapping(row))
        except ConfigError as exc:
            problems += [f"--candidates {path} row {i}: {p}" for p in exc.problems]
        except (TypeError, ValueError) as exc:
            problems.append(f"--candidates {path} row {i}: {exc}")
    if problems:
        raise ConfigError(problems)
    if not out:
        raise ConfigError(f"--candidates {path}: no configurations")
    return out


def tune_command(
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    gpus: Annotated[str | None, Opt("--gpus", "-n", help="GPU count, or several (512,1024) to search over")] = None,
    gbs: Annotated[int | None, Opt("--gbs", help="global batch size (sequences)")] = None,
    seq: Annotated[int | None, Opt("--seq", help="sequence length")] = None,
    fix: Annotated[
        list[str] | None,
        Opt("--fix", help="AXIS=VALUE[,VALUE...]: fix or restrict an axis (tp=8, recompute=none,selective)"),
    ] = None,
    max_tp: Annotated[int | None, Opt("--max-tp", help="largest tp (default: GPUs per node)")] = None,
    max_pp: Annotated[int | None, Opt("--max-pp", help="largest pp (default: the number of layers)")] = None,
    max_vpp: Annotated[int | None, Opt("--max-vpp", help="largest vpp (default: the layers per stage)")] = None,
    max_cp: Annotated[int | None, Opt("--max-cp", help="largest cp (default: 32)")] = None,
    max_ep: Annotated[int | None, Opt("--max-ep", help="largest ep (default: the number of experts)")] = None,
    max_mbs: Annotated[int | None, Opt("--max-mbs", help="largest micro-batch (default: 16)")] = None,
    precision: Annotated[
        str | None, Opt("--precision", help="precision(s) allowed: bf16 | fp8 | bf16,fp8 | all (default: bf16)")
    ] = None,
    framework: Annotated[
        str | None, Opt("--framework", help="megatron-lm nemo-megatron megatron-deepspeed ...")
    ] = None,
    attention_backend: Annotated[str | None, Opt("--attention-backend", help="flash | unfused")] = None,
    kernel_fusion: KernelFusionOpt = None,
    cross_entropy_fusion: CrossEntropyFusionOpt = None,
    moe_dispatcher: MoeDispatcherOpt = None,
    objectives: Annotated[
        str, Opt("--objectives", help="throughput, or several for a Pareto front: throughput,memory,gpus")
    ] = "throughput",
    method: Annotated[str, Opt("--method", help="auto | exhaustive | tpe | nsga2")] = "auto",
    budget: Annotated[
        int | None,
        Opt(
            "--budget",
            help="most projections (exhaustive) or trials (tpe, nsga2) (default: every candidate; 2000 trials)",
        ),
    ] = None,
    time_limit: Annotated[
        float | None, Opt("--time-limit", help="seconds; ends the search with what was found (default: none)")
    ] = None,
    top: Annotated[int, Opt("--top", help="configurations to show")] = 10,
    as_json: Annotated[bool, Opt("--json", help="print one JSON object")] = False,
    csv_path: Annotated[str | None, Opt("--csv", help="write every evaluated configuration to this CSV")] = None,
    study: Annotated[str | None, Opt("--study", help="SQLite file: record, and resume an interrupted search")] = None,
    executor: Annotated[str, Opt("--executor", help="local (process pool) | ray | serial")] = "local",
    address: Annotated[str | None, Opt("--address", help="Ray cluster address (with --executor ray)")] = None,
    workers: Annotated[int | None, Opt("--workers", help="processes (default: CPU count)")] = None,
    llm_url: Annotated[
        str | None, Opt("--llm-url", help="OpenAI-compatible endpoint for proposals (key: $PARAPLAN_LLM_API_KEY)")
    ] = None,
    llm_model: Annotated[str | None, Opt("--llm-model", help="model name at --llm-url (required with it)")] = None,
    llm_rounds: Annotated[int, Opt("--llm-rounds", help="proposal rounds")] = 2,
    llm_timeout: Annotated[
        float, Opt("--llm-timeout", help="seconds for one request to the --llm-url endpoint, whole reply included")
    ] = DEFAULT_TIMEOUT_S,
    explain_winner: Annotated[bool, Opt("--explain", help="why the winner beats the runner-up")] = False,
    candidates_file: Annotated[
        str | None,
        Opt(
            "--candidates",
            help="only rank these configurations: a JSON list (inline or a file) or a CSV file of axis values",
        ),
    ] = None,
    seed: Annotated[int, Opt("--seed", help="sampler seed")] = 0,
    system_file: Annotated[str | None, Opt("--system-file", help="YAML system description or overrides")] = None,
    gpus_per_node: Annotated[int | None, Opt("--gpus-per-node", help="GPUs per node (default: the preset's)")] = None,
    nic_gbps: Annotated[float | None, Opt("--nic-gbps", help="scale-out Gb/s per GPU (default: the preset's)")] = None,
    profile: ProfileOpt = None,
    analytic: AnalyticOpt = False,
    html: reports.HtmlOpt = None,
    png: reports.PngOpt = None,
    agent: agent_cli.AgentOpt = False,
    agent_proposer: agent_cli.AgentProposerOpt = "rules",
    agent_budget: agent_cli.AgentBudgetOpt = agent_cli.DEFAULT_BUDGET,
    agent_time_limit: agent_cli.AgentTimeOpt = None,
    agent_transcript: agent_cli.AgentTranscriptOpt = None,
    agent_start: agent_cli.AgentStartOpt = None,
) -> None:
    """Search parallel configurations; show the fastest that fit in memory."""
    check_outputs({"--csv": csv_path})
    reports.check(html, png)
    agent_options = None
    if agent or agent_start:
        if candidates_file:
            raise ConfigError("--agent starts from the search's best or --agent-start, not from --candidates")
        agent_options = agent_cli.agent_options(
            agent_proposer, agent_budget, agent_time_limit, agent_transcript, study, llm_url, llm_model, llm_timeout
        )
        if agent_proposer == "llm":
            llm_url = llm_model = None  # the agent asks the endpoint, not the search's proposal rounds
    if agent_start:
        assert agent_options is not None
        start_problem, start = _recipe(
            agent_start, model, gpu, gpus, system_file, gpus_per_node, nic_gbps, profile, analytic
        )
        agent_result = agent_cli.run(start_problem, [start], agent_options, show=not as_json)
        if as_json:
            print(agent_cli.dump(agent_result))
        else:
            agent_cli.print_summary(agent_result)
        return
    problems: list[str] = []
    if gbs is None or gbs < 1:
        problems.append("--gbs (global batch size) is required and must be >= 1")
    if seq is None or seq < 1:
        problems.append("--seq (sequence length) is required and must be >= 1")
    if executor == "ray":
        from paraplan.tune.executors import import_ray

        import_ray()
    elif address:
        problems.append("--address needs --executor ray")
    if problems:
        raise ConfigError(problems)
    assert gbs is not None and seq is not None
    model_spec = model_from_options(model, {})
    systems = _systems(gpu, _gpu_counts(gpus), system_file, {"gpus_per_node": gpus_per_node, "nic_gbps": nic_gbps})
    fixed = dict(
        framework=framework,
        attention_backend=attention_backend,
        kernel_fusion=kernel_fusion,
        cross_entropy_fusion=cross_entropy_fusion,
        moe_dispatcher=moe_dispatcher,
    )
    base = TrainingSpec().with_values(**spec_values(fixed, TRAINING_OPTIONS))  # the settings tune does not search
    base_problems = setting_problems(base)  # else every candidate is illegal and the search finds "nothing fits"
    if base_problems:
        raise ConfigError(base_problems)
    fitted = fitted_profile(profile, systems[0].gpu.name, analytic)
    problem = TuneProblem(model_spec, systems, gbs, seq, base, model_ref=model or "", gpu_ref=gpu or "", profile=fitted)
    fixes = list(fix or [])
    allowed_precisions = _precisions(precision, systems[0])
    if allowed_precisions:
        fixes.append("precision=" + ",".join(allowed_precisions))
    limits = parse_constraints(
        fixes, {"tp": max_tp, "pp": max_pp, "vpp": max_vpp, "cp": max_cp, "ep": max_ep, "mbs": max_mbs}
    )
    options = TuneOptions(
        method=method,
        objectives=tuple(o.strip() for o in objectives.split(",") if o.strip()),
        top_k=top,
        budget=budget,
        time_limit_s=time_limit,
        executor=executor,
        workers=workers,
        address=address,
        study_path=study,
        llm=LLMConfig.from_options(llm_url, llm_model, llm_timeout),
        llm_rounds=llm_rounds,
        seed=seed,
    )
    option_problems = options.problems()
    if option_problems:
        raise ConfigError(option_problems)
    candidates = _read_candidates(candidates_file, SearchSpace(problem, limits)) if candidates_file else None
    result = _run(problem, limits, options, candidates, show_progress=not as_json)
    if csv_path:
        write_csv(result, csv_path)
    explanation = _explanation(result) if explain_winner else None
    agent_result = None
    if agent_options is not None and not result.interrupted:
        from paraplan.tune.agent.starts import search_starts

        if not as_json:
            print_result(result, explanation)
        agent_result = agent_cli.run(*search_starts(result), agent_options, show=not as_json)
        if not as_json:
            agent_cli.print_summary(agent_result)
    if as_json:
        out = result_dict(result, explanation)
        if agent_result is not None:
            out["agent"] = agent_result.to_dict()
        print(json.dumps(out, default=float))
    elif agent_result is None:
        print_result(result, explanation)
    reports.write_tune(html, png, result, [evaluation_dict(result, e) for e in result.top])
    if result.interrupted:
        raise typer.Exit(130)


def _recipe(
    path: str,
    model: str | None,
    gpu: str | None,
    gpus: str | None,
    system_file: str | None,
    gpus_per_node: int | None,
    nic_gbps: float | None,
    profile: str | None,
    analytic: bool,
):  # noqa: ANN202 - (TuneProblem, StartPoint)
    """The problem a recipe poses and the recipe as the agent's start (--agent-start)."""
    from dataclasses import replace

    from paraplan.formats import read_config
    from paraplan.tune.agent.starts import recipe_start

    read_text_file(Path(path), "--agent-start")  # a file, readable, text: not a string of arguments
    stand_in = model_from_options(model, {}) if model else None
    counts = _gpu_counts(gpus) if gpus else [read_config(Path(path), model=stand_in).hints.num_gpus or 0]
    if not counts[0]:
        raise ConfigError(f"--agent-start {path}: states no GPU count; give one (--gpus N)")
    if len(counts) > 1:
        raise ConfigError("--agent-start takes one GPU count (--gpus N)")
    system = _systems(gpu, counts, system_file, {"gpus_per_node": gpus_per_node, "nic_gbps": nic_gbps})[0]
    problem, start = recipe_start(Path(path), system, model=stand_in)
    fitted = fitted_profile(profile, system.gpu.name, analytic)
    return replace(problem, gpu_ref=gpu or "", profile=fitted), start


def _run(
    problem: TuneProblem,
    limits: SpaceLimits,
    options: TuneOptions,
    candidates: list[Candidate] | None,
    show_progress: bool,
) -> TuneResult:
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[evaluated]:,} evaluated, {task.fields[rate]:,.0f}/s, best {task.fields[best]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=not show_progress,
    )
    task_id = progress.add_task("seed", total=None, evaluated=0, rate=0.0, best="-")
    started = False
    lines = LineProgress(err_console, "tune", "candidates", progress_interval_s())  # a log: periodic lines
    log = not err_console.is_terminal  # stderr: also with --json

    def update(u: ProgressUpdate) -> None:
        nonlocal started
        if log:
            if u.total:
                lines(u.done, u.total, f"{u.phase}, {u.evaluated:,} evaluated")
            return
        if not started and u.phase != "seed":  # start the display after the worker processes exist
            progress.start()
            started = True
        best = f"{u.best.tokens_per_sec_per_gpu:,.0f} tok/s/GPU" if u.best else "-"
        rate = u.evaluated / u.elapsed_s if u.elapsed_s > 0 else 0.0
        progress.update(
            task_id,
            description=u.phase,
            completed=u.done,
            total=u.total or None,
            evaluated=u.evaluated,
            rate=rate,
            best=best,
        )

    try:
        return tune(problem, limits, options, candidates=candidates, progress=update)
    finally:
        progress.stop()


def _projection(result: TuneResult, e: Evaluation):  # noqa: ANN202 - a core Projection
    problem = result.problem
    train = training_of(problem, e.candidate, e.train)
    return project_specs(
        problem.model, problem.system(e.candidate.num_gpus), train, ProjectionOptions(profile=problem.profile)
    )


def _explanation(result: TuneResult) -> Explanation | None:
    """The winner against the best configuration that is measurably slower (ties say nothing)."""
    if not result.top:
        return None
    first = result.top[0]
    ranked = rank(result.evaluations, len(result.evaluations))
    slower = [e for e in ranked if e.step_time_s > first.step_time_s * (1 + TIE_TOLERANCE)]
    if not slower:
        return None
    ties = len(ranked) - len(slower) - 1
    second = slower[0]
    return explain(_projection(result, first), first.candidate, _projection(result, second), second.candidate, ties)


def _order_vs_best(result: TuneResult, e: Evaluation, bins: list[GapBin]) -> tuple[float, GapBin | None]:
    """How much less throughput `e` is projected to reach than the best configuration (on one GPU count: how much
    longer its step), and the validation bin of that gap: how often layouts of one job projected that far apart
    measured in the projected order (`validate.ranking`). The bins speak of one job, so only of the best's GPU count."""
    if not result.top:
        return 0.0, None
    best = result.top[0]
    gap = gap_pct(e.tokens_per_sec, best.tokens_per_sec)
    same_job = e.candidate.num_gpus == best.candidate.num_gpus
    return gap, bin_for(gap, bins) if same_job else None


def evaluation_dict(result: TuneResult, e: Evaluation) -> dict[str, Any]:
    train = training_of(result.problem, e.candidate, e.train)
    return {
        **e.candidate.to_dict(),
        "step_time_s": e.step_time_s,
        "tokens_per_sec_per_gpu": e.tokens_per_sec_per_gpu,
        "mfu": e.mfu,
        "memory": {"peak_gib": round(e.peak_gib, 4), "fits": e.fits},
        "command": paraplan_command(result.problem, e.candidate.num_gpus, train),
        "megatron_args": megatron_args(result.problem, train),
        "source": e.source,
    }


def _ranked_dict(result: TuneResult, e: Evaluation, bins: list[GapBin]) -> dict[str, Any]:
    """A top configuration with its projected gap to the best and, from held-out validation, the share of pairs of
    layouts of one job projected that far apart whose projected-faster one measured faster (None for the best, or
    when the calibration ships no bins)."""
    gap, order = _order_vs_best(result, e, bins)
    best = e is result.top[0]
    return {
        **evaluation_dict(result, e),
        "gap_to_best_pct": gap,
        "best_measured_faster_pct": order.agree_pct if order and not best else None,
    }


def result_dict(result: TuneResult, explanation: Explanation | None = None) -> dict[str, Any]:
    bins = bins_from_table(fitted_table())
    out: dict[str, Any] = {
        "top": [_ranked_dict(result, e, bins) for e in result.top],
        "evaluated": result.evaluated,
        "elapsed_s": result.elapsed_s,
        "candidates_per_s": result.candidates_per_s,
        "method": result.method,
        "rejected": {
            "illegal": result.illegal,
            "memory_filter": result.memory_rejected,
            "dominated": result.dominated,
        },
        "resumed": result.resumed,
        "interrupted": result.interrupted,
        "stopped_by": result.stopped_by or None,
        "failed": result.failed,
        "notes": result.notes,
    }
    if result.pareto:
        out["pareto"] = [evaluation_dict(result, e) for e in result.pareto]
    if explanation is not None:
        out["explain"] = explanation.to_dict()
    return out


CSV_METRICS = ("step_time_s", "tokens_per_sec_per_gpu", "mfu", "peak_gib", "fits", "source")


def write_csv(result: TuneResult, path: str) -> None:
    evaluations = sorted(result.evaluations, key=lambda e: (-e.tokens_per_sec, e.candidate.sort_key()))
    config_columns = list(evaluations[0].candidate.to_dict()) if evaluations else []
    try:
        with open(path, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(config_columns + list(CSV_METRICS))
            for e in evaluations:
                config = e.candidate.to_dict()
                writer.writerow(
                    [config[c] for c in config_columns]
                    + [e.step_time_s, e.tokens_per_sec_per_gpu, e.mfu, e.peak_gib, e.fits, e.source]
                )
    except OSError as exc:
        raise ConfigError(f"--csv {path}: {exc.strerror or exc}") from None


def print_result(result: TuneResult, explanation: Explanation | None) -> None:
    problem = result.problem
    title = (
        f"{problem.model.name} on {'/'.join(map(str, problem.gpu_counts))} x {problem.systems[0].gpu.name}, "
        f"gbs {problem.gbs}, seq {problem.seq}: top {len(result.top)}"
    )
    table = Table(title=title)
    bins = bins_from_table(fitted_table())
    for col in ("#", "configuration", "step time", "vs #1", "tokens/s/GPU", "MFU", "memory GiB"):
        wide = col == "configuration"  # the one column that wraps in a narrow terminal
        table.add_column(col, justify="left" if wide else "right", no_wrap=not wide)
    for i, e in enumerate(result.top, 1):
        gap, order = _order_vs_best(result, e, bins)
        table.add_row(
            str(i),
            e.candidate.describe(),
            f"{e.step_time_s:,.3f} s",
            "" if i == 1 else f"+{gap:.1f}%" + (f"\n({order.agree_pct:.0f}%)" if order else ""),
            f"{e.tokens_per_sec_per_gpu:,.0f}",
            f"{e.mfu:.1%}",
            f"{e.peak_gib:,.1f}",
        )
    console.print(table)
    if bins and len(result.top) > 1:
        console.print(
            "vs #1: how much faster #1 is projected (its throughput over this one's; on one GPU count, the step-time "
            "ratio); in parentheses, on #1's GPU count, how often #1 would measure faster, from held-out "
            f"validation over {evidence_phrase(bins)} of measured runs of one job: the share whose projected-faster "
            "run measured faster at that projected gap (50% is a coin toss: measure the close ones)",
            highlight=False,
            soft_wrap=True,
        )
    if not result.top:
        console.print("[red]no configuration fits[/] (relax the constraints, add GPUs, or allow recompute)")
    for i, e in enumerate(result.top, 1):
        train = training_of(problem, e.candidate, e.train)
        console.print(f"[bold]#{i}[/] {paraplan_command(problem, e.candidate.num_gpus, train)}", soft_wrap=True)
        console.print(f"    megatron: {megatron_args(problem, train)}", soft_wrap=True, highlight=False)
    if result.pareto:
        front = Table(title="Pareto front: no other fitting configuration is better in every objective")
        for col in ("configuration", "GPUs", "tokens/s", "memory GiB"):
            front.add_column(col)
        for e in result.pareto[:20]:
            front.add_row(
                e.candidate.describe(), str(e.candidate.num_gpus), f"{e.tokens_per_sec:,.0f}", f"{e.peak_gib:,.1f}"
            )
        console.print(front)
    if explanation is not None:
        _print_explanation(explanation)
    rate = result.candidates_per_s
    console.print(
        f"{result.method}: {result.evaluated:,} evaluated in {result.elapsed_s:,.1f} s ({rate:,.0f}/s); "
        f"rejected before timing: {result.illegal:,} illegal, {result.memory_rejected:,} by the memory filter, "
        f"{result.dominated:,} dominated",
        highlight=False,
    )
    evidence = evidence_for(problem.systems[0].gpu.name)
    console.print(f"measured-run error ({evidence.family}): {evidence.line()}", highlight=False, soft_wrap=True)
    for note in result.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)


def _print_explanation(x: Explanation) -> None:
    table = Table(title="winner vs runner-up (step-time breakdown, critical pipeline rank)")
    for col in ("part", "winner", "runner-up", "difference"):
        table.add_column(col, justify="right" if col != "part" else "left")
    for p in x.parts:
        if p.winner_s == 0 and p.runner_up_s == 0:
            continue
        table.add_row(
            p.part.replace("_", " "),
            f"{p.winner_s * 1e3:,.1f} ms",
            f"{p.runner_up_s * 1e3:,.1f} ms",
            f"{p.delta_s * 1e3:+,.1f} ms",
        )
    table.add_row(
        "[bold]step[/]",
        f"{x.winner_step_s * 1e3:,.1f} ms",
        f"{x.runner_up_step_s * 1e3:,.1f} ms",
        f"{-x.gain_s * 1e3:+,.1f} ms",
    )
    console.print(table)
    console.print(x.summary(), highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    show_spec_defaults(tune_command)
    app.command("tune")(handle_errors(tune_command))
