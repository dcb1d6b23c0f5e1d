"""`paraplan.sim.plan._build_plan` for plans without F&B pairs, compiled with numba (the optional extra `fast`).

The numpy builder makes about a thousand numpy calls per plan, whatever its size: 0.3 ms for a plan of two
tasks, 0.6 ms for 256, 2 ms for the 4,096 tasks of llama3.1-405b's interleaved schedule (TP8 PP16 VPP8, 16
micro-batches); in a cold projection the plan is built once, and it was a fifth to a quarter of the time
(issue 35). This kernel does the same steps in one compiled pass over the actions: the same producers, the
same stable orders of the sends and of each task's dependency slots, the same cost keys, and the same
in-flight candidates (the live (chunk, micro-batch) counts after each forward, packed in the same mixed radix,
sorted and made unique the same way, the dominated rows dropped the same way), so the Plan is the same to the
element; tests/sim/test_plan_jit.py compares every field with the numpy builder's over every schedule.

It runs only where the compiled loops are loaded already (`paraplan.sim.loops_jit.loaded`: the tuner, the
benchmarks, a long process), never loading numba itself. Plans with F&B pairs (DualPipe, EP overlap) keep the
numpy builder: finding the pairs that stay runnable plays the orders. Where the packed live counts need more
than one int64 word (many chunks with many live micro-batches each), the kernel leaves the in-flight candidates
to the numpy functions (`Status.WIDE`).
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import numpy as np

from paraplan.sim.program import BW, F


class Status(IntEnum):
    OK = 0
    NO_INPUT = 1  # an action's input never runs
    ORDER = 2  # a rank runs an action before its same-rank input (`bad`: the edge)
    WIDE = 3  # the in-flight candidates need the numpy functions (more than one packed word, or an empty chunk)


class PlanArrays(NamedTuple):
    """What the kernel returns, for `paraplan.sim.plan` to make a Plan of."""

    status: int
    bad_consumer: int  # Status.ORDER: the action run before its input
    dep_slots: np.ndarray  # [1 + n, width >= 2]
    send_slots: np.ndarray  # [1 + n, width >= 2]
    send_producer: np.ndarray
    cost_key: np.ndarray  # [1 + n]
    key_counts: np.ndarray  # [pp, n_keys] float64
    first_forward: np.ndarray  # [pp * n_chunks]
    last_weight: np.ndarray  # [pp * n_chunks]
    forwards: np.ndarray  # [pp * n_chunks]
    sends_per_rank: np.ndarray  # [pp]
    candidates: np.ndarray  # [rows, n_chunks] float64: every rank's in-flight candidates, rank after rank
    candidate_offsets: np.ndarray  # [pp + 1]
    peaks: np.ndarray  # [pp]: the most live (chunk, micro-batch)s at once


PEAK_FILTER_ROWS = 128  # `paraplan.sim.plan._peak_candidates`: the dominance check runs up to this many rows


_kernel: list = []


def kernel():
    """The compiled builder, compiled or loaded from numba's cache on the first call."""
    if not _kernel:
        from paraplan.sim.kernels import build  # imports numba

        _kernel.append(build)
    return _kernel[0]


def plan_arrays(
    kind: np.ndarray,
    chunk: np.ndarray,
    mb: np.ndarray,
    lengths: np.ndarray,
    up: np.ndarray,
    down: np.ndarray,
    m: int,
    n_chunks: int,
    n_kinds: int,
) -> PlanArrays:
    """The plan's arrays from its actions (no pairs) and its stages' neighbours ([pp * n_chunks], -1 at the ends)."""
    arrays = [np.ascontiguousarray(a, dtype=np.int64) for a in (kind, chunk, mb, lengths, up, down)]
    return PlanArrays(*kernel()(*arrays, int(m), int(n_chunks), int(n_kinds), PEAK_FILTER_ROWS))


def warm_up() -> None:
    """Compile (or load) every kernel of `paraplan.sim.kernels` with the argument types the engine passes (the plan
    builder, the static order, the critical-path walk, the gradient-reduction tail), on a one-stage plan: the
    pool's forked workers then inherit them all (`loops_jit.warm_up` calls this)."""
    from paraplan.sim.kernels import critical_waits, grad_reduction, static_order

    one = np.zeros(1, dtype=np.int64)
    out = plan_arrays(np.array([F, BW]), np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64), np.array([2]), -one,
                      -one, 1, 1, BW + 1)  # fmt: skip
    tasks, times = np.arange(3, dtype=np.int64), np.zeros(3)
    first = np.array([False, True, False])
    static_order(tasks * 0, one + 1, first, out.dep_slots, out.send_producer, 3, 3, 1)
    critical_waits(times, times, times, out.dep_slots, out.send_producer, 3, 3, first, 2)
    grad_reduction(times[:1], times, one + 2, times[:1], times[:1], one, 1, True, times[:1])
