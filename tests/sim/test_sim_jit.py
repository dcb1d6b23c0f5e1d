"""The compiled loops (numba, the extra `fast`) give the pure-Python loops' times to the bit."""

import random

import numpy as np
import pytest
from random_costs import random_pipeline
from schedule_cases import schedule_cases

from paraplan.sim.engine import fast_timeline, plan_for, simulate
from paraplan.sim.tables import build_tables
from paraplan.specs.schedule import SCHEDULES

pytest.importorskip("numba", reason="numba is not installed (the 'fast' extra)")

SHAPES = [(1, 1, 4), (2, 1, 4), (2, 2, 8), (3, 1, 7), (4, 1, 8), (4, 2, 16), (4, 3, 12), (8, 1, 16), (8, 4, 32)]


def cases() -> list[tuple[str, int, int, int]]:
    return schedule_cases(SHAPES)


def bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).view(np.uint64)


@pytest.mark.parametrize("fsdp", [False, True])
@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_compiled_loops_give_the_same_bits(schedule: str, fsdp: bool) -> None:
    rng = random.Random(f"{schedule} {fsdp}")
    shapes = [c for c in cases() if c[0] == schedule]
    assert len(shapes) >= 4
    for _, pp, vpp, m in shapes:
        for _ in range(3):
            costs = random_pipeline(rng, schedule, pp, vpp, m, fsdp)
            plan = plan_for(costs)
            tables = build_tables(plan, costs)
            py = fast_timeline(plan, costs, tables, jit=False)
            jit = fast_timeline(plan, costs, tables, jit=True)
            assert isinstance(jit.start_s, np.ndarray) and isinstance(py.start_s, list)
            for name in ("start_s", "end_s", "slots_s", "rank_done_s"):
                assert np.array_equal(bits(getattr(py, name)), bits(getattr(jit, name))), (name, schedule, pp, vpp, m)
            assert py.tail_kind == jit.tail_kind
            assert dict(py.gates) == dict(jit.gates)
            assert all(type(x) is float for x in jit.rank_done_s)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_simulate_is_the_same_with_and_without_the_compiled_loops(schedule: str, monkeypatch) -> None:
    rng = random.Random(schedule)
    for _, pp, vpp, m in [c for c in cases() if c[0] == schedule]:
        costs = random_pipeline(rng, schedule, pp, vpp, m, rng.random() < 0.5)
        for breakdown in (True, False):
            monkeypatch.delenv("PARAPLAN_NO_JIT", raising=False)
            compiled = simulate(costs, breakdown=breakdown)
            monkeypatch.setenv("PARAPLAN_NO_JIT", "1")
            python = simulate(costs, breakdown=breakdown)
            assert compiled == python
            assert type(compiled.step_time_s) is float and bits(compiled.step_time_s) == bits(python.step_time_s)


def test_the_engine_loads_the_compiled_loops_once_they_pay(monkeypatch) -> None:
    from paraplan.sim import loops_jit

    monkeypatch.setattr(loops_jit, "_loops", [])  # not loaded: this process has played no task yet
    monkeypatch.setattr(loops_jit, "_python_tasks", [0])
    monkeypatch.delenv("PARAPLAN_NO_JIT", raising=False)
    assert not loops_jit.use(loops_jit.LOAD_AFTER_TASKS - 1)
    assert loops_jit.use(1) and loops_jit._loops  # loaded now
    assert loops_jit.use(1)
    monkeypatch.setenv("PARAPLAN_NO_JIT", "1")
    assert not loops_jit.use(1) and not loops_jit.available()
