"""Per-call duration tables: one entry per cost key of a plan (rank x chunk x kind, plus F&B pairs).

Every task duration is split into named parts that sum to it: forward compute, backward compute,
recompute, and the exposed TP/CP/EP communication already inside the compute times. ChunkCost gives the
communication per micro-batch; it belongs to F and B (activations and their gradients cross the group; the
weight gradients of W are local), so it is split between them in proportion to their durations.

An F&B pair (DualPipe's overlapped chunk, DeepSeek-V3 report figure 4) runs one micro-batch's forward and
another's backward together, so each one's EP all-to-all hides behind the other's compute: the pair takes their
sum less min(F's all-to-all, B's compute) and min(B's all-to-all, F's compute) (perfect interleaving, SM sharing
ignored). This is the only place EP overlap hides the all-to-all: within a phase it is exposed (`cost.block`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from paraplan.sim.costs import ChunkCost, PipelineCosts
from paraplan.sim.plan import N_KINDS, Plan
from paraplan.sim.program import BW, B, F, W


@dataclass(frozen=True, slots=True)
class DurationTables:
    dur_s: np.ndarray  # [n_keys] task duration on the compute stream
    forward_s: np.ndarray  # forward compute, exposed communication excluded
    backward_s: np.ndarray  # backward compute (B and W), recompute and exposed communication excluded
    recompute_s: np.ndarray
    exposed_s: dict[str, np.ndarray]  # per intra-layer kind: exposed communication inside the task
    hidden_s: dict[str, np.ndarray]  # per intra-layer kind: communication overlapped with the task
    fsdp_gather_s: np.ndarray  # FSDP all-gather of the parameters the task needs (F, B, BW)
    fsdp_scatter_s: np.ndarray  # FSDP reduce-scatter of the gradients the task makes (W, BW)
    fsdp_units: np.ndarray  # FSDP units the task's gather and reduce-scatter come in (>= 1; 1 on demand)
    fsdp_on_demand: np.ndarray  # 1.0 where the task's FSDP gather and reduce-scatter are not overlapped
    padded: np.ndarray | None = None
    """[5, n_keys + 1]: `dur_s`, `fsdp_gather_s`, `fsdp_scatter_s`, `fsdp_units` and `fsdp_on_demand` (views of its
    rows) each with the entry the compiled loops append after the last key (0.0, 1.0 for the units); None where the
    tables were built apart."""
    interference_s: np.ndarray | None = None
    """[n_keys] compute the EP all-to-all hidden in each F&B pair adds to it (`PipelineCosts.pair_interference`);
    None without pairs."""


def build_tables(plan: Plan, costs: PipelineCosts, *, parts: bool = True) -> DurationTables:
    """The tables by cost key: a [stage, kind] grid (stage = rank * n_chunks + chunk), then the pairs.
    parts=False: the durations and FSDP times only, the parts of the durations left zero (a plan with F&B
    pairs finds its chunks' exposed EP communication too: its pair durations need it; the same floats as with the
    parts, tests/sim/test_tables.py)."""
    flat = [c for row in costs.chunks for c in row]
    n_base = len(flat) * N_KINDS
    n_keys = plan.n_keys
    if not parts:
        return _paired_timing_tables(plan, costs, flat) if plan.pair_keys else _timing_tables(plan, flat)

    def column(values: list[float]) -> np.ndarray:
        return np.array(values, dtype=np.float64)

    def grid(by_kind: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        out = np.zeros(n_keys)
        out[:n_base] = np.stack(by_kind, axis=1).ravel()
        return out

    f = column([c.forward_s for c in flat])
    b = column([c.backward_input_s for c in flat])
    w = column([c.backward_weight_s for c in flat])
    zero = np.zeros(len(flat))
    dur = grid((f, b, w, b + w))
    gather_s = column([c.fsdp_gather_s for c in flat])
    scatter_s = column([c.fsdp_reduce_scatter_s for c in flat])
    before_b = gather_s + column([c.fsdp_refetch_s for c in flat])
    gather = grid((gather_s, before_b, zero, before_b))
    scatter = grid((zero, zero, scatter_s, scatter_s))
    demand_s = column([float(c.fsdp_on_demand) for c in flat])
    units_s = column([1 if c.fsdp_on_demand else max(1, c.fsdp_units) for c in flat])
    units, demand = np.ones(n_keys), np.zeros(n_keys)
    units[:n_base] = np.stack((units_s,) * N_KINDS, axis=1).ravel()
    demand[:n_base] = np.stack((demand_s,) * N_KINDS, axis=1).ravel()
    comm_share = _comm_share(f, b)
    exposed, hidden = {}, {}
    comm_in = np.zeros((len(flat), N_KINDS))
    for k in costs.intra_kinds():
        e = column([c.comm_exposed_s.get(k, 0.0) for c in flat])[:, None] * comm_share
        total = column([c.comm_total_s.get(k, 0.0) for c in flat])[:, None] * comm_share
        exposed[k], hidden[k] = np.zeros(n_keys), np.zeros(n_keys)
        exposed[k][:n_base] = e.ravel()
        hidden[k][:n_base] = np.maximum(0.0, total - e).ravel()
        comm_in += e
    rec_s = column([c.recompute_s for c in flat])
    rec = grid((zero, rec_s, zero, rec_s))
    in_dur = dur[:n_base] - comm_in.ravel()
    fwd, bwd = np.zeros(n_keys), np.zeros(n_keys)
    is_f = np.arange(n_base) % N_KINDS == F
    fwd[:n_base] = np.where(is_f, in_dur, 0.0)
    bwd[:n_base] = np.where(is_f, 0.0, in_dur - rec[:n_base])
    slowed = _pair_entries(
        plan, costs.pair_interference, dur, fwd, bwd, rec, gather, scatter, units, demand, exposed, hidden
    )
    return DurationTables(dur, fwd, bwd, rec, exposed, hidden, gather, scatter, units, demand, interference_s=slowed)


def _comm_share(f: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[chunk, kind]: the part of each chunk's communication inside each kind, F and B (and BW) in proportion to
    their durations (W, the weight gradients, communicates nothing)."""
    with_comm = f + b
    comm_share = np.zeros((len(f), N_KINDS))
    busy = with_comm > 0
    np.divide(f, with_comm, out=comm_share[:, F], where=busy)
    np.divide(b, with_comm, out=comm_share[:, B], where=busy)
    comm_share[:, BW] = comm_share[:, B]
    return comm_share


