"""Where the agent starts: the search's best and the seed planner's best, or a published recipe read with the
config format readers (`formats.read_config`: Megatron-LM arguments, NeMo / Megatron-Bridge, Primus, torchtitan)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from paraplan.errors import ConfigError
from paraplan.formats import read_config
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import system_preset
from paraplan.specs.system import SystemSpec
from paraplan.specs.validate import check
from paraplan.tune.agent.loop import StartPoint
from paraplan.tune.candidate import TuneProblem
from paraplan.tune.reproduce import training_of
from paraplan.tune.tuner import TuneResult, rank


def search_starts(result: TuneResult) -> tuple[TuneProblem, list[StartPoint]]:
    """(the problem on the best's GPU count, the search's best and, when another, the seed planner's best on that
    count): the agent keeps the job's GPU count, so a search over several counts hands it the winning one."""
    if not result.top:
        raise ConfigError("the search found no configuration that fits: the agent has nowhere to start")
    best = result.top[0]
    gpus = best.candidate.num_gpus
    problem = replace(result.problem, systems=(result.problem.system(gpus),))
    starts = [StartPoint(f"search best ({best.source})", training_of(problem, best.candidate, best.train))]
    ranked = rank(result.evaluations, len(result.evaluations))
    seeds = [e for e in ranked if e.source == "seed" and e.candidate.num_gpus == gpus]
    if seeds and seeds[0] is not best:
        starts.append(StartPoint("seed planner best", training_of(problem, seeds[0].candidate, seeds[0].train)))
    return problem, starts


def recipe_start(
    path: str | Path,
    system: SystemSpec | None = None,
    *,
    gpu: str | None = None,
    num_gpus: int | None = None,
    fmt: str | None = None,
    model: ModelSpec | None = None,
) -> tuple[TuneProblem, StartPoint]:
    """(the problem a recipe poses, the recipe as a starting point). `system` (or `gpu` and the GPU count, the
    file's when it states one) is where it runs; `model` stands in where the file does not describe one."""
    num_gpus = num_gpus or (system.num_gpus if system is not None else None)
    read = read_config(Path(path), fmt, num_gpus=num_gpus, model=model)  # a file, never a string of arguments
    found = read.model or model
    if found is None:
        raise ConfigError(f"{path}: describes no model; give one (--model)")
    if system is None:
        if gpu is None:
            raise ConfigError("the recipe's GPU is needed (--gpu PRESET)")
        count = num_gpus or read.hints.num_gpus
        if count is None:
            raise ConfigError(f"{path}: states no GPU count; give one (--gpus N)")
        system = system_preset(gpu, count)
    train = check(found, system, read.train)
    problem = TuneProblem(found, (system,), train.gbs, train.seq, train, model_ref=str(path), gpu_ref=gpu or "")
    return problem, StartPoint(f"recipe {Path(path).name}", train)
