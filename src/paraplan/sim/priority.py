"""A topological order of tasks from static priorities: a few numpy passes, no task graph object.

`paraplan.sim.plan` asks whether F&B pairs keep the static orders runnable; `paraplan.sim.order` orders a
plan's tasks for the fast path's loops.
"""

from __future__ import annotations

import numpy as np

STATIC_ORDER_ROUNDS = 64


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
