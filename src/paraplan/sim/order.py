"""A topological order of a plan's tasks: what the fast path's loops run them in.

Any order in which every task comes after the previous task on its rank and after the producers of its
cross-rank inputs gives the same times. Static priorities find one with a few numpy passes; where they do
not settle, playing the static orders (each rank runs its next tasks while their inputs have been sent)
finds one, and names a deadlock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from paraplan.sim.schedules import F

if TYPE_CHECKING:
    from paraplan.sim.plan import Plan

STATIC_ORDER_ROUNDS = 64


def topological_order(plan: Plan) -> np.ndarray:
    order = static_order(plan)
    return sweep_order(plan) if order is None else order


def static_order(plan: Plan) -> np.ndarray | None:
    """`priority_order` over the plan's cross-rank inputs."""
    slots = plan.dep_slots
    is_send = (slots >= plan.send_base) & (slots < plan.release_base)
    consumer = np.nonzero(is_send)[0]
    producer = plan.send_producer[slots[is_send] - plan.send_base]
    forward = plan.action_kind[plan.first_action[:-1]] == F
    return priority_order(plan.task_rank, plan.lo, forward, consumer, producer)


def priority_order(
    rank: np.ndarray, lo: tuple[int, ...], forward: np.ndarray, consumer: np.ndarray, producer: np.ndarray
) -> np.ndarray | None:
    """Tasks 1..n (rank r holds lo[r]..lo[r+1]-1, `rank` and `forward` indexed by task, entry 0 unused),
    sorted by a priority that every dependency increases: start from the position in the rank's order times
    (pp + 1), plus the rank for forwards and pp - 1 - rank for backwards (their inputs come from the rank
    below, resp. above, at the same position in the 1F1B family), then raise the priority of every consumer
    that does not exceed its producer, and of the tasks after it on its rank, until none is left (none to
    raise in the 1F1B family; a few rounds for the V and dual schedules). None: not settled (a cycle, or
    more rounds needed)."""
    n, pp = len(rank) - 1, len(lo)
    starts = np.array(lo, dtype=np.int64)
    first = np.repeat(np.concatenate(([0], starts)), np.diff(np.concatenate(([0], starts, [n + 1]))))
    position = np.arange(n + 1) - first
    priority = position * (pp + 1) + np.where(forward, rank, pp - 1 - rank)
    segment = np.concatenate(([0], rank[1:] + 1))  # the dummy task 0 apart
    shift = np.arange(n + 1)
    for _ in range(STATIC_ORDER_ROUNDS):
        need = priority[producer] + 1
        low = need > priority[consumer]
        if not low.any():
            return np.argsort(priority[1:], kind="stable") + 1
        np.maximum.at(priority, consumer[low], need[low])
        # within a rank the priority must grow by at least 1 a task: p_i = i + running max of (p_j - j),
        # each rank's values lifted above the previous rank's so that the running maximum stays in it
        separate = segment * (int(priority.max()) + n + 2)
        priority = np.maximum.accumulate(priority - shift + separate) - separate + shift
    return None


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
