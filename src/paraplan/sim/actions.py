"""The per-rank programs of a schedule as flat arrays: what `paraplan.sim.plan` builds its task graph from.

1F1B and Megatron's interleaved 1F1B (the schedules the tuner sweeps most, with the most actions) are
generated here with numpy, in the order `paraplan.sim.schedules` gives them (tested against it); the
other schedules are flattened from `rank_programs`.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from paraplan.sim.schedules import BW, F, chunks_per_rank, interleaved_warmup, rank_programs, validate_schedule


class ActionArrays(NamedTuple):
    kind: np.ndarray  # per action, all ranks concatenated in execution order
    chunk: np.ndarray
    mb: np.ndarray
    lengths: np.ndarray  # actions per rank
    pair_starts: np.ndarray  # global index k of each marked F&B pair (actions k and k + 1)


def action_arrays(schedule: str, pp: int, vpp: int, m: int, paired: bool) -> ActionArrays:
    """The actions of `rank_programs(schedule, pp, vpp, m, paired)`, flattened."""
    if pp > 1 and schedule in ("1f1b", "interleaved"):
        problems = validate_schedule(schedule, pp, vpp, m)
        if problems:
            raise ValueError("; ".join(problems))
        return _one_f_one_b_family(schedule, pp, vpp, m, paired)
    programs = rank_programs(schedule, pp, vpp, m, paired)
    lengths = np.array([len(p.actions) for p in programs], dtype=np.int64)
    flat = np.fromiter(
        itertools.chain.from_iterable(itertools.chain.from_iterable(p.actions for p in programs)), dtype=np.int64
    ).reshape(-1, 3)
    offset = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    starts = np.array([offset[r] + k for r, p in enumerate(programs) for k in p.pairs], dtype=np.int64)
    return ActionArrays(flat[:, 0].copy(), flat[:, 1].copy(), flat[:, 2].copy(), lengths, starts)


def _one_f_one_b_family(schedule: str, pp: int, vpp: int, m: int, paired: bool) -> ActionArrays:
    """Rank r: w_r warm-up forwards, then (F, B) steps, then the cool-down backwards, over Megatron's
    schedule table (micro-batches in groups of pp, chunk by chunk; the identity for 1F1B), whose k-th
    backward runs the chunks in reverse. Interleaved steps are the F&B pairs."""
    n_chunks = chunks_per_rank(schedule, vpp)
    total = m * n_chunks
    index = np.arange(total)
    group, within = np.divmod(index, n_chunks * pp)
    table_chunk, lane = np.divmod(within, pp)
    table_mb = group * pp + lane
    if schedule == "1f1b":
        table_chunk, table_mb = np.zeros(total, dtype=np.int64), index
        warmup = np.minimum(pp - 1 - np.arange(pp), m)
    else:
        warmup = np.array([min(interleaved_warmup(pp, vpp, r, m) + int(paired), total) for r in range(pp)])
    entry = np.empty((pp, 2 * total), dtype=np.int64)  # index into the table
    backward = np.zeros((pp, 2 * total), dtype=bool)
    for r, w in enumerate(warmup.tolist()):
        row, back = entry[r], backward[r]
        row[:w] = index[:w]
        row[w : 2 * total - w : 2] = index[w:]  # steady state: F of entry w + k, then B of entry k
        row[w + 1 : 2 * total - w : 2] = index[: total - w]
        row[2 * total - w :] = index[total - w :]
        back[w + 1 : 2 * total - w : 2] = True
        back[2 * total - w :] = True
    kind = np.where(backward.ravel(), BW, F)
    entry = entry.ravel()
    chunk = np.where(kind == BW, n_chunks - 1 - table_chunk[entry], table_chunk[entry])
    starts = np.zeros(0, dtype=np.int64)
    if schedule == "interleaved":  # every steady-state step is a pair
        starts = np.concatenate([r * 2 * total + np.arange(w, 2 * total - w, 2) for r, w in enumerate(warmup.tolist())])
    return ActionArrays(kind, chunk, table_mb[entry], np.full(pp, 2 * total, dtype=np.int64), starts)
