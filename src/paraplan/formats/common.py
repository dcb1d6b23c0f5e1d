"""What every format reader and writer shares: the result type, problem lists, text loading, env values.

A reader returns `ReadConfig(model, train, hints)`: the model when the file states its whole shape (None
otherwise), the training settings, and `SystemHints` (the GPU count when the file states it, plus what
the file said explicitly, so that command-line options can be layered on top). Bad input raises one
`ConfigError` listing every problem, one line each.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from paraplan.errors import ConfigError
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import model_names, model_preset
from paraplan.specs.training import TrainingSpec
from paraplan.textfiles import load_yaml, names_a_path, read_text_file

MODEL_FIELDS = frozenset(f.name for f in fields(ModelSpec))
SHAPE_IGNORED = frozenset({"name", "source"})


@dataclass(frozen=True, slots=True)
class SystemHints:
    """What a config file says beyond the model and training settings."""

    num_gpus: int | None = None
    """GPUs in the job, when the file states it (torchrun --nnodes x --nproc-per-node, NeMo devices x nodes)."""
    gpus_per_node: int | None = None
    source: str = ""
    notes: tuple[str, ...] = ()
    """Settings accepted but not modelled, and assumptions made (printed as notes, not errors)."""
    model_fields: Mapping[str, Any] = field(default_factory=dict)
    """ModelSpec fields the file set explicitly (to override a preset when the file's model is partial)."""
    train_fields: frozenset[str] = frozenset()
    """TrainingSpec fields the file set explicitly."""


class ReadConfig(NamedTuple):
    model: ModelSpec | None
    train: TrainingSpec
    hints: SystemHints


class Problems:
    """Collects one line per problem, prefixed with the source, and raises them all at once."""

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.lines: list[str] = []
        self.notes: list[str] = []

    def add(self, message: str) -> None:
        self.lines.append(f"{self.source}: {message}" if self.source else message)

    def note(self, message: str) -> None:
        self.notes.append(message)

    def __bool__(self) -> bool:
        return bool(self.lines)

    def raise_if_any(self) -> None:
        if self.lines:
            raise ConfigError(self.lines)


def suggest(name: str, known: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest known name, or ''."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def load_text(path_or_text: str | Path) -> tuple[str, str, Path | None]:
    """(text, source name, file path or None). A Path, or a one-line string naming a file or folder, is read
    (`textfiles.read_text_file`: a folder, an unreadable or non-UTF-8 file is a ConfigError)."""
    if isinstance(path_or_text, Path):
        return read_text_file(path_or_text), str(path_or_text), path_or_text
    if "\n" not in path_or_text and len(path_or_text) < 4096 and names_a_path(path_or_text):
        path = Path(path_or_text)
        return read_text_file(path), str(path), path
    return str(path_or_text), "", None


def load_yaml_mapping(text: str, source: str) -> dict[str, Any]:
    data = load_yaml(text, source)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source or 'input'}: expected a mapping of settings at the top level")
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise ConfigError(f"{source or 'input'}: setting names must be text (got {', '.join(map(repr, bad_keys))})")
    return data


# ----------------------------------------------------------------------------- ${ENV:default} values
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-?([^}]*))?\}")


