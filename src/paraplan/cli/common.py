"""Shared CLI plumbing: building specs from options, and turning bad input into exit code 2."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from paraplan.cost.profiled import ProfileRef, profile_for
from paraplan.errors import ConfigError
from paraplan.specs.files import system_from_file, training_from_file
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec

console = Console()
err_console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])


def fail(problems: list[str] | str) -> typer.Exit:
    lines = [problems] if isinstance(problems, str) else problems
    for line in lines:
        err_console.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def handle_errors(fn: F) -> F:
    """Bad input -> one line per problem on stderr and exit code 2, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            raise fail(exc.problems) from None
        except KeyboardInterrupt:
            err_console.print("interrupted")
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


# ----------------------------------------------------------------------------- JSON out
def finite(value: Any) -> Any:
    """The value with every infinite or NaN float replaced by None: JSON has no Infinity or NaN (RFC 8259)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def json_text(value: Any) -> str:
    """Strict JSON (no Infinity, no NaN: they become null), for every `--json` output."""
    return json.dumps(finite(value), allow_nan=False)


# ----------------------------------------------------------------------------- outputs, checked before any work
def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path.cwd()


def output_problems(files: dict[str, str | None], folders: dict[str, str | None] | None = None) -> list[str]:
    """One line per output that cannot be written: `files` and `folders` map an option (`--trace`) to its path.
    A file needs an existing, writable folder and must not be a folder; a folder is created where its nearest
    existing parent is a writable folder."""
    problems: list[str] = []
    for option, name in files.items():
        if not name:
            continue
        path = Path(name)
        parent = path.parent if str(path.parent) else Path(".")
        if path.is_dir():
            problems.append(f"{option} {name}: is a folder, not a file")
        elif not parent.is_dir():
            problems.append(f"{option} {name}: folder {parent} does not exist")
        elif not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            problems.append(f"{option} {name}: not writable (permission denied)")
    for option, name in (folders or {}).items():
        if not name:
            continue
        existing = _nearest_existing(Path(name))
        if not existing.is_dir():
            problems.append(f"{option} {name}: {existing} is a file, not a folder")
        elif not os.access(existing, os.W_OK):
            problems.append(f"{option} {name}: {existing} is not writable (permission denied)")
    return problems


def check_outputs(files: dict[str, str | None], folders: dict[str, str | None] | None = None) -> None:
    """Raise a ConfigError for every output that cannot be written, before anything is computed or printed."""
    problems = output_problems(files, folders)
    if problems:
        raise ConfigError(problems)


# ----------------------------------------------------------------------------- option types
ModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="Preset name (paraplan models) or a HuggingFace config.json path.")
]
GpuOpt = Annotated[str | None, typer.Option("--gpu", "-g", help="GPU/system preset (paraplan gpus).")]
GpusOpt = Annotated[int | None, typer.Option("--gpus", "-n", help="Number of GPUs.")]
KernelFusionOpt = Annotated[
    bool | None,
    typer.Option("--kernel-fusion/--no-kernel-fusion", help="fused norm/SwiGLU/rotary kernels, or eager PyTorch"),
]
MoeDispatcherOpt = Annotated[
    str | None,
    typer.Option(
        "--moe-dispatcher",
        help="MoE token dispatcher: alltoall, or flex (DeepEP / HybridEP: a token sent once per rank and node)",
    ),
]
CrossEntropyFusionOpt = Annotated[
    bool | None,
    typer.Option(
        "--cross-entropy-fusion/--no-cross-entropy-fusion",
        help="fused vocab-parallel loss kernel (Megatron --cross-entropy-loss-fusion), or eager fp32 PyTorch",
    ),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="fitted kernel profile: a file (paraplan fit), or auto (shipped for the GPU) (default: analytic costs)",
    ),
]
AnalyticOpt = Annotated[bool, typer.Option("--analytic", help="ignore shipped profiles; analytic costs only")]


def fitted_profile(profile: str | None, gpu: str, analytic: bool = False) -> ProfileRef | None:
    """`--profile PROFILE|auto` and `--analytic` for a GPU preset: the `ProjectionOptions.profile` (None: analytic)."""
    return profile_for(profile, gpu, analytic)


def model_from_options(model: str | None, fields: dict[str, Any]) -> ModelSpec:
    """A preset or config.json, with explicit fields overriding; or a model from explicit fields alone."""
    from paraplan.api import resolve_model

    explicit = {k: v for k, v in fields.items() if v is not None}
    if model:
        return resolve_model(model).with_overrides(**explicit)
    required = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")
    missing = [f"--{k.replace('_', '-')}" for k in required if k not in explicit]
    if missing:
        raise ConfigError(f"give --model or the explicit fields; missing: {', '.join(missing)}")
    explicit.setdefault("ffn_hidden_size", 4 * explicit["hidden_size"])
    explicit.setdefault("name", "custom")
    return ModelSpec(**explicit)


def system_from_options(
    gpu: str | None, gpus: int | None, system_file: str | None, overrides: dict[str, Any]
) -> SystemSpec:
    from paraplan.api import resolve_system

    if system_file:
        system = system_from_file(system_file, gpus)
    elif gpu is None:
        raise ConfigError("give --gpu PRESET (see `paraplan gpus`) or --system-file FILE.yaml")
    else:
        system = resolve_system(gpu, gpus)
    return system.with_overrides(**{k: v for k, v in overrides.items() if v is not None})


def training_from_options(config_file: str | None, values: dict[str, Any]) -> TrainingSpec:
    base = training_from_file(config_file) if config_file else TrainingSpec()
    layout = values.pop("pipeline_layout", None)
    if layout:
        try:
            values["pipeline_layout"] = tuple(int(x) for x in str(layout).split(","))
        except ValueError:
            raise ConfigError(f"--pipeline-layout must be comma-separated layer counts (got '{layout}')") from None
    ids = values.pop("recompute_layer_ids", None)
    if ids:
        try:
            values["recompute_layer_ids"] = tuple(int(x) for x in str(ids).split(","))
        except ValueError:
            raise ConfigError(f"--recompute-layer-ids must be comma-separated layer indices (got '{ids}')") from None
    return base.with_values(**values)
