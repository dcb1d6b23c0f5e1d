"""The config formats paraplan reads and writes, declared once.

Each format is one module under `paraplan.formats` with a reader (`read_<name>(path_or_text, *, num_gpus, ...)
-> ReadConfig`) and/or a writer (`write_<name>(model, system, train, *, strict) -> str`), plus one
`ConfigFormat` entry in `FORMATS` below that names them, its aliases, the file suffixes that identify it and
a content test for files whose name does not. Adding a format is that module and that entry; `read_config`,
`emit`, `detect_format`, the CLI's `--from`/`--to`/`--format`/`--emit` choices and their help text all read
this table. The modules are imported only when a format is used, so the table costs nothing at start-up.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from paraplan.errors import ConfigError
from paraplan.textfiles import load_yaml


@dataclass(frozen=True)
class Sniff:
    """What a content test sees of a file: its suffix and text (YAML parsed on first use)."""

    suffix: str
    text: str

    @cached_property
    def lines(self) -> tuple[str, ...]:
        stripped = (line.strip() for line in self.text.splitlines())
        return tuple(line for line in stripped if line and not line.startswith("#"))

    @property
    def first(self) -> str:
        return self.lines[0] if self.lines else ""

    @cached_property
    def yaml_data(self) -> Any:
        try:
            return load_yaml(self.text)
        except ConfigError:
            return None

    @property
    def yaml_suffix(self) -> bool:
        return self.suffix in (".yaml", ".yml")


@dataclass(frozen=True)
class ConfigFormat:
    name: str
    title: str
    """How messages and help name it."""
    module: str
    """The module under paraplan.formats that holds `read_<name>` and/or `write_<name>`."""
    reads: bool = True
    writes: bool = True
    aliases: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()
    """File suffixes that name this format outright (checked before any content test)."""
    sniff: Callable[[Sniff], bool] = lambda _: False
    """Content test for files whose suffix does not decide; tried in the order of `FORMATS`."""

    def _function(self, verb: str) -> Callable[..., Any]:
        module = importlib.import_module(f"paraplan.formats.{self.module}")
        return getattr(module, f"{verb}_{self.name}")

    def read(self, path_or_text: str | Path, **context: Any) -> Any:
        """Call the reader with the context it takes (num_gpus, env, model)."""
        if not self.reads:
            raise ConfigError(f"paraplan cannot read {self.title} configs")
        reader = self._function("read")
        accepted = inspect.signature(reader).parameters
        return reader(path_or_text, **{k: v for k, v in context.items() if k in accepted})

    def writer(self) -> Callable[..., str]:
        if not self.writes:
            raise ConfigError(f"paraplan cannot write {self.title} configs")
        return self._function("write")


def _command_line(s: Sniff) -> bool:
    return not s.yaml_suffix and any(line.startswith("--") or ".py" in line or line.endswith("\\") for line in s.lines)


FORMATS: Mapping[str, ConfigFormat] = {
    f.name: f
    for f in (
        ConfigFormat(
            "hf", "HuggingFace config.json", "hf", aliases=("huggingface",), suffixes=(".json",),
            sniff=lambda s: not s.yaml_suffix and s.first.startswith("{"),
        ),
        ConfigFormat(
            "torchtitan", "torchtitan TOML", "torchtitan", suffixes=(".toml",),
            sniff=lambda s: not s.yaml_suffix and s.first.startswith("["),
        ),
        ConfigFormat("megatron", "Megatron-LM command line", "megatron", aliases=("megatron-lm",), sniff=_command_line),
        ConfigFormat(
            "primus", "Primus experiment YAML", "primus",
            sniff=lambda s: isinstance(s.yaml_data, dict) and "modules" in s.yaml_data,
        ),
        ConfigFormat(
            "nemo", "NeMo 2.0 / Megatron-Bridge YAML", "nemo", aliases=("bridge", "megatron-bridge"),
            sniff=lambda s: isinstance(s.yaml_data, dict),
        ),
    )
}  # fmt: skip
FALLBACK = "megatron"
"""A file no test recognises is read as a Megatron-LM argument string (the reader then names what it finds)."""

# Order of the CLI's choices and help (the order the formats were added to paraplan).
_ORDER = ("megatron", "primus", "torchtitan", "nemo", "hf")
READ_FORMATS: tuple[str, ...] = tuple(n for n in _ORDER if FORMATS[n].reads) + tuple(
    n for n in FORMATS if n not in _ORDER and FORMATS[n].reads
)
EMIT_FORMATS: tuple[str, ...] = tuple(n for n in _ORDER if FORMATS[n].writes) + tuple(
    n for n in FORMATS if n not in _ORDER and FORMATS[n].writes
)
ALIASES: Mapping[str, str] = {alias: f.name for f in FORMATS.values() for alias in f.aliases}


def config_format(name: str, choices: tuple[str, ...] = READ_FORMATS) -> ConfigFormat:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in choices:
        raise ConfigError(f"unknown config format '{name}': choose one of {', '.join(choices)}")
    return FORMATS[key]


def detect(suffix: str, text: str) -> str:
    """The format of a file: its suffix when one names a format, else the first content test that holds."""
    for f in FORMATS.values():
        if suffix in f.suffixes:
            return f.name
    sniff = Sniff(suffix, text)
    return next((f.name for f in FORMATS.values() if f.sniff(sniff)), FALLBACK)
