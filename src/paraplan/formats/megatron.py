"""Megatron-LM command lines: read the arguments of `pretrain_gpt.py`, write them back ready to run.

Input is a string of arguments or a file of them: comments (#), line continuations, `NAME=value` shell
assignments used as `$NAME` / `${NAME:-default}` in values, bash arrays (`ARGS=( ... )`) and a launcher
prefix (`torchrun --nproc-per-node 8 --nnodes 4 pretrain_gpt.py ...`, whose sizes give the GPU count).
Unknown flags, flags given twice with different values and contradictory flags are all reported.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from paraplan.errors import ConfigError
from paraplan.formats.common import (
    ALLOC_CONF_VAR,
    EXPANDABLE_SEGMENTS_CONF,
    Problems,
    ReadConfig,
    expandable_segments_of,
    finish_gaps,
    header_lines,
    load_text,
    suggest,
)
from paraplan.formats.megatron_args import BY_DEST, BY_FLAG
from paraplan.formats.megatron_map import megatron_values, specs_from_megatron, typed_value
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import resolve_dp

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_ARRAY_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]\}$")
NEWLINE = "\n"
_SHELL_ENDS = frozenset({"|", "||", "&&", ";", "&"})
_LAUNCHER_SIZES = {"--nproc-per-node": "nproc", "--nproc_per_node": "nproc", "--nnodes": "nnodes"}
RUN_EXTRAS: tuple[tuple[str, Any], ...] = (
    # what a run needs beyond the plan: synthetic data and a short schedule (replace with your own)
    ("tokenizer_type", "NullTokenizer"),
    ("mock_data", True),
    ("train_iters", 100),
    ("eval_iters", 0),
    ("lr", "1.0e-4"),
    ("log_interval", 1),
    ("log_throughput", True),
)


def _expand(value: str, variables: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        return m.group(2) if m.group(2) is not None else m.group(0)

    return _VAR.sub(one, value)


def tokenize(text: str, problems: Problems) -> list[str]:
    """Shell words, with NEWLINE between logical lines (continuations joined, comments dropped)."""
    tokens: list[str] = []
    for line in re.sub(r"\\\r?\n", " ", text).splitlines():
        try:
            tokens += [*shlex.split(line, comments=True), NEWLINE]
        except ValueError as exc:
            problems.add(f"cannot split '{line.strip()[:60]}' like a shell would ({exc})")
    problems.raise_if_any()
    return tokens


def split_script(tokens: list[str], env: Mapping[str, str]) -> tuple[list[str], list[str], dict[str, str]]:
    """(launcher words, argument words, shell variables) of a command line or a launch script.

    `NAME=value` sets a variable; `NAME=( ... )` defines an array, spliced in where `${NAME[@]}` is used
    (or, when no command uses them, all arrays in order). The command ends at a pipe or redirection."""
    variables: dict[str, str] = dict(env)
    arrays: dict[str, list[str]] = {}
    current: list[str] | None = None
    words: list[str] = []
    script_seen = False
    for tok in tokens:
        if tok == NEWLINE:
            if script_seen and current is None:
                break  # the launch command is complete
            continue
        if current is not None:  # inside NAME=( ... )
            if tok == ")" or (tok.endswith(")") and not tok.startswith("(")):
                if tok != ")":
                    current.append(tok[:-1])
                current = None
            else:
                current.append(tok)
            continue
        if script_seen and (tok in _SHELL_ENDS or tok.startswith((">", "1>", "2>"))):
            break
        m = _ASSIGN.match(tok)
        if m:
            name, value = m.groups()
            if value.startswith("("):
                arrays[name] = []
                rest = value[1:]
                if rest.endswith(")"):
                    arrays[name] += [rest[:-1]] if rest[:-1] else []
                else:
                    current = arrays[name]
                    current += [rest] if rest else []
            else:
                variables[name] = _expand(value, variables)
            continue
        ref = _ARRAY_REF.match(tok)
        if ref:
            words += arrays.get(ref.group(1), [])
            continue
        if tok in ("export", "\\"):
            continue
        words.append(tok)
        script_seen = script_seen or tok.endswith(".py")
    if not words and arrays:
        words = [w for body in arrays.values() for w in body]
    script = next((i for i, w in enumerate(words) if w.endswith(".py")), None)
    if script is None:
        return [], words, variables
    return words[:script], words[script + 1 :], variables


def _launcher_sizes(
    launcher: list[str], variables: Mapping[str, str], problems: Problems
) -> tuple[int | None, int | None]:
    found: dict[str, str] = {}
    for i, tok in enumerate(launcher):
        flag, eq, value = tok.partition("=")
        if flag in _LAUNCHER_SIZES:
            raw = value if eq else (launcher[i + 1] if i + 1 < len(launcher) else "")
            found[_LAUNCHER_SIZES[flag]] = _expand(raw, variables)
    sizes: dict[str, int | None] = {}
    for key, raw in found.items():
        if raw.isdigit():
            sizes[key] = int(raw)
        else:
            sizes[key] = None
            problems.note(f"launcher {key} '{raw}' is not a number: the GPU count is not taken from the launcher")
    per_node = sizes.get("nproc")
    nodes = sizes.get("nnodes", 1 if per_node else None)
    return (per_node * nodes if per_node and nodes else None), per_node


def parse_flags(words: list[str], variables: Mapping[str, str], problems: Problems) -> dict[str, Any]:
    """Flags -> typed values by destination name; reports unknown, malformed and repeated flags."""
    entries: list[tuple[str, list[str]]] = []
    for word in words:
        if word.startswith("--") and len(word) > 2:
            flag, eq, value = word.partition("=")
            entries.append((flag, [value] if eq else []))
        elif not entries:
            problems.add(f"unexpected '{word}' before the first flag")
        else:
            entries[-1][1].append(word)
    values: dict[str, Any] = {}
    given: dict[str, tuple[str, Any]] = {}
    for flag, raw_values in entries:
        arg = BY_FLAG.get(flag)
        if arg is None:
            dashed = flag.replace("_", "-")
            hint = f" (did you mean {dashed}?)" if dashed in BY_FLAG else suggest(flag, BY_FLAG)
            problems.add(f"unknown flag {flag}{hint}")
            continue
        raw = [_expand(r, variables) for r in raw_values]
        if arg.kind == "switch":
            if raw:
                problems.add(f"{flag} takes no value (got {' '.join(raw)})")
                continue
            value: Any = arg.sets
        elif not raw:
            problems.add(f"{flag} needs a value")
            continue
        elif arg.kind != "list" and len(raw) > 1:
            problems.add(f"{flag} takes one value (got {' '.join(raw)})")
            continue
        else:
            value = typed_value(arg, raw if arg.kind == "list" else raw[0], flag, problems)
            if value is None:
                continue
        if arg.dest in given and given[arg.dest][1] != value:
            first_flag, first = given[arg.dest]
            problems.add(f"{flag} is given twice with different values ({_show(first)} and {_show(value)})")
            continue
        given[arg.dest] = (flag, value)
        values[arg.dest] = value
    return values


def _show(value: Any) -> str:
    return " ".join(value) if isinstance(value, list) else str(value)


def _label(dest: str) -> str:
    arg = BY_DEST.get(dest)
    return arg.cli if arg else "--" + dest.replace("_", "-")


def read_megatron(
    path_or_text: str | Path,
    *,
    num_gpus: int | None = None,
    env: Mapping[str, str] | None = None,
    model: ModelSpec | None = None,
) -> ReadConfig:
    """Megatron-LM arguments (a string or a file) -> (model or None, training, hints). `model` is the model
    to assume where the arguments need one and do not give it (layers per virtual stage)."""
    text, source, path = load_text(path_or_text)
    problems = Problems(source or "megatron args")
    tokens = tokenize(text, problems)
    launcher, words, variables = split_script(tokens, env or {})
    launched_gpus, per_node = _launcher_sizes(launcher, variables, problems)
    if not words:
        raise ConfigError(f"{problems.source}: no Megatron-LM arguments found")
    values = parse_flags(words, variables, problems)
    gpus = num_gpus or launched_gpus
    name = path.stem if path else "megatron"
    read = specs_from_megatron(
        values, problems, _label, name=name, source=source, num_gpus=gpus, gpus_per_node=per_node, model=model
    )
    if any(tok.startswith(ALLOC_CONF_VAR + "=") for tok in tokens):  # the script's own setting, not the caller's
        expandable = expandable_segments_of(variables.get(ALLOC_CONF_VAR, ""), problems, ALLOC_CONF_VAR)
        problems.raise_if_any()
        read = read._replace(train=replace(read.train, expandable_segments=expandable))
    return read


def megatron_argument_list(values: Mapping[str, Any]) -> list[str]:
    """Values by destination -> command-line words (switches at their default are left out)."""
    words: list[str] = []
    for dest, value in values.items():
        arg = BY_DEST[dest]
        if arg.kind == "switch":
            if bool(value) == arg.sets:
                words.append(arg.cli)
            continue
        words += [arg.cli, *(str(x) for x in value)] if isinstance(value, list) else [arg.cli, str(value)]
    return words


def write_megatron(
    model: ModelSpec, system: SystemSpec, train: TrainingSpec, *, strict: bool = False, launcher: bool = True
) -> str:
    """A `torchrun ... pretrain_gpt.py` command with every setting of the plan, one flag per line."""
    train = resolve_dp(train, system)
    values, gaps = megatron_values(model, system, train)
    values.update(RUN_EXTRAS)
    comments = header_lines(model, system, train, "Megatron-LM command line") + finish_gaps(gaps, strict, "Megatron-LM")
    lines = [f"# {c}" for c in comments]
    words = megatron_argument_list(values)
    pairs: list[str] = []
    for word in words:
        if word.startswith("--"):
            pairs.append(word)
        else:
            pairs[-1] += " " + shlex.quote(word)
    if launcher:
        if system.num_nodes > 1:
            lines.append("# multi-node: add --node-rank, --master-addr and --master-port (or --rdzv-*) to torchrun")
        nproc = min(system.gpus_per_node, system.num_gpus)
        if train.expandable_segments:
            lines.append(f"export {ALLOC_CONF_VAR}={EXPANDABLE_SEGMENTS_CONF}")
        lines.append(f"torchrun --nproc-per-node {nproc} --nnodes {system.num_nodes} pretrain_gpt.py \\")
    lines += [f"    {p} \\" for p in pairs[:-1]] + [f"    {pairs[-1]}"]
    return "\n".join(lines) + "\n"