def substitute_env(value: Any, env: Mapping[str, str], problems: Problems, where: str) -> Any:
    """Replace `${VAR:default}` (Primus) and `${VAR:-default}` (shell) in strings, recursively.

    A string that is one reference becomes the YAML value of its substitution (`${TP:4}` -> 4)."""
    if isinstance(value, dict):
        return {k: substitute_env(v, env, problems, _join(where, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, env, problems, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is None:
            problems.add(f"{where}: environment variable {name} is not set and '{match.group(0)}' has no default")
            return ""
        return default

    whole = _ENV_REF.fullmatch(value.strip())
    replaced = _ENV_REF.sub(one, value)
    if whole:
        try:
            return load_yaml(replaced) if replaced.strip() else None
        except ConfigError:
            return replaced
    return replaced


def _join(where: str, key: str) -> str:
    if not where:
        return key
    return f"{where} {key}" if where.endswith(":") else f"{where}.{key}"


def default_env() -> Mapping[str, str]:
    return os.environ


# ----------------------------------------------------------------------------- the caching allocator's settings
ALLOC_CONF_VAR = "PYTORCH_CUDA_ALLOC_CONF"
"""The environment variable of PyTorch's CUDA caching allocator: comma-separated `key:value` options
(c10/core/AllocatorConfig.cpp); `expandable_segments:True` is `TrainingSpec.expandable_segments`."""
EXPANDABLE_SEGMENTS_CONF = "expandable_segments:True"


def expandable_segments_of(conf: str, problems: Problems, where: str) -> bool:
    """Whether an allocator configuration (`PYTORCH_CUDA_ALLOC_CONF`) turns expandable segments on: PyTorch takes
    `True` or `False` alone (AllocatorConfig `parseExpandableSegments`); any other value is a problem."""
    on = False
    for option in filter(None, (part.strip() for part in conf.split(","))):
        key, _, value = option.partition(":")
        if key.strip() != "expandable_segments":
            continue
        if value.strip() not in ("True", "False"):
            problems.add(f"{where}: expandable_segments takes True or False (got '{value.strip()}')")
        on = value.strip() == "True"
    return on


# ----------------------------------------------------------------------------- typed values
def as_int(value: Any, where: str, problems: Problems) -> int | None:
    if isinstance(value, bool):
        problems.add(f"{where} must be an integer (got {value!r})")
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    hint = " (a shell variable that is not set in the file)" if isinstance(value, str) and "$" in value else ""
    problems.add(f"{where} must be an integer (got {value!r}){hint}")
    return None


def as_float(value: Any, where: str, problems: Problems) -> float | None:
    if isinstance(value, bool):
        problems.add(f"{where} must be a number (got {value!r})")
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    problems.add(f"{where} must be a number (got {value!r})")
    return None


def as_bool(value: Any, where: str, problems: Problems) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    problems.add(f"{where} must be true or false (got {value!r})")
    return None


# ----------------------------------------------------------------------------- precision names
# Transformer Engine / Megatron-core FP8 recipes -> paraplan precision names (specs/training.py PRECISIONS).
FP8_RECIPE_TO_PRECISION = {
    "delayed": "fp8",
    "tensorwise": "fp8_cs",
    "blockwise": "fp8_blockwise",
    "mxfp8": "mxfp8",
}
PRECISION_TO_FP8_RECIPE = {v: k for k, v in FP8_RECIPE_TO_PRECISION.items()}


# ----------------------------------------------------------------------------- vocabulary from a tokenizer
# Megatron, Primus and NeMo often take the vocabulary from a tokenizer rather than a number. These are the
# `vocab_size` values of each model's published config.json (HuggingFace hub), and GPT-2's BPE (50257).
KNOWN_TOKENIZER_VOCAB: Mapping[str, int] = {
    "meta-llama/meta-llama-3-8b": 128256,
    "meta-llama/meta-llama-3-70b": 128256,
    "meta-llama/llama-3.1-8b": 128256,
    "meta-llama/llama-3.1-70b": 128256,
    "meta-llama/llama-3.1-405b": 128256,
    "meta-llama/llama-2-7b-hf": 32000,
    "meta-llama/llama-2-13b-hf": 32000,
    "meta-llama/llama-2-70b-hf": 32000,
    "mistralai/mixtral-8x7b-v0.1": 32000,
    "mistralai/mixtral-8x22b-v0.1": 32000,
    "deepseek-ai/deepseek-v3": 129280,
    "deepseek-ai/deepseek-v3-base": 129280,
    "qwen/qwen3-30b-a3b": 151936,
    "qwen/qwen3-235b-a22b": 151936,
    "gpt2bpetokenizer": 50257,
}


def vocab_from_tokenizer(*names: Any) -> int | None:
    for name in names:
        if isinstance(name, str) and name.strip().lower() in KNOWN_TOKENIZER_VOCAB:
            return KNOWN_TOKENIZER_VOCAB[name.strip().lower()]
    return None


# ----------------------------------------------------------------------------- models
REQUIRED_MODEL_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")


def shape_of(model: ModelSpec) -> dict[str, Any]:
    """The model's shape (not its name or source), with defaults made explicit: a head dim of hidden/heads
    given or not, KV groups equal to the heads given or not, are the same shape."""
    shape = {f: getattr(model, f) for f in sorted(MODEL_FIELDS - SHAPE_IGNORED)}
    shape["kv_channels"] = None if model.is_mla else model.head_dim
    shape["num_query_groups"] = None if model.is_mla else model.kv_groups
    shape["moe_ffn_hidden_size"] = model.expert_ffn if model.is_moe else None
    return shape


def same_shape(a: ModelSpec, b: ModelSpec) -> bool:
    return shape_of(a) == shape_of(b)


def preset_matching(model: ModelSpec) -> str | None:
    """The name of the shipped preset with exactly this shape, if any."""
    for name in model_names():
        if same_shape(model_preset(name), model):
            return name
    return None


def model_from_fields(
    explicit: Mapping[str, Any], defaults: Mapping[str, Any], name: str, source: str, problems: Problems
) -> ModelSpec | None:
    """A ModelSpec when the file gives the whole shape (explicit values over the format's defaults)."""
    if not explicit:
        return None
    missing = [k for k in REQUIRED_MODEL_FIELDS if explicit.get(k) is None]
    if missing:
        problems.note(
            f"the file gives part of the model ({', '.join(sorted(explicit))}) but not {', '.join(missing)}: "
            "give --model (a preset or config.json) and the file's values override it"
        )
        return None
    values = {**defaults, **{k: v for k, v in explicit.items() if v is not None}}
    values.setdefault("ffn_hidden_size", 4 * values["hidden_size"])
    try:
        # name and source are this reader's; any other key that is not a ModelSpec field is a TypeError, reported
        return ModelSpec(name=name, source=source, **{k: v for k, v in values.items() if k not in ("name", "source")})
    except TypeError as exc:  # a field of the wrong kind, or an unknown one, slipped through
        problems.add(f"cannot build the model: {exc}")
        return None


def header_lines(model: ModelSpec, system: Any, train: TrainingSpec, what: str) -> list[str]:
    """Comment lines (without the comment marker) that head every emitted file."""
    return [
        f"{what} written by paraplan",
        f"model {model.name}: {system.num_gpus} x {system.gpu.name} "
        f"({system.num_nodes} nodes x {system.gpus_per_node})",
        f"tp={train.tp} pp={train.pp} vpp={train.vpp} cp={train.cp} ep={train.ep} etp={train.etp} dp={train.dp} "
        f"mbs={train.mbs} gbs={train.gbs} seq={train.seq} {train.precision} recompute={train.recompute_granularity}",
    ]


def finish_gaps(gaps: list[str], strict: bool, fmt: str) -> list[str]:
    """Settings a format cannot express: an error when strict, comment lines otherwise."""
    if gaps and strict:
        raise ConfigError([f"{fmt} cannot express: {g}" for g in gaps])
    return [f"not expressible in {fmt}, nearest setting used: {g}" for g in gaps]
