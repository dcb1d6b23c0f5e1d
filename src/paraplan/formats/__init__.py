"""Speak the configs users already have: read Megatron-LM command lines, Primus experiments, torchtitan
TOML, NeMo / Megatron-Bridge YAML and HuggingFace config.json; write the first four (and config.json) back
for a plan; export a step's operator graph as Chakra execution traces for ASTRA-sim (`formats.chakra`).

    from paraplan.formats import read_config, emit
    model, train, hints = read_config("run.sh", "megatron")
    text = emit("torchtitan", model, system, train)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from paraplan.formats.common import ReadConfig, SystemHints, load_text
from paraplan.formats.registry import ALIASES, EMIT_FORMATS, FORMATS, READ_FORMATS, config_format, detect
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec

__all__ = [
    "ALIASES",
    "EMIT_FORMATS",
    "FORMATS",
    "READ_FORMATS",
    "ReadConfig",
    "SystemHints",
    "detect_format",
    "emit",
    "read_config",
]


def canonical_format(fmt: str, choices: tuple[str, ...] = READ_FORMATS) -> str:
    return config_format(fmt, choices).name


def detect_format(path_or_text: str | Path) -> str:
    """Guess the format from the file name, else from the content (`formats.registry`: TOML tables, a JSON
    object, command-line flags, or a YAML mapping: Primus has `modules:`, NeMo the rest)."""
    text, _, path = load_text(path_or_text)
    return detect(path.suffix.lower() if path else "", text)


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
    return FORMATS[name].read(path_or_text, num_gpus=num_gpus, env=environ, model=model)


def emit(fmt: str, model: ModelSpec, system: SystemSpec, train: TrainingSpec, *, strict: bool = False) -> str:
    """The config text of one plan in `fmt` (megatron, primus, torchtitan, nemo, hf), ready to run.

    Settings the format cannot express are listed in comments at the top (or raise ConfigError when
    `strict`)."""
    return config_format(fmt, EMIT_FORMATS).writer()(model, system, train, strict=strict)
