"""`paraplan convert`, and the helpers `project` uses to start from a framework's config file.

paraplan convert --from megatron --input run.sh --to torchtitan
paraplan convert --input exp.yaml --to chakra --output traces/ --gpu h100-sxm5-80gb
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from paraplan.cli.common import err_console, handle_errors, model_from_options, system_from_options
from paraplan.errors import ConfigError
from paraplan.formats import EMIT_FORMATS, READ_FORMATS, ReadConfig, canonical_format, emit, read_config
from paraplan.specs.files import training_from_file
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check
from paraplan.textfiles import OUTPUT_MAX_MIB, read_text_file

Opt = typer.Option
TARGETS = (*EMIT_FORMATS, "chakra")


# ----------------------------------------------------------------------------- helpers for `project`
def read_config_options(
    megatron_args: str | None,
    from_config: str | None,
    fmt: str | None,
    gpus: int | None,
    model: str | None = None,
) -> ReadConfig | None:
    """The config given by `--megatron-args "..."` or `--from-config FILE [--format FMT]`, or None.
    `model` (--model) is what the file is read against when it does not describe the model."""
    if megatron_args and from_config:
        raise ConfigError("give --megatron-args or --from-config, not both")
    if not megatron_args and not from_config:
        return None
    base = None
    if model:
        from paraplan.api import resolve_model

        base = resolve_model(model)
    if megatron_args:
        return read_config(megatron_args, "megatron", num_gpus=gpus, model=base)
    assert from_config is not None
    read_text_file(from_config, "--from-config")  # a clear line for a folder, a missing or non-UTF-8 file
    return read_config(Path(from_config), fmt, num_gpus=gpus, model=base)


def model_with_config(cfg: ReadConfig | None, model: str | None, fields: dict[str, Any]) -> ModelSpec:
    """--model and explicit fields as usual; a config file's model (or its partial fields) in between:
    explicit options > the file > the --model preset."""
    if cfg is None:
        return model_from_options(model, fields)
    explicit = {k: v for k, v in fields.items() if v is not None}
    if model:
        return model_from_options(model, {**cfg.hints.model_fields, **explicit})
    if cfg.model is not None:
        return cfg.model.with_overrides(**explicit)
    return model_from_options(None, {**cfg.hints.model_fields, **explicit})


def system_with_config(
    cfg: ReadConfig | None, gpu: str | None, gpus: int | None, system_file: str | None, overrides: dict[str, Any]
) -> SystemSpec:
    if cfg is not None:
        gpus = gpus or cfg.hints.num_gpus
        if overrides.get("gpus_per_node") is None and cfg.hints.gpus_per_node:
            overrides = {**overrides, "gpus_per_node": cfg.hints.gpus_per_node}
    return system_from_options(gpu, gpus, system_file, overrides)


def training_with_config(cfg: ReadConfig | None, config_file: str | None, values: dict[str, Any]) -> TrainingSpec:
    """Training settings: the config file's, then --config YAML, then explicit options."""
    base = cfg.train if cfg is not None else TrainingSpec()
    if config_file:
        base = training_from_file(config_file, base)
    layout = values.pop("pipeline_layout", None)
    if layout:
        try:
            values["pipeline_layout"] = tuple(int(x) for x in str(layout).split(","))
        except ValueError:
            raise ConfigError(f"--pipeline-layout must be comma-separated layer counts (got '{layout}')") from None
    return base.with_values(**values)


def print_notes(cfg: ReadConfig | None) -> None:
    if cfg is None:
        return
    for note in cfg.hints.notes:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)


def emit_plan(fmt: str, model: ModelSpec, system: SystemSpec, train: TrainingSpec, *, strict: bool = False) -> str:
    """The text `--emit FMT` prints (also what `tune --emit` prints for each top configuration)."""
    return emit(fmt, model, system, train, strict=strict)


