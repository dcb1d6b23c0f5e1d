"""Library API: names or specs in, typed results out."""

from __future__ import annotations

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
