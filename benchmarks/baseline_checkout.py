"""The code a benchmark compares against, checked out at a fixed commit in a temporary git worktree (issue 35).

Benchmarks measure the baseline and this checkout in alternating subprocesses of the same run (`PYTHONPATH` set to
one `src` or the other), so both see the same load on a shared machine; the ratios are the medians'.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BASELINE_REF = "2b721e1"  # main before issue 35's speed work (2026-12-04)
REPO = Path(__file__).resolve().parents[1]


@contextmanager
def baseline_src(ref: str = BASELINE_REF) -> Iterator[Path]:
    """The `src` folder of the repository at `ref`, for the duration of the block."""
    with tempfile.TemporaryDirectory() as tmp:
        worktree = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(worktree), ref], check=True)
        try:
            yield worktree / "src"
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)
