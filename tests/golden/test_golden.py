"""Golden outputs: the fixed corpus (tests/golden/corpus.py) gives the stored JSON.

A refactor must leave every number where it was; a deliberate change to the model regenerates the files
(`python tests/golden/corpus.py --write NAME`) in the commit that names it.
"""

from __future__ import annotations

import json
import math

import pytest
from corpus import CORPUS, EXPECTED, run_case


def _diff(path: str, want: object, got: object, out: list[str]) -> None:
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got)):
            if key not in got:
                out.append(f"{path}.{key}: missing")
            elif key not in want:
                out.append(f"{path}.{key}: new")
            else:
                _diff(f"{path}.{key}", want[key], got[key], out)
    elif isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            _diff(f"{path}[{i}]", a, b, out)
    elif isinstance(want, float) and isinstance(got, float | int) and not isinstance(got, bool):
        if not math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12):
            out.append(f"{path}: {want!r} -> {got!r}")
    elif want != got:
        out.append(f"{path}: {want!r} -> {got!r}")


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_golden(name: str) -> None:
    want = json.loads((EXPECTED / f"{name}.json").read_text())
    got = json.loads(json.dumps(run_case(CORPUS[name])))
    problems: list[str] = []
    _diff(name, want, got, problems)
    assert not problems, "\n".join(problems[:40])
