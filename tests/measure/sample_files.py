"""Helpers for the measure tests (a module with a unique name: test files import it directly)."""

from __future__ import annotations

import csv
from pathlib import Path


def copy_rows(source: Path, target: Path, rows: int) -> Path:
    """Copy the header and the first `rows` rows of a sample CSV (same name, under `target`)."""
    target.mkdir(parents=True, exist_ok=True)
    with source.open(newline="") as handle:
        lines = list(csv.reader(handle))
    out = target / source.name
    with out.open("w", newline="") as handle:
        csv.writer(handle).writerows(lines[: rows + 1])
    return out
