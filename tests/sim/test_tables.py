"""The duration tables by the plan's set-up (`sim.tables.timing_layout`, kept in the plan's memo) and the plan's last
tasks: the same floats, bit for bit, as the tables and the step built without them."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from random_costs import random_pipeline
from schedule_cases import schedule_cases

from paraplan.sim import loops_jit
from paraplan.sim.costs import ChunkCost
from paraplan.sim.engine import fast_timeline, plan_for, simulate
from paraplan.sim.plan import N_KINDS
from paraplan.sim.program import BW, B, F, W
from paraplan.sim.tables import TIMING_ROWS, build_tables

CASES = schedule_cases([(1, 1, 1), (2, 2, 3), (4, 2, 8), (4, 3, 6), (3, 1, 5)])


def _reference(flat: list[ChunkCost], n_keys: int) -> dict[str, np.ndarray]:
    """The timing tables as built before the plan's layout (one array per table, slices set one by one)."""
    figures = np.array(
        [
            (
                c.forward_s, c.backward_input_s, c.backward_weight_s, c.fsdp_gather_s, c.fsdp_refetch_s,
                c.fsdp_reduce_scatter_s, float(c.fsdp_on_demand), 1 if c.fsdp_on_demand else max(1, c.fsdp_units),
            )
            for c in flat
        ],
        dtype=np.float64,
    ).reshape(len(flat), 8)  # fmt: skip
    n_base = len(flat) * N_KINDS
    dur, gather, scatter = np.zeros(n_keys), np.zeros(n_keys), np.zeros(n_keys)
    units, demand = np.ones(n_keys), np.zeros(n_keys)
    by_kind = dur[:n_base].reshape(-1, N_KINDS)
    by_kind[:, :3] = figures[:, :3]
    by_kind[:, BW] = figures[:, 1] + figures[:, 2]
    by_kind = gather[:n_base].reshape(-1, N_KINDS)
    by_kind[:, F] = figures[:, 3]
    by_kind[:, B] = by_kind[:, BW] = figures[:, 3] + figures[:, 4]
    by_kind = scatter[:n_base].reshape(-1, N_KINDS)
    by_kind[:, W] = by_kind[:, BW] = figures[:, 5]
    units[:n_base].reshape(-1, N_KINDS)[:] = figures[:, 7:8]
    demand[:n_base].reshape(-1, N_KINDS)[:] = figures[:, 6:7]
    return dict(zip(TIMING_ROWS, (dur, gather, scatter, units, demand), strict=True))


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("fsdp", [False, True])
def test_timing_tables_as_before(case: tuple[str, int, int, int], fsdp: bool) -> None:
    rng = random.Random(hash((case, fsdp)) & 0xFFFF)
    for _ in range(3):
        costs = random_pipeline(rng, *case, fsdp)
        plan = plan_for(costs)
        tables = build_tables(plan, costs, parts=False)
        full = build_tables(plan, costs, parts=True)
        if plan.pair_keys:  # F&B pairs: the base keys by the plan's layout, the pairs' durations as with the parts
            padded = tables.padded
            assert padded is not None and list(padded[:, -1]) == [0.0, 0.0, 0.0, 1.0, 0.0]
            for name in TIMING_ROWS:
                assert _same_bits(getattr(tables, name), getattr(full, name)), name
            assert tables.interference_s is not None and full.interference_s is not None
            assert _same_bits(tables.interference_s, full.interference_s)
            continue
        flat = [c for row in costs.chunks for c in row]
        expected = _reference(flat, plan.n_keys)
        for name in TIMING_ROWS:
            assert _same_bits(getattr(tables, name), expected[name]), name
            assert _same_bits(getattr(full, name), expected[name]), name  # the tables with parts agree
        padded = tables.padded
        assert padded is not None and padded.shape == (len(TIMING_ROWS), plan.n_keys + 1)
        assert list(padded[:, -1]) == [0.0, 0.0, 0.0, 1.0, 0.0]  # what the compiled loops appended
        assert all(row.flags.c_contiguous for row in (tables.dur_s, padded[0], padded[3]))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_the_step_as_before(case: tuple[str, int, int, int]) -> None:
    """The timeline and the step from the padded tables and from tables without them (the loops append the extra
    entries themselves), and the pipeline time from the plan's last tasks and from its ranks' bounds."""
    rng = random.Random(hash(case) & 0xFFFF)
    for fsdp in (False, True):
        costs = random_pipeline(rng, *case, fsdp)
        plan = plan_for(costs)
        tables = build_tables(plan, costs, parts=False)
        plain = replace(tables, padded=None)
        for jit in (False, True) if loops_jit.available() else (False,):
            a, b = fast_timeline(plan, costs, tables, jit=jit), fast_timeline(plan, costs, plain, jit=jit)
            assert np.array_equal(np.asarray(a.end_s), np.asarray(b.end_s))
            assert list(a.rank_done_s) == list(b.rank_done_s)
        result = simulate(costs, breakdown=False)
        last = max(float(result_end) for result_end in _rank_ends(plan, fast_timeline(plan, costs, plain)))
        assert result.pipeline_time_s == last


def _rank_ends(plan, timeline) -> list[float]:  # type: ignore[no-untyped-def]
    return [float(timeline.end_s[h - 1]) for lo, h in zip(plan.lo, plan.hi, strict=True) if h > lo]
