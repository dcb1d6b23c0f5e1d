"""Paths of the shipped geo examples (a module with a unique name: test files import it directly)."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "geo"
TINY = Path(__file__).with_name("tiny.yaml")
SHARED = Path(os.environ.get("PARAPLAN_SHARED", REPO.parent / "shared"))
TRACES = SHARED / "data" / "inference-traces"