def _paired_timing_tables(plan: Plan, costs: PipelineCosts, flat: list[ChunkCost]) -> DurationTables:
    """`build_tables(parts=False)` with F&B pairs: the base keys gathered as `_timing_tables` does, then the pairs'
    entries from the chunks' exposed EP communication alone (`_pair_timing`), the other parts left zero: the same
    floats as the tables with the parts (tests/sim/test_tables.py)."""
    tables = _timing_tables(plan, flat)
    f = np.array([c.forward_s for c in flat], dtype=np.float64)
    b = np.array([c.backward_input_s for c in flat], dtype=np.float64)
    ep = np.array([c.comm_exposed_s.get("ep", 0.0) for c in flat], dtype=np.float64)
    exposed_ep = np.zeros(plan.n_keys)
    exposed_ep[: len(flat) * N_KINDS] = (ep[:, None] * _comm_share(f, b)).ravel()
    # the tables are views of `padded`, so the pairs' entries land there too (the compiled loops read it)
    slowed = _pair_timing(
        plan, costs.pair_interference, tables.dur_s, tables.fsdp_gather_s, tables.fsdp_scatter_s, tables.fsdp_units,
        tables.fsdp_on_demand, exposed_ep,
    )[3]  # fmt: skip
    return replace(tables, interference_s=slowed)


FIGURES = 8
"""A chunk's figures for the durations and FSDP times, in `_timing_tables`' order: forward, backward input, backward
weight, FSDP gather, refetch, reduce-scatter, on demand (0 or 1) and units."""
_BW, _BEFORE_B = FIGURES, FIGURES + 1  # the two sums per chunk after its figures: B + W, gather + refetch
_PER_CHUNK = FIGURES + 2
TIMING_ROWS = ("dur_s", "fsdp_gather_s", "fsdp_scatter_s", "fsdp_units", "fsdp_on_demand")


def timing_layout(plan: Plan, n_flat: int) -> np.ndarray:
    """[5, n_keys + 1]: where each entry of the timing tables (`TIMING_ROWS`) comes from, as an index into a call's
    values (its chunks' figures and their two sums, `_PER_CHUNK` per chunk, then the constants 0.0 and 1.0); the
    extra last column is the constant the compiled loops append (0.0, or 1.0 for the units). The same for every
    call on the plan with `n_flat` chunks: built once, kept in its memo."""
    key = ("timing_layout", n_flat)
    layout = plan.memo.get(key)
    if layout is None:
        n_keys = plan.n_keys
        zero, one = n_flat * _PER_CHUNK, n_flat * _PER_CHUNK + 1
        layout = np.full((len(TIMING_ROWS), n_keys + 1), zero, dtype=np.int64)
        layout[3] = one  # units: 1 where no chunk sets them (pairs' keys are built apart)
        base = np.arange(n_flat, dtype=np.int64)[:, None] * _PER_CHUNK  # [chunk, 1]
        by_kind = [row[: n_flat * N_KINDS].reshape(n_flat, N_KINDS) for row in layout]  # views: [chunk, kind]
        dur, gather, scatter, units, demand = by_kind
        dur[:, [F, B, W]] = base + np.array([0, 1, 2])
        dur[:, BW] = base[:, 0] + _BW
        gather[:, F] = base[:, 0] + 3
        gather[:, [B, BW]] = base + _BEFORE_B
        scatter[:, [W, BW]] = base + 5
        units[:] = base + 7
        demand[:] = base + 6
        layout = plan.memo[key] = layout
    return layout


