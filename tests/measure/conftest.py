"""Shared fixtures for the measure tests: a CLI app (the kernel samples fixture is in tests/conftest.py)."""

from __future__ import annotations

import pytest
import typer


@pytest.fixture
def cli_app() -> typer.Typer:
    """A fresh app with only the fit and measure commands (independent of the other command modules)."""
    from paraplan.cli import fit, measure

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def main() -> None:
        """paraplan (test)"""

    fit.register(app)
    measure.register(app)
    return app
