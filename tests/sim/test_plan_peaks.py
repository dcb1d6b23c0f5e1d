"""`peak_live_bytes` with one chunk per rank takes the most live micro-batches times the bytes instead of the
matrix product over the plan's candidates: the same float, to the bit, over a sweep of plans and byte sizes."""

import random

import numpy as np

from paraplan.sim.engine import schedule_plan
from paraplan.sim.plan import peak_live_bytes
from paraplan.specs.schedule import SCHEDULES


def _by_product(vectors: np.ndarray, chunk_bytes: list[float]) -> float:
    """The general path: every candidate's live bytes, the largest."""
    return float((vectors @ chunk_bytes).max()) if len(vectors) else 0.0


def test_one_chunk_per_rank_is_the_product_to_the_bit() -> None:
    rng = random.Random(35)
    checked = 0
    for name, sched in SCHEDULES.items():
        if sched.chunks_per_rank(1) != 1:
            continue  # the V schedules and DualPipe hold two chunks per rank: the general path
        for pp in (1, 2, 3, 4, 8, 16):
            for m in sorted({1, 2, pp, pp + 1, 2 * pp, 3 * pp + 1, 32}):
                try:
                    plan = schedule_plan(name, pp, 1, m, False)
                except ValueError:
                    continue  # a shape the schedule refuses
                for r in range(pp):
                    for nbytes in (0.0, 1.0, rng.uniform(0, 1e10), rng.uniform(1e8, 1e11) / 3, 2.0**40 / 7):
                        assert peak_live_bytes(plan, r, [nbytes]) == _by_product(plan.inflight_vectors[r], [nbytes])
                        checked += 1
    assert checked > 1000


def test_several_chunks_take_the_product() -> None:
    plan = schedule_plan("interleaved", 4, 2, 8, False)
    for r in range(4):
        chunk_bytes = [3.3e9, 1.7e9]
        assert peak_live_bytes(plan, r, chunk_bytes) == _by_product(plan.inflight_vectors[r], chunk_bytes)