def _timing_tables(plan: Plan, flat: list[ChunkCost]) -> DurationTables:
    """`build_tables(parts=False)` without F&B pairs: the durations and FSDP times by key, from one array of the
    chunks' figures gathered through the plan's `timing_layout` (the same floats: b + w and gather + refetch are the
    same additions, element by element; tests/sim/test_tables.py). The tables are views of one padded array
    (`DurationTables.padded`), whose extra column the compiled loops read."""
    index: dict[int, int] = {}  # by chunk: the ranks of a pipeline share their stages' ChunkCost objects
    rows: list[tuple] = []
    for c in flat:
        if id(c) not in index:
            index[id(c)] = len(rows)
            rows.append((
                c.forward_s, c.backward_input_s, c.backward_weight_s, c.fsdp_gather_s, c.fsdp_refetch_s,
                c.fsdp_reduce_scatter_s, float(c.fsdp_on_demand),
                1 if c.fsdp_on_demand or c.fsdp_units < 1 else c.fsdp_units,  # max(1, units) without the call
                0.0, 0.0,
            ))  # fmt: skip
    distinct = np.array(rows, dtype=np.float64).reshape(len(rows), _PER_CHUNK)
    distinct[:, _BW] = distinct[:, 1] + distinct[:, 2]  # elementwise: the same sums as per flat chunk
    distinct[:, _BEFORE_B] = distinct[:, 3] + distinct[:, 4]
    figures = distinct[np.array([index[id(c)] for c in flat], dtype=np.int64)]  # each chunk's row, in order
    values = np.concatenate((figures.ravel(), _CONSTANTS))
    padded = values[timing_layout(plan, len(flat))]
    dur, gather, scatter, units, demand = (row[:-1] for row in padded)
    none = np.zeros(plan.n_keys)
    return DurationTables(dur, none, none, none, {}, {}, gather, scatter, units, demand, padded)


_CONSTANTS = np.array([0.0, 1.0])


def _pair_entries(
    plan: Plan,
    interference: float,
    dur: np.ndarray,
    fwd: np.ndarray,
    bwd: np.ndarray,
    rec: np.ndarray,
    gather: np.ndarray,
    scatter: np.ndarray,
    units: np.ndarray,
    demand: np.ndarray,
    exposed: dict[str, np.ndarray],
    hidden: dict[str, np.ndarray],
) -> np.ndarray | None:
    """The F&B pair keys, after the base keys: both parts at once, the EP all-to-all of each hidden behind
    the other's compute, which it slows by `interference` per second hidden. Returns that slowdown by key (None
    without pairs)."""
    if not plan.pair_keys:
        return None
    ep = exposed["ep"]
    key, kf, kb, slowed, overlapped = _pair_timing(plan, interference, dur, gather, scatter, units, demand, ep)
    fwd[key], bwd[key], rec[key] = fwd[kf], bwd[kb], rec[kb]
    for k in exposed:
        exposed[k][key] = exposed[k][kf] + exposed[k][kb]
        hidden[k][key] = hidden[k][kf] + hidden[k][kb]
    exposed["ep"][key] -= overlapped
    hidden["ep"][key] += overlapped
    return slowed


def _pair_timing(
    plan: Plan,
    interference: float,
    dur: np.ndarray,
    gather: np.ndarray,
    scatter: np.ndarray,
    units: np.ndarray,
    demand: np.ndarray,
    exposed_ep: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The F&B pair keys' durations and FSDP entries (a plan with pairs), from the base keys' and their exposed EP
    communication `exposed_ep`: (pair keys, their F keys, their B keys, the slowdown by key, the EP seconds hidden)."""
    pairs = np.array(plan.pair_keys, dtype=np.int64)
    key = plan.pp * plan.n_chunks * N_KINDS + np.arange(len(pairs))
    kf = (pairs[:, 0] * plan.n_chunks + pairs[:, 1]) * N_KINDS + F
    kb = (pairs[:, 0] * plan.n_chunks + pairs[:, 3]) * N_KINDS + pairs[:, 2]
    ep_f, ep_b = exposed_ep[kf], exposed_ep[kb]
    # each one's all-to-all hides behind the other's compute only, not its own (the phase waits for it)
    overlapped = np.minimum(ep_f, dur[kb] - ep_b) + np.minimum(ep_b, dur[kf] - ep_f)
    slowed = np.zeros(len(dur))
    slowed[key] = interference * overlapped
    dur[key] = dur[kf] + dur[kb] - overlapped + slowed[key]
    gather[key], scatter[key] = gather[kf] + gather[kb], scatter[kf] + scatter[kb]
    demand[key] = np.maximum(demand[kf], demand[kb])
    units[key] = np.where(demand[key] > 0, 1.0, units[kf] + units[kb])
    return key, kf, kb, slowed, overlapped
