"""Reading input files: one reader for every file option, and a YAML loader with bounded aliases and depth.

A directory, a missing, unreadable, non-UTF-8 or oversized file is one `ConfigError` line naming the option and
the file, never a traceback. YAML anchors and aliases are allowed (Primus configs use them) but the document they
expand to is bounded, so an alias bomb ("billion laughs") is refused instead of exhausting memory, and deep nesting
is refused instead of overflowing the stack.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from paraplan.errors import ConfigError

MIB = 2**20
MAX_FILE_BYTES = 64 * MIB
"""Largest input file read (64 MiB): configs are kilobytes, measured CSVs and kernel profiles a few megabytes."""
OUTPUT_MAX_MIB = 256.0
"""Largest trace (`--trace`, `--chakra`) written unless asked for more (`--trace-max-mib`): about 1.7 M trace
events, hundreds of times a real layout's step (pp 8 with 64 micro-batches: a few MiB), and already slow for a
browser trace viewer (Perfetto, chrome://tracing) to load."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of YAML mappings/lists accepted (framework configs nest 3-5 levels)."""
MAX_YAML_EXPANDED_NODES = 100_000
"""Most YAML nodes a document may expand to with its aliases followed (a Primus config is a few hundred)."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of JSON objects/arrays accepted (HF config.json nests 2-3 levels)."""


def mib_text(nbytes: float) -> str:
    """A file's bytes as MiB in a message: to a hundredth below 10 MiB (a small trace is not "0 MiB")."""
    mib = nbytes / MIB
    return f"{mib:,.2f}" if mib < 10 else f"{mib:,.0f}"


def _label(path: Path, what: str) -> str:
    return f"{what} {path}" if what else str(path)


def read_text_file(path: str | Path, what: str = "") -> str:
    """The text of a readable UTF-8 file (a leading byte-order mark dropped). `what` names the option
    (`--config`) in the error line."""
    path = Path(path)
    label = _label(path, what)
    try:
        if not path.exists():
            raise ConfigError(f"{label}: file not found")
        if path.is_dir():
            raise ConfigError(f"{label}: is a directory, not a file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"{label}: {size} bytes is more than the {MAX_FILE_BYTES} bytes read from an input file")
        data = path.read_bytes()
    except PermissionError:
        raise ConfigError(f"{label}: not readable (permission denied)") from None
    except OSError as exc:
        raise ConfigError(f"{label}: cannot be read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{label}: not a UTF-8 text file (byte {exc.start} is 0x{data[exc.start]:02x})") from None


def is_existing_file(name: str) -> bool:
    """Whether `name` names a file (a name too long for the file system, or otherwise invalid, is not one)."""
    try:
        return Path(name).is_file()
    except (OSError, ValueError):
        return False


def names_a_path(name: str) -> bool:
    """Whether `name` names something on disk (a file, a folder; a too-long or invalid name does not)."""
    try:
        return Path(name).exists()
    except (OSError, ValueError):
        return False


# ----------------------------------------------------------------------------- YAML, bounded
class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses nesting deeper than MAX_YAML_DEPTH while composing."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(f"nesting deeper than {MAX_YAML_DEPTH} levels (line {mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_nodes(node: Node, memo: dict[int, int]) -> int:
    """How many nodes the document holds with every alias followed (a shared node counts at each use)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1  # a recursive alias counts once while its own size is computed
    if isinstance(node, SequenceNode):
        total = 1 + sum(_expanded_nodes(child, memo) for child in node.value)
    elif isinstance(node, MappingNode):
        total = 1 + sum(_expanded_nodes(k, memo) + _expanded_nodes(v, memo) for k, v in node.value)
    else:
        total = 1
    memo[key] = min(total, MAX_YAML_EXPANDED_NODES + 1)
    return memo[key]


def _is_recursive(node: Node, open_ids: set[int], done_ids: set[int]) -> bool:
    """Whether a node contains itself through an alias (depth-first; each shared node is walked once)."""
    if id(node) in open_ids:
        return True
    if id(node) in done_ids or not isinstance(node, SequenceNode | MappingNode):
        return False
    open_ids.add(id(node))
    children = node.value if isinstance(node, SequenceNode) else [c for kv in node.value for c in kv]
    found = any(_is_recursive(child, open_ids, done_ids) for child in children)
    open_ids.discard(id(node))
    done_ids.add(id(node))
    return found


def load_yaml(text: str, source: str = "") -> Any:
    """`yaml.safe_load` with aliases expanded to at most MAX_YAML_EXPANDED_NODES nodes, no recursive alias,
    and nesting at most MAX_YAML_DEPTH deep. Malformed YAML is a ConfigError naming the source."""
    where = source or "input"
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _is_recursive(node, set(), set()):
            raise ConfigError(f"{where}: a YAML alias refers to a node that contains it (recursive alias)")
        if _expanded_nodes(node, {}) > MAX_YAML_EXPANDED_NODES:
            raise ConfigError(
                f"{where}: YAML aliases expand to more than {MAX_YAML_EXPANDED_NODES} values (an alias bomb?)"
            )
        return loader.construct_document(node)
    except ConfigError as exc:
        raise ConfigError([p if p.startswith(where) else f"{where}: {p}" for p in exc.problems]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise ConfigError(f"{where}: nesting too deep to read") from None
    finally:
        loader.dispose()


def load_json(text: str, source: str = "") -> Any:
    """`json.loads` with nesting at most MAX_JSON_DEPTH deep; malformed JSON is a ConfigError naming the source."""
    where = source or "input"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ConfigError(f"{where}: nesting too deep to read") from None
    if _json_depth(data) > MAX_JSON_DEPTH:
        raise ConfigError(f"{where}: nesting deeper than {MAX_JSON_DEPTH} levels")
    return data


def _json_depth(value: Any, depth: int = 0) -> int:
    if depth > MAX_JSON_DEPTH:
        return depth
    if isinstance(value, dict):
        return max((_json_depth(v, depth + 1) for v in value.values()), default=depth + 1)
    if isinstance(value, list):
        return max((_json_depth(v, depth + 1) for v in value), default=depth + 1)
    return depth