def export_plan_chakra(
    model: ModelSpec, system: SystemSpec, train: TrainingSpec, folder: str, max_mib: float | None = None
) -> str:
    """Write Chakra traces for a plan (refused over `max_mib`, default `report.trace.DEFAULT_MAX_MIB`); returns a
    one-line summary with the size written."""
    from paraplan.formats.chakra import export_chakra
    from paraplan.report.trace import DEFAULT_MAX_MIB
    from paraplan.textfiles import mib_text

    result = export_chakra(model, system, train, folder, max_mib=DEFAULT_MAX_MIB if max_mib is None else max_mib)
    return (
        f"wrote {len(result.paths)} Chakra traces ({sum(result.nodes_per_rank):,} nodes, "
        f"{mib_text(result.bytes_written)} MiB) and {result.comm_groups_path.name} to {folder}"
    )


# ----------------------------------------------------------------------------- convert
def _default_gpu(train: TrainingSpec) -> str:
    """A GPU preset that supports the config's precision (only used to check the layout)."""
    return "b200" if train.precision in ("mxfp8", "nvfp4") else "h100-sxm5-80gb"


def _convert(
    source: Annotated[str, Opt("--input", "-i", help="the config file to read")],
    target: Annotated[str, Opt("--to", help=f"output format: {' '.join(TARGETS)}")],
    source_format: Annotated[
        str | None, Opt("--from", help=f"input format: {' '.join(READ_FORMATS)} (default: guessed from the file)")
    ] = None,
    output: Annotated[
        str | None, Opt("--output", "-o", help="file to write (a folder for chakra); default: print")
    ] = None,
    model: Annotated[
        str | None, Opt("--model", "-m", help="preset or config.json, when the input does not give the model")
    ] = None,
    gpu: Annotated[str | None, Opt("--gpu", "-g", help="GPU preset (for checks and Chakra durations)")] = None,
    gpus: Annotated[int | None, Opt("--gpus", "-n", help="GPU count, when the input does not state it")] = None,
    strict: Annotated[bool, Opt("--strict", help="fail when the target format cannot express a setting")] = False,
    trace_max_mib: Annotated[
        float, Opt("--trace-max-mib", help="--to chakra: refuse traces estimated larger than this (MiB)")
    ] = OUTPUT_MAX_MIB,
) -> None:
    """Convert a training config between Megatron-LM, Primus, torchtitan, NeMo and HuggingFace, or export
    its training step as Chakra execution traces for ASTRA-sim."""
    if not trace_max_mib > 0:  # NaN too
        raise ConfigError(f"--trace-max-mib must be > 0 (got {trace_max_mib})")
    target = "chakra" if target.lower() == "chakra" else canonical_format(target, EMIT_FORMATS)
    if source_format:
        source_format = canonical_format(source_format)
    if not Path(source).is_file():
        raise ConfigError(f"input file not found: {source}")
    base = None
    if model:
        from paraplan.api import resolve_model

        base = resolve_model(model)
    cfg = read_config(Path(source), source_format, num_gpus=gpus, model=base)
    print_notes(cfg)
    spec = model_with_config(cfg, model, {})
    n = gpus or cfg.hints.num_gpus
    if n is None:
        raise ConfigError(f"{source} does not state the GPU count: give --gpus")
    overrides = {"gpus_per_node": cfg.hints.gpus_per_node} if cfg.hints.gpus_per_node else {}
    system = system_from_options(gpu or _default_gpu(cfg.train), n, None, overrides)
    train = check(spec, system, cfg.train)
    if target == "chakra":
        if not output:
            raise ConfigError("--to chakra needs --output FOLDER")
        if gpu is None:
            err_console.print(f"[yellow]note:[/] no --gpu: durations are for {system.gpu.name}", highlight=False)
        summary = export_plan_chakra(spec, system, train, output, trace_max_mib)
        err_console.print(summary, highlight=False, markup=False, soft_wrap=True)
        return
    text = emit(target, spec, system, train, strict=strict)
    if output:
        Path(output).write_text(text)
        err_console.print(f"wrote {output}", highlight=False)
    else:
        typer.echo(text, nl=False)


def register(app: typer.Typer) -> None:
    app.command("convert")(handle_errors(_convert))
