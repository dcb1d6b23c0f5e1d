"""Per-call duration tables: one entry per cost key of a plan (rank x chunk x kind, plus F&B pairs).

Every task duration is split into named parts that sum to it: forward compute, backward compute,
recompute, and the exposed TP/CP/EP communication already inside the compute times. ChunkCost gives the
communication per micro-batch; it belongs to F and B (activations and their gradients cross the group; the
weight gradients of W are local), so it is split between them in proportion to their durations.

An F&B pair (DualPipe's overlapped chunk, DeepSeek-V3 report figure 4) runs one micro-batch's forward and
another's backward together, so each one's EP all-to-all hides behind the other's compute: the pair takes
max(compute of both, exposed EP of both) instead of their sum (perfect interleaving, SM sharing ignored).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.sim.costs import ChunkCost, PipelineCosts
from paraplan.sim.plan import N_KINDS, Plan
from paraplan.sim.schedules import BW, B, F, W


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


def _kind_time(chunk: ChunkCost, kind: int) -> float:
    if kind == F:
        return chunk.forward_s
    if kind == B:
        return chunk.backward_input_s
    if kind == W:
        return chunk.backward_weight_s
    return chunk.backward_input_s + chunk.backward_weight_s


def build_tables(plan: Plan, costs: PipelineCosts) -> DurationTables:
    n_keys = plan.n_keys
    dur = np.zeros(n_keys)
    fwd = np.zeros(n_keys)
    bwd = np.zeros(n_keys)
    rec = np.zeros(n_keys)
    kinds = costs.intra_kinds()
    exposed = {k: np.zeros(n_keys) for k in kinds}
    hidden = {k: np.zeros(n_keys) for k in kinds}
    gather = np.zeros(n_keys)
    scatter = np.zeros(n_keys)
    for rank, row in enumerate(costs.chunks):
        for chunk_index, chunk in enumerate(row):
            with_comm = chunk.forward_s + chunk.backward_input_s  # W (weight gradients) communicates nothing
            for kind in range(N_KINDS):
                key = plan.base_key(rank, chunk_index, kind)
                d = _kind_time(chunk, kind)
                comm_part = chunk.forward_s if kind == F else 0.0 if kind == W else chunk.backward_input_s
                share = comm_part / with_comm if with_comm > 0 else 0.0
                dur[key] = d
                gather[key] = chunk.fsdp_gather_s if kind != W else 0.0
                scatter[key] = chunk.fsdp_reduce_scatter_s if kind in (W, BW) else 0.0
                comm_in = 0.0
                for k in kinds:
                    e = chunk.comm_exposed_s.get(k, 0.0) * share
                    exposed[k][key] = e
                    hidden[k][key] = max(0.0, chunk.comm_total_s.get(k, 0.0) * share - e)
                    comm_in += e
                if kind == F:
                    fwd[key] = d - comm_in
                else:
                    rec[key] = chunk.recompute_s if kind in (B, BW) else 0.0
                    bwd[key] = d - comm_in - rec[key]
    for index, (rank, chunk_f, kind_b, chunk_b) in enumerate(plan.pair_keys):
        key = plan.pp * plan.n_chunks * N_KINDS + index
        kf = plan.base_key(rank, chunk_f, F)
        kb = plan.base_key(rank, chunk_b, kind_b)
        ep = exposed["ep"][kf] + exposed["ep"][kb]
        compute = dur[kf] + dur[kb] - ep
        overlapped = min(compute, ep)  # EP all-to-all of one hidden behind the other's compute
        dur[key] = dur[kf] + dur[kb] - overlapped
        fwd[key], bwd[key], rec[key] = fwd[kf], bwd[kb], rec[kb]
        gather[key], scatter[key] = gather[kf] + gather[kb], scatter[kf] + scatter[kb]
        for k in kinds:
            exposed[k][key] = exposed[k][kf] + exposed[k][kb]
            hidden[k][key] = hidden[k][kf] + hidden[k][kb]
        exposed["ep"][key] -= overlapped
        hidden["ep"][key] += overlapped
    return DurationTables(dur, fwd, bwd, rec, exposed, hidden, gather, scatter)
