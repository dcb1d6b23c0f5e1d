"""Shared fixtures for the measure tests: the kernel samples (skipped when absent) and a CLI app."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("PARAPLAN_SHARED", REPO.parent / "shared"))
KERNEL_SAMPLES = SHARED / "data" / "kernel-samples"


@pytest.fixture
def kernel_samples() -> Path:
    if not (KERNEL_SAMPLES / "Perlmutter").is_dir():
        pytest.skip(f"kernel samples not found at {KERNEL_SAMPLES} (set PARAPLAN_SHARED)")
    return KERNEL_SAMPLES


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
