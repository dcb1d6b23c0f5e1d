"""Value types of spec fields, checked by name: `gbs: "64"` in a file is a line naming the field, not a TypeError
deep inside a projection."""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

Coerce = Callable[[Any], Any]
"""Returns the value in the field's type, or raises TypeError/ValueError with what was expected."""


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise TypeError("an integer")
    return value


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("a number")
    if not math.isfinite(value):
        raise TypeError("a finite number")
    return float(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("true or false")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("text")
    return value


def _int_tuple(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise TypeError("a list of integers")
    return tuple(_int(v) for v in value)


def _str_tuple(value: Any) -> tuple[str, ...]:
    """A list of names, or one comma-separated string (as Megatron's command line takes them)."""
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if not isinstance(value, list | tuple):
        raise TypeError("a list of names")
    return tuple(_str(v) for v in value)


def _optional(inner: Coerce) -> Coerce:
    def coerce(value: Any) -> Any:
        return None if value is None else inner(value)

    return coerce


def _checker(hint: Any) -> Coerce | None:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in args if a is not type(None)]
        inner = _checker(rest[0]) if len(rest) == 1 else None
        return _optional(inner) if inner else None
    if origin is typing.Literal:
        return _str if all(isinstance(a, str) for a in args) else None
    if origin is tuple and args and args[0] is int:
        return _int_tuple
    if origin is tuple and args and args[0] is str:
        return _str_tuple
    return {int: _int, float: _float, bool: _bool, str: _str}.get(hint)


@cache
def checkers(cls: type) -> Mapping[str, Coerce]:
    """Field name -> coercion, for the fields of a dataclass whose types are checked (others pass as given)."""
    hints = typing.get_type_hints(cls)
    found = {name: _checker(hint) for name, hint in hints.items()}
    return {name: c for name, c in found.items() if c is not None}


def coerce_fields(cls: type, values: Mapping[str, Any], what: str) -> tuple[dict[str, Any], list[str]]:
    """(values in their fields' types, one problem line per value of the wrong type, naming the field)."""
    table = checkers(cls)
    out: dict[str, Any] = {}
    problems: list[str] = []
    for name, value in values.items():
        coerce = table.get(name)
        if coerce is None:
            out[name] = value
            continue
        try:
            out[name] = coerce(value)
        except (TypeError, ValueError) as exc:
            problems.append(f"{what} '{name}' must be {exc} (got {value!r})")
    return out, problems
