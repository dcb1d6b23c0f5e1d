"""Errors that carry every problem found at once, one line each, for exit code 2."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad input: an impossible layout, an unknown preset, a malformed file, a missing field."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))
