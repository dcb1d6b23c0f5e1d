"""A topological order of a plan's tasks: what the fast path's loops run them in.

Any order in which every task comes after the previous task on its rank and after the producers of its
cross-rank inputs gives the same times. Static priorities find one with a few numpy passes; where they do
not settle, playing the static orders (each rank runs its next tasks while their inputs have been sent)
finds one, and names a deadlock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from paraplan.sim import loops_jit
from paraplan.sim.priority import STATIC_ORDER_ROUNDS, priority_order
from paraplan.sim.program import F

if TYPE_CHECKING:
    from paraplan.sim.plan import Plan


def order_of(plan: Plan) -> np.ndarray:
    """The topological order of the plan's tasks, found once and kept in its memo."""
    order = plan.memo.get("order")
    if order is None:
        order = plan.memo["order"] = topological_order(plan)
    return order


def topological_order(plan: Plan) -> np.ndarray:
    """A topological order of the tasks; raises ValueError if the static orders deadlock."""
    order = static_order(plan)
    return sweep_order(plan) if order is None else order


def static_order(plan: Plan) -> np.ndarray | None:
    """`priority_order` over the plan's cross-rank inputs (compiled where the compiled loops are loaded:
    `paraplan.sim.kernels.static_order`, the same order)."""
    forward = plan.action_kind[plan.first_action[:-1]] == F
    if loops_jit.loaded():
        from paraplan.sim.kernels import static_order as compiled

        lo = np.array(plan.lo, dtype=np.int64)
        order = compiled(
            plan.task_rank, lo, forward, plan.dep_slots, plan.send_producer, plan.send_base, plan.release_base,
            STATIC_ORDER_ROUNDS,
        )  # fmt: skip
        return order if len(order) or not plan.n_tasks else None
    slots = plan.dep_slots
    is_send = (slots >= plan.send_base) & (slots < plan.release_base)
    consumer = np.nonzero(is_send)[0]
    producer = plan.send_producer[slots[is_send] - plan.send_base]
    return priority_order(plan.task_rank, plan.lo, forward, consumer, producer)


def sweep_order(plan: Plan) -> np.ndarray:
    """Play the static orders: each rank runs its next tasks while their inputs have been sent, and sleeps
    until the send it waits for is made. Ranks left waiting with nothing to wake them mean a deadlock."""
    pp = plan.pp
    sent = bytearray(plan.n_slots)
    sent[0] = 1  # no dependency
    sent[plan.release_base :] = b"\x01" * (plan.n_slots - plan.release_base)  # releases hold no task
    waiting = [-1] * plan.n_slots  # send slot -> the rank waiting for it
    cols = plan.rows[:-2]
    send0, send1 = plan.rows[-2], plan.rows[-1]
    hi = plan.hi
    cur = list(plan.lo)
    order: list[int] = []
    ready = list(reversed(range(pp)))
    while ready:
        r = ready.pop()
        i = first = cur[r]
        while i < hi[r]:
            missing = [col[i] for col in cols if not sent[col[i]]]
            if missing:
                waiting[missing[0]] = r
                break
            for k in (send0[i], send1[i]):
                if k:
                    sent[k] = 1
                    if waiting[k] >= 0:
                        ready.append(waiting[k])
            i += 1
        order.extend(range(first, i))
        cur[r] = i
    stuck = [r for r in range(pp) if cur[r] < hi[r]]
    if stuck:
        raise ValueError(f"{plan.schedule} (pp={pp}, m={plan.num_microbatches}) deadlocks on ranks {stuck[:8]}")
    return np.array(order, dtype=np.int64)
