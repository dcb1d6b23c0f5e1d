"""Speak the configs users already have: read Megatron-LM command lines, Primus experiments, torchtitan
TOML, NeMo / Megatron-Bridge YAML and HuggingFace config.json; write the first four (and config.json) back
for a plan; export a step's operator graph as Chakra execution traces for ASTRA-sim (`formats.chakra`).

    from paraplan.formats import read_config, emit
    model, train, hints = read_config("run.sh", "megatron")
    text = emit("torchtitan", model, system, train)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml

from paraplan.errors import ConfigError
from paraplan.formats.common import ReadConfig, SystemHints, load_text
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec

READ_FORMATS = ("megatron", "primus", "torchtitan", "nemo", "hf")
EMIT_FORMATS = ("megatron", "primus", "torchtitan", "nemo", "hf")
ALIASES = {"megatron-lm": "megatron", "bridge": "nemo", "megatron-bridge": "nemo", "huggingface": "hf"}

__all__ = [
    "EMIT_FORMATS",
    "READ_FORMATS",
    "ReadConfig",
    "SystemHints",
    "detect_format",
    "emit",
    "read_config",
]


def canonical_format(fmt: str, choices: tuple[str, ...] = READ_FORMATS) -> str:
    name = ALIASES.get(fmt.lower(), fmt.lower())
    if name not in choices:
        raise ConfigError(f"unknown config format '{fmt}': choose one of {', '.join(choices)}")
    return name


def detect_format(path_or_text: str | Path) -> str:
    """Guess the format from the file name, else from the content: TOML tables, a JSON object, command-line
    flags, or a YAML mapping (Primus has `modules:`, NeMo the rest)."""
    text, _, path = load_text(path_or_text)
    suffix = path.suffix.lower() if path else ""
    if suffix in (".toml", ".json"):
        return "torchtitan" if suffix == ".toml" else "hf"
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    first = lines[0] if lines else ""
    if suffix not in (".yaml", ".yml"):
        if first.startswith("{"):
            return "hf"
        if first.startswith("["):
            return "torchtitan"
        if any(line.startswith("--") or ".py" in line or line.endswith("\\") for line in lines):
            return "megatron"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return "megatron"
    if isinstance(data, dict):
        return "primus" if "modules" in data else "nemo"
    return "megatron"


def read_config(
    path_or_text: str | Path,
    fmt: str | None = None,
    *,
    num_gpus: int | None = None,
    env: Mapping[str, str] | None = None,
    model: ModelSpec | None = None,
) -> ReadConfig:
    """(model or None, training, hints) from a config file or its text. `fmt` None guesses it. `model` is
    the model to assume where the file needs one and does not describe it (e.g. --model).

    Raises ConfigError listing every unknown or contradictory setting, one line each."""
    name = canonical_format(fmt) if fmt else detect_format(path_or_text)
    environ = os.environ if env is None else env
    if name == "megatron":
        from paraplan.formats.megatron import read_megatron

        return read_megatron(path_or_text, num_gpus=num_gpus, env=environ, model=model)
    if name == "primus":
        from paraplan.formats.primus import read_primus

        return read_primus(path_or_text, num_gpus=num_gpus, env=environ, model=model)
    if name == "torchtitan":
        from paraplan.formats.torchtitan import read_torchtitan

        return read_torchtitan(path_or_text, num_gpus=num_gpus, model=model)
    if name == "nemo":
        from paraplan.formats.nemo import read_nemo

        return read_nemo(path_or_text, num_gpus=num_gpus, model=model)
    from paraplan.formats.hf import read_hf

    return read_hf(path_or_text, num_gpus=num_gpus)


Writer = Callable[..., str]


def _writer(name: str) -> Writer:
    if name == "megatron":
        from paraplan.formats.megatron import write_megatron

        return write_megatron
    if name == "primus":
        from paraplan.formats.primus import write_primus

        return write_primus
    if name == "torchtitan":
        from paraplan.formats.torchtitan import write_torchtitan

        return write_torchtitan
    if name == "nemo":
        from paraplan.formats.nemo import write_nemo

        return write_nemo
    from paraplan.formats.hf import write_hf

    return write_hf


def emit(fmt: str, model: ModelSpec, system: SystemSpec, train: TrainingSpec, *, strict: bool = False) -> str:
    """The config text of one plan in `fmt` (megatron, primus, torchtitan, nemo, hf), ready to run.

    Settings the format cannot express are listed in comments at the top (or raise ConfigError when
    `strict`)."""
    return _writer(canonical_format(fmt, EMIT_FORMATS))(model, system, train, strict=strict)
