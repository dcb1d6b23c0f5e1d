"""The fast path's loops: every task of a plan once, in a topological order, with flat int lists.

`LoopRows` holds what a plan's loops read, in that order (built once per plan, kept in its memo); the
loops take the per-call durations. `static_loop` is the hot one (no FSDP, at most two dependency slots a
task); `full_loop` also plays the DP stream inline (FSDP gathers and reduce-scatters, gradient buckets) and
takes up to three dependency slots (F&B pairs). Both write the rules out (the send FIFO among them): a call
per task would cost more than a task's whole body.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from paraplan.sim.costs import PipelineCosts
from paraplan.sim.loops_jit import JitRows, loops
from paraplan.sim.order import order_of
from paraplan.sim.plan import Plan
from paraplan.sim.tables import DurationTables
from paraplan.sim.timeline import Timeline, bucket_delays_s, param_lead_s, scatter_done_s

MAX_DEPS = 3  # a pair's two cross-rank inputs and a release slot


@dataclass(frozen=True, slots=True)
class LoopRows:
    """Per task in topological order: id, dependency slots (three columns, 0 = none), rank, send slots, cost
    key, and the cost key of the next task on its rank (the extra key `n_keys` after the last)."""

    tasks: list[int]
    deps: tuple[list[int], list[int], list[int]]
    ranks: list[int]
    send0: list[int]
    send1: list[int]
    keys: np.ndarray
    next_keys: np.ndarray
    order: np.ndarray

    def positions(self) -> list[int]:
        """[1 + n]: where each task stands in the order."""
        position = np.zeros(len(self.order) + 1, dtype=np.int64)
        position[self.order] = np.arange(len(self.order))
        return position.tolist()


def rows_of(plan: Plan) -> LoopRows:
    """The loops' rows of a plan, built once and kept in its memo."""
    rows = plan.memo.get("rows")
    if rows is None:
        rows = plan.memo["rows"] = loop_rows(plan, order_of(plan))
    return rows


def positions_of(plan: Plan) -> list[int]:
    """Where each task stands in the loops' order, built once and kept in the plan's memo."""
    position = plan.memo.get("positions")
    if position is None:
        position = plan.memo["positions"] = rows_of(plan).positions()
    return position


