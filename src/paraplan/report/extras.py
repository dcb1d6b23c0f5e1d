"""The `report` extra (plotly for HTML, matplotlib for PNG) is optional: detect it at run time."""

from __future__ import annotations

import importlib.util

from paraplan.errors import ConfigError

NEEDS = {"html": "plotly", "png": "matplotlib"}
INSTALL = "pip install 'paraplan[report]'"


def missing(kind: str) -> str | None:
    """The module that `kind` ("html" or "png") needs and this installation lacks, or None."""
    module = NEEDS[kind]
    return None if importlib.util.find_spec(module) is not None else module


def require(html: str | None = None, png: str | None = None) -> None:
    """Raise ConfigError (exit code 2 in the CLI), one line per missing module, before any work is done."""
    problems = [
        f"--{kind} {path} needs {module}, which is not installed: {INSTALL}"
        for kind, path in (("html", html), ("png", png))
        if path and (module := missing(kind))
    ]
    if problems:
        raise ConfigError(problems)
