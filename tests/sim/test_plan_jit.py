"""The compiled plan builder (`paraplan.sim.plan_jit`) makes the numpy builder's Plan, field by field."""

import dataclasses

import numpy as np
import pytest
from schedule_cases import schedule_cases

from paraplan.sim import loops_jit, plan_jit
from paraplan.sim import plan as P
from paraplan.specs.schedule import SCHEDULES

pytest.importorskip("numba", reason="numba is not installed (the 'fast' extra)")

SHAPES = [
    (1, 1, 1), (1, 2, 3), (2, 1, 1), (2, 1, 4), (2, 2, 8), (3, 1, 7), (3, 3, 5), (4, 1, 3), (4, 1, 8), (4, 2, 16),
    (4, 3, 12), (5, 2, 10), (8, 1, 16), (8, 4, 32), (16, 8, 16), (12, 1, 96),
]  # fmt: skip


def cases() -> list[tuple[str, int, int, int]]:
    return schedule_cases(SHAPES)


def assert_same(a, b) -> None:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, (a, b)
        assert np.array_equal(a, b)
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert type(a) is type(b) and a == b, (a, b)


def built(shape: tuple, compiled: bool, monkeypatch) -> P.Plan:
    monkeypatch.setattr(loops_jit, "loaded", lambda: compiled)
    return P._build_plan(*shape)


@pytest.mark.parametrize("case", cases(), ids=lambda c: "-".join(map(str, c)))
def test_compiled_plan_is_the_numpy_plan(case: tuple, monkeypatch) -> None:
    for paired in (False, True):  # paired where a schedule has no pairs: the same plan as unpaired
        shape = (*case, paired)
        numpy_plan = built(shape, False, monkeypatch)
        calls: list[int] = []
        monkeypatch.setattr(P, "_compiled_plan", lambda *a, f=P._compiled_plan, c=calls: c.append(1) or f(*a))
        compiled = built(shape, True, monkeypatch)
        monkeypatch.undo()
        pairs = paired and numpy_plan.pair_keys
        assert len(calls) == (0 if pairs or (paired and len(P.action_arrays(*shape).pair_starts)) else 1)
        for field in dataclasses.fields(P.Plan):
            if field.name != "memo":
                assert_same(getattr(numpy_plan, field.name), getattr(compiled, field.name))


def test_wide_live_counts_fall_back_to_numpy(monkeypatch) -> None:
    """Many chunks with many live micro-batches need a second packed word: the numpy candidates, the same Plan."""
    shape = ("interleaved", 4, 24, 96, False)
    numpy_plan = built(shape, False, monkeypatch)
    arrays = P.action_arrays(*shape)
    up, down = P._neighbour_tables("interleaved", 4, 24, 24)
    out = plan_jit.plan_arrays(*arrays[:4], up.ravel(), down.ravel(), 96, 24, P.N_KINDS)
    assert out.status == plan_jit.Status.WIDE
    compiled = built(shape, True, monkeypatch)
    for name in ("inflight_vectors", "peak_inflight_chunks", "dep_slots", "key_counts"):
        assert_same(getattr(numpy_plan, name), getattr(compiled, name))


def test_order_errors_name_the_same_action(monkeypatch) -> None:
    """A rank that runs a backward before its own forward: both builders name it alike."""
    arrays = P.action_arrays("1f1b", 2, 1, 2, False)
    kind = arrays.kind.copy()
    kind[[0, 3]] = kind[[3, 0]]  # rank 0 runs a BW first and its F later
    swapped = arrays._replace(kind=kind)
    monkeypatch.setattr(P, "action_arrays", lambda *a: swapped)
    messages = []
    for compiled in (False, True):
        monkeypatch.setattr(loops_jit, "loaded", lambda c=compiled: c)
        with pytest.raises(ValueError, match="order error|never runs") as info:
            P._build_plan("1f1b", 2, 1, 2, False)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_compiled_critical_path_walk_adds_the_same_waits(schedule: str, monkeypatch) -> None:
    """The compiled walk (`kernels.critical_waits`, no FSDP) and the Python one give the same waits to the bit,
    on timelines where sends queue (large p2p) and forwards wait for parameter releases."""
    import random

    from random_costs import random_pipeline

    from paraplan.sim.engine import fast_timeline, plan_for
    from paraplan.sim.summary import critical_path_waits
    from paraplan.sim.tables import build_tables

    rng = random.Random(schedule)
    walked = 0
    for _, pp, vpp, m in [c for c in cases() if c[0] == schedule]:
        for _ in range(3):
            costs = random_pipeline(rng, schedule, pp, vpp, m, fsdp=False)
            plan = plan_for(costs)
            tl = fast_timeline(plan, costs, build_tables(plan, costs), jit=True)
            assert not tl.gates
            monkeypatch.setattr(loops_jit, "loaded", lambda: True)
            compiled = critical_path_waits(plan, tl)
            monkeypatch.setattr(loops_jit, "loaded", lambda: False)
            python = critical_path_waits(plan, tl)
            assert compiled == python and all(type(v) is float for v in compiled.values())
            walked += compiled["pp"] > 0 or compiled["dp"] > 0
    assert walked  # some waits were found


@pytest.mark.parametrize("case", cases(), ids=lambda c: "-".join(map(str, c)))
def test_compiled_static_order_is_the_numpy_order(case: tuple, monkeypatch) -> None:
    """`kernels.static_order` gives `priority_order`'s order, or none where it does not settle (then both sweep)."""
    from paraplan.sim.order import static_order

    for paired in (False, True):
        plan = built((*case, paired), False, monkeypatch)
        python = static_order(plan)
        monkeypatch.setattr(loops_jit, "loaded", lambda: True)
        compiled = static_order(plan)
        if python is None:
            assert compiled is None
        else:
            assert compiled is not None and compiled.dtype == python.dtype and np.array_equal(compiled, python)


@pytest.mark.parametrize("overlap", [False, True])
def test_compiled_grad_reduction_is_the_python_one(overlap: bool) -> None:
    """`engine._grad_reduction_compiled` and `_grad_reduction` give the same per-rank times to the bit."""
    import dataclasses as dc
    import random

    from random_costs import random_pipeline

    from paraplan.sim.engine import _grad_reduction, _grad_reduction_compiled, _initial_slots, fast_timeline, plan_for
    from paraplan.sim.tables import build_tables

    rng = random.Random(f"grad {overlap}")
    for schedule, pp, vpp, m in cases():
        costs = dc.replace(random_pipeline(rng, schedule, pp, vpp, m, fsdp=False), overlap_grad_reduce=overlap)
        plan = plan_for(costs)
        tables = build_tables(plan, costs)
        tl = fast_timeline(plan, costs, tables, jit=True)
        _, dp_free = _initial_slots(plan, costs, tables.dur_s.tolist())
        python = _grad_reduction(plan, costs, tl.start_s, tl.end_s, tables.dur_s.tolist(), dp_free)
        compiled = _grad_reduction_compiled(plan, costs, tl.start_s, tl.end_s, tables.dur_s, dp_free)
        assert compiled == python and all(type(x) is float for x in compiled), (schedule, pp, vpp, m)
