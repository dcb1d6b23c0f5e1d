"""Errors that carry every problem found at once, one line each, for exit code 2."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable


class ConfigError(ValueError):
    """Bad input: an impossible layout, an unknown preset, a malformed file, a missing field."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


def unknown_name_problems(
    names: Iterable[str], known: Collection[str], what: str = "setting", where: str = ""
) -> list[str]:
    """One line per name not in `known`, with the closest known name when one is close (difflib's ratio >= 0.6):
    "unknown training setting 'tensor_parallel' (did you mean 'tensor_model_parallel_size'?)"."""
    prefix = f"{where}: " if where else ""
    lines = []
    for name in sorted({str(n) for n in names} - set(known)):
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        lines.append(f"{prefix}unknown {what} '{name}'{hint}")
    return lines


def bound_problems(checks: Iterable[tuple[str, object, float, float]], what: str = "") -> list[str]:
    """One line per value outside [low, high] (or not a finite number): checks are (name, value, low, high).
    A value of the wrong type is reported here too, so that no comparison raises a TypeError later."""
    prefix = f"{what} " if what else ""
    lines = []
    for name, value, low, high in checks:
        if isinstance(value, bool) or not isinstance(value, int | float):
            lines.append(f"{prefix}{name} must be a number (got {value!r})")
        elif value != value or not low <= value <= high:  # value != value: NaN
            lower = "> 0" if 0 < low < 1e-6 else f">= {_number(low)}"  # a tiny low bound stands for "positive"
            upper = "" if high == float("inf") else f" and <= {_number(high)}"
            lines.append(f"{prefix}{name} must be {lower}{upper} (got {value})")
    return lines


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def reject_unknown_names(names: Iterable[str], known: Collection[str], what: str = "setting", where: str = "") -> None:
    """Raise a ConfigError naming every name not in `known` (a typo must not be dropped without a word)."""
    problems = unknown_name_problems(names, known, what, where)
    if problems:
        raise ConfigError(problems)
