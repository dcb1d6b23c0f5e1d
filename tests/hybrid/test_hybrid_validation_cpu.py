"""Done-when check: downscale a 2-process gloo job to one rank, measure, upscale, and land within 10% of the
real 2-process step time, for a PP=2 run and a DP=2 run of a small Llama-style model.

The comparison needs the two cores to itself: when it misses on a machine busy with other jobs, the test waits
for the machine to quiet down (`paraplan.measure.device.wait_until_quiet`: doubling pauses, up to 2 minutes) and
measures again, up to ATTEMPTS times; only if every attempt missed on a busy machine does it skip the 10% check,
saying why and with each attempt's figures. It always checks what each part of the projection is made of."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")

from paraplan.measure.device import machine_busy, wait_until_quiet  # noqa: E402
from paraplan.measure.hybrid.validation import validate_cpu  # noqa: E402

pytestmark = pytest.mark.slow  # real 2-process gloo runs, twice (~20-40 s)

TOLERANCE = 0.10
ATTEMPTS = 3


def _failures(report) -> list[str]:
    return [f"{r.name} {r.error:+.1%}" for r in report.layouts if abs(r.error) >= TOLERANCE]


def _figures(report) -> str:
    return ", ".join(
        f"{r.name}: real {r.real_step_s * 1e3:.1f} ms, projected {r.projected_step_s * 1e3:.1f} ms ({r.error:+.1%})"
        for r in report.layouts
    )


def test_upscaled_projection_matches_real_two_process_runs(tmp_path):
    attempts: list[str] = []
    busy = None
    for attempt in range(1, ATTEMPTS + 1):
        busy = machine_busy()
        report = validate_cpu(iterations=20)
        busy = busy or machine_busy()
        attempts.append(f"attempt {attempt}{f' (busy: {busy})' if busy else ''}: {_figures(report)}")
        print("hybrid CPU validation:", attempts[-1])
        if not _failures(report) or attempt == ATTEMPTS:
            break
        wait_until_quiet()  # a burst of load from other processes: measure again once it has passed
    (tmp_path / "validation.json").write_text(json.dumps(report.to_dict(), indent=1, default=float))
    for layout in report.layouts:
        assert layout.sources["forward_compute"] == "measured"
        assert layout.sources["optimizer"] == "measured"
        assert 0.5 < layout.projected_step_s / layout.real_step_s < 2.0  # same scale even on a busy machine
    pp2 = next(r for r in report.layouts if r.name == "pp2")
    assert pp2.projected_breakdown_s["pipeline_bubble"] > 0 and pp2.sources["pipeline_bubble"] == "simulated"
    dp2 = next(r for r in report.layouts if r.name == "dp2")
    assert dp2.projected_breakdown_s["dp_grad_reduce_exposed"] > 0
    assert dp2.sources["dp_grad_reduce_exposed"] == "simulated"
    if busy and _failures(report):
        pytest.skip(
            f"machine busy with other work in all {len(attempts)} attempts: cannot resolve 10%; " + "; ".join(attempts)
        )
    assert not _failures(report), json.dumps(report.to_dict(), default=float)