def jit_rows_of(plan: Plan) -> JitRows:
    """The compiled loops' rows of a plan (int64 arrays), built once and kept in its memo."""
    rows = plan.memo.get("jit_rows")
    if rows is None:
        order = order_of(plan)

        def column(values: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(values[order], dtype=np.int64)

        deps = [column(plan.dep_slots[:, j]) for j in range(plan.max_deps)]
        deps += [np.zeros(plan.n_tasks, dtype=np.int64)] * (MAX_DEPS - len(deps))
        rows = plan.memo["jit_rows"] = JitRows(
            tasks=column(np.arange(plan.n_tasks + 1)),
            dep0=deps[0],
            dep1=deps[1],
            dep2=deps[2],
            ranks=column(plan.task_rank),
            send0=column(plan.send_slots[:, 0]),
            send1=column(plan.send_slots[:, 1]),
            keys=column(plan.cost_key),
            next_keys=column(_next_keys(plan)),
        )
    return rows


def _next_keys(plan: Plan) -> np.ndarray:
    """[1 + n]: the cost key of the next task on the rank (the extra key `n_keys` after a rank's last)."""
    if plan.max_deps > MAX_DEPS:
        raise ValueError(f"a task waits for {plan.max_deps} slots; the loops take {MAX_DEPS}")
    last = np.zeros(plan.n_tasks + 1, dtype=bool)
    last[[h - 1 for h in plan.hi]] = True
    next_keys = np.append(plan.cost_key[1:], plan.n_keys)
    next_keys[last] = plan.n_keys
    return next_keys


def loop_rows(plan: Plan, order: np.ndarray) -> LoopRows:
    n = plan.n_tasks
    next_keys = _next_keys(plan)

    def column(values: np.ndarray) -> list[int]:
        return values[order].tolist() if values.any() else [0] * n  # many columns are all zero

    deps = [column(plan.dep_slots[:, j]) if j < plan.max_deps else [0] * n for j in range(MAX_DEPS)]
    return LoopRows(
        tasks=order.tolist(),
        deps=(deps[0], deps[1], deps[2]),
        ranks=plan.task_rank[order].tolist(),
        send0=column(plan.send_slots[:, 0]),
        send1=column(plan.send_slots[:, 1]),
        keys=plan.cost_key[order],
        next_keys=next_keys[order],
        order=order,
    )


def static_loop(rows: LoopRows, durs: list[float], t: list[float], start: list[float], p2p: float, pp: int) -> None:
    """start = max(previous task on the rank, two inputs); sends leave in FIFO order on the rank's pp stream."""
    pp_free = [0.0] * pp
    free = [0.0] * pp  # per rank: when its previous task ended
    dep0, dep1 = rows.deps[0], rows.deps[1]
    for i, a, b, d, r, k0, k1 in zip(rows.tasks, dep0, dep1, durs, rows.ranks, rows.send0, rows.send1, strict=True):
        s = free[r]
        x = t[a]
        if x > s:
            s = x
        x = t[b]
        if x > s:
            s = x
        start[i] = s
        e = s + d
        t[i] = free[r] = e
        if k0:
            f = pp_free[r]
            if f < e:
                f = e
            f += p2p
            t[k0] = f
            if k1:
                f += p2p
                t[k1] = f
            pp_free[r] = f


def full_loop(
    plan: Plan,
    rows: LoopRows,
    costs: PipelineCosts,
    tables: DurationTables,
    durs: list[float],
    t: list[float],
    start: list[float],
    dp_free: list[float],
) -> Timeline:
    """The loop with the DP stream played inline: the FSDP gather for task i+1 is issued when task i starts,
    then the gradient buckets of task i, then its reduce-scatter as its gradients are made (the issue order of
    `paraplan.sim.timeline`); on demand, task i's reduce-scatter and then task i+1's gather once task i ends."""
    n, pp = plan.n_tasks, plan.pp
    buckets = costs.dp_buckets_per_chunk
    gathers = tables.fsdp_gather_s
    gather_next = np.append(gathers, 0.0)[rows.next_keys].tolist()
    dur_next = np.append(tables.dur_s, 0.0)[rows.next_keys].tolist()
    units_next = np.append(tables.fsdp_units, 1.0)[rows.next_keys].tolist()
    scatters = tables.fsdp_scatter_s[rows.keys].tolist()
    units_own = tables.fsdp_units[rows.keys].tolist()
    demand = tables.fsdp_on_demand[rows.keys].tolist()
    demand_next = np.append(tables.fsdp_on_demand, 0.0)[rows.next_keys].tolist()
    reduce_share = [0.0] * n  # gradient bucket size of the chunk whose last weight gradient a task makes
    if costs.overlap_grad_reduce:
        position = positions_of(plan)
        for rank in range(pp):
            for task, c, _ in plan.last_weights[rank]:
                if costs.chunks[rank][c].dp_grad_reduce_s > 0:
                    reduce_share[position[task]] = costs.chunks[rank][c].dp_grad_reduce_s / buckets
    dp = list(dp_free)
    gate = [0.0] * (n + 2)
    units = tables.fsdp_units
    for rank in range(pp):  # the first task's gather is issued at the start of the step
        head = plan.lo[rank]
        key = plan.cost_key[head]
        head_gather = float(gathers[key]) if head < plan.hi[rank] else 0.0
        if head_gather > 0:
            gate[head] = dp[rank] + param_lead_s(head_gather, float(tables.dur_s[key]), float(units[key]))
            dp[rank] += head_gather
    grads_done = [0.0] * pp
    scatters_done = [0.0] * pp
    pp_free = [0.0] * pp
    p2p = costs.p2p_s
    dep0, dep1, dep2 = rows.deps
    free = [gate[head] for head in plan.lo]  # per rank: its previous task has ended and this task's gather arrived
    for i, a, b, c, d, r, k0, k1, g, dn, un, mn, sc, u, m, share in zip(
        rows.tasks, dep0, dep1, dep2, durs, rows.ranks, rows.send0, rows.send1, gather_next, dur_next, units_next,
        demand_next, scatters, units_own, demand, reduce_share, strict=True,
    ):  # fmt: skip
        s = free[r]
        x = t[a]
        if x > s:
            s = x
        x = t[b]
        if x > s:
            s = x
        x = t[c]
        if x > s:
            s = x
        start[i] = s
        e = s + d
        t[i] = e
        held = e  # until when the rank is held: the task, and on demand its reduce-scatter
        if m and sc > 0:  # on demand: the reduce-scatter holds the rank
            dp[r] = (dp[r] if dp[r] > e else e) + sc
            scatters_done[r] = held = dp[r]
            sc = 0.0
        if g > 0:
            if mn:  # gathered on demand: issued once this task is done
                f = dp[r] if dp[r] > e else e
                f += g
                dp[r] = gate[i + 1] = f
            else:  # prefetch the next task's parameters
                f = dp[r] if dp[r] > s else s
                dp[r] = f + g
                f += param_lead_s(g, dn, un)
                gate[i + 1] = f
            free[r] = held if held > f else f
        else:
            free[r] = held
        if k0:
            f = pp_free[r]
            if f < e:
                f = e
            f += p2p
            t[k0] = f
            if k1:
                f += p2p
                t[k1] = f
            pp_free[r] = f
        if share:
            for delay in bucket_delays_s(d, buckets):
                ready = s + delay
                dp[r] = (dp[r] if dp[r] > ready else ready) + share
            grads_done[r] = dp[r]
        if sc > 0:
            dp[r] = scatter_done_s(dp[r], s, d, sc, u)
            scatters_done[r] = dp[r]
    end = t[: n + 1]
    end[0] = 0.0
    rank_done, tail_kind = _tail(plan, costs, end, dp, grads_done, scatters_done)
    gates = FsdpGates(gate, gathers, plan.cost_key)
    return Timeline(start, end, t, rank_done, gates, tail_kind=tail_kind)


def full_loop_jit(
    plan: Plan,
    rows: JitRows,
    costs: PipelineCosts,
    tables: DurationTables,
    t: np.ndarray,
    start: np.ndarray,
    dp_free: list[float],
) -> Timeline:
    """`full_loop` compiled (`paraplan.sim.loops_jit`): the same set-up and tail around it, on arrays."""
    n, pp = plan.n_tasks, plan.pp
    buckets = costs.dp_buckets_per_chunk
    gathers = tables.fsdp_gather_s
    reduce_share = np.zeros(n)
    if costs.overlap_grad_reduce:
        position = positions_of(plan)
        for rank in range(pp):
            for task, c, _ in plan.last_weights[rank]:
                if costs.chunks[rank][c].dp_grad_reduce_s > 0:
                    reduce_share[position[task]] = costs.chunks[rank][c].dp_grad_reduce_s / buckets
    dp = list(dp_free)
    gate = np.zeros(n + 2)
    units = tables.fsdp_units
    for rank in range(pp):
        head = plan.lo[rank]
        key = plan.cost_key[head]
        head_gather = float(gathers[key]) if head < plan.hi[rank] else 0.0
        if head_gather > 0:
            gate[head] = dp[rank] + param_lead_s(head_gather, float(tables.dur_s[key]), float(units[key]))
            dp[rank] += head_gather
    dp_s = np.array(dp, dtype=np.float64)
    free = gate[list(plan.lo)]
    grads_done, scatters_done = np.zeros(pp), np.zeros(pp)
    _, full = loops()
    padded = tables.padded  # the tables with the entry after the last key (`sim.tables.timing_layout`)
    if padded is None:
        padded = (np.append(tables.dur_s, 0.0), np.append(gathers, 0.0), None, np.append(units, 1.0))
        padded += (np.append(tables.fsdp_on_demand, 0.0),)
    full(
        rows.tasks, rows.dep0, rows.dep1, rows.dep2, rows.ranks, rows.send0, rows.send1, rows.keys, rows.next_keys,
        tables.dur_s, padded[0], padded[1], padded[3], tables.fsdp_scatter_s, padded[4], reduce_share, int(buckets),
        t, start, dp_s, gate, free, grads_done, scatters_done, float(costs.p2p_s),
    )  # fmt: skip
    end = t[: n + 1].copy()
    end[0] = 0.0
    rank_done, tail_kind = _tail(plan, costs, end, dp_s.tolist(), grads_done.tolist(), scatters_done.tolist())
    gates = FsdpGates(gate, gathers, plan.cost_key)
    return Timeline(start, end, t, rank_done, gates, tail_kind=tail_kind)


def _tail(
    plan: Plan,
    costs: PipelineCosts,
    end: list[float] | np.ndarray,
    dp: list[float],
    grads_done: list[float],
    scatters_done: list[float],
) -> tuple[list[float], list[str]]:
    """Per rank: when its last backward, gradient reduction and reduce-scatters are done, and which came last."""
    rank_done, tail_kind = [], []
    last_tasks = plan.last_tasks
    if last_tasks is not None and isinstance(end, np.ndarray):
        lasts = end[last_tasks].tolist()  # the same floats, one gather
    else:
        lasts = [float(end[h - 1]) if h > lo else 0.0 for lo, h in zip(plan.lo, plan.hi, strict=True)]
    for rank, last in enumerate(lasts):
        grads = max(last, grads_done[rank])
        if not costs.overlap_grad_reduce:
            at = dp[rank]
            for _, c, _ in plan.last_weights[rank]:
                reduce_s = costs.chunks[rank][c].dp_grad_reduce_s
                if reduce_s > 0:
                    at = (at if at > last else last) + reduce_s
                    grads = at
        scatter = max(last, scatters_done[rank])
        rank_done.append(max(grads, scatter))
        tail_kind.append("fsdp" if scatter > grads else "dp")
    return rank_done, tail_kind


class FsdpGates(Mapping[int, tuple[float, str]]):
    """Task -> (when the FSDP gather it waits for arrives, "fsdp"), read off the loop's gate list."""

    def __init__(self, gate: list[float] | np.ndarray, gathers: np.ndarray, cost_key: np.ndarray) -> None:
        """`gathers`: the FSDP gather by cost key (`DurationTables.fsdp_gather_s`), `cost_key`: each task's key."""
        self._gate = gate  # an array from the compiled loop: made a list on the first read
        self._by_key = (gathers, cost_key)  # which tasks are gated: found on the first read (the tuner reads none)
        self._found: bytes | None = None

    @property
    def _gated(self) -> bytes:
        """[1 + n]: 1 where the task's parameters are gathered (index 0 unused)."""
        if self._found is None:
            gathers, cost_key = self._by_key
            self._found = (gathers[cost_key] > 0).tobytes()
        return self._found

    def get(self, task: int, default: tuple[float, str] | None = None) -> tuple[float, str] | None:
        """Without the generic Mapping.get's exception: the critical-path walk asks for every task."""
        gated = self._gated
        if 0 < task < len(gated) and gated[task]:
            gate = self._gate
            if type(gate) is not list:
                gate = self._gate = gate.tolist()
            return (gate[task], "fsdp")
        return default

    def __getitem__(self, task: int) -> tuple[float, str]:
        found = self.get(task)
        if found is None:
            raise KeyError(task)
        return found

    def __iter__(self) -> Iterator[int]:
        return (task for task in range(1, len(self._gated)) if self._gated[task])

    def __len__(self) -> int:
        return sum(self._gated[1:])
