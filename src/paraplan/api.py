"""Library API: names or specs in, typed results out."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from paraplan.errors import ConfigError
from paraplan.memory.model import MemoryResult
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.result import Projection
from paraplan.specs.hf import load_hf_config
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.textfiles import is_existing_file

if TYPE_CHECKING:
    from paraplan.tune.agent import AgentOptions, AgentResult
    from paraplan.tune.space import SpaceLimits
    from paraplan.tune.tuner import TuneOptions, TuneResult


def resolve_model(model: str | ModelSpec) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    if model.endswith(".json") or is_existing_file(model):
        return load_hf_config(model)
    return model_preset(model)


def resolve_system(gpu: str | SystemSpec, gpus: int | None) -> SystemSpec:
    if isinstance(gpu, SystemSpec):
        return gpu if gpus is None else gpu.with_overrides(num_gpus=gpus)
    if gpus is None:
        raise ConfigError("the GPU count is required (--gpus N)")
    return system_preset(gpu, gpus)


def project(
    model: str | ModelSpec,
    gpu: str | SystemSpec,
    gpus: int | None = None,
    train: TrainingSpec | None = None,
    *,
    options: ProjectionOptions | None = None,
    **training: object,
) -> Projection:
    """Project one training step. `training` takes Megatron names or aliases (tp=8, pp=4, mbs=1, ...)."""
    spec = (train or TrainingSpec()).with_values(**training)
    return project_specs(resolve_model(model), resolve_system(gpu, gpus), spec, options)


def memory(
    model: str | ModelSpec,
    gpu: str | SystemSpec,
    gpus: int | None = None,
    train: TrainingSpec | None = None,
    **training: object,
) -> MemoryResult:
    """Memory per GPU by part, with the FITS/OOM verdict."""
    return project(model, gpu, gpus, train, **training).memory


def tune_agent(
    model: str | ModelSpec,
    gpu: str | SystemSpec,
    gpus: int | None,
    gbs: int,
    seq: int,
    options: AgentOptions | None = None,
    *,
    base: TrainingSpec | None = None,
    search: TuneOptions | None = None,
    limits: SpaceLimits | None = None,
) -> tuple[TuneResult, AgentResult]:
    """Search (seed planner, then the search), then let the agent improve on the best found (`tune.agent`):
    (the search's result, the agent's log and best). `base`: the settings the search does not change."""
    from paraplan.tune.agent import run_agent
    from paraplan.tune.agent.starts import search_starts
    from paraplan.tune.candidate import TuneProblem
    from paraplan.tune.tuner import TuneOptions, tune

    system = resolve_system(gpu, gpus)
    problem = TuneProblem(resolve_model(model), (system,), gbs, seq, base or TrainingSpec())
    search = search or TuneOptions(study_path=options.study_path if options else None)
    result = tune(problem, limits, search)
    return result, run_agent(*search_starts(result), options)


def agent_from_recipe(
    recipe: str | Path,
    gpu: str | SystemSpec,
    gpus: int | None = None,
    options: AgentOptions | None = None,
    *,
    fmt: str | None = None,
    model: str | ModelSpec | None = None,
) -> AgentResult:
    """Start the agent from a published recipe (a Megatron-LM, NeMo / Megatron-Bridge, Primus or torchtitan
    config, read with `formats.read_config`): the best it finds, the gain over the recipe and the path there."""
    from paraplan.tune.agent import run_agent
    from paraplan.tune.agent.starts import recipe_start

    stand_in = resolve_model(model) if model is not None else None
    if isinstance(gpu, SystemSpec):
        problem, start = recipe_start(recipe, resolve_system(gpu, gpus), fmt=fmt, model=stand_in)
    else:
        problem, start = recipe_start(recipe, gpu=gpu, num_gpus=gpus, fmt=fmt, model=stand_in)
    return run_agent(problem, [start], options)
