"""1F1B and Megatron-LM's interleaved 1F1B: their rank programs, and the same as flat numpy arrays.

- 1f1b: PipeDream-Flush (Narayanan et al. 2021): p - r - 1 warm-up forwards on rank r, then one forward
  one backward, then the cool-down backwards (Megatron-LM `forward_backward_pipelining_without_interleaving`).
- interleaved: Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, section 2.2) in the order of
  `forward_backward_pipelining_with_interleaving`: micro-batches grouped by pp per model chunk, warm-up
  (pp - r - 1)*2 + (vpp - 1)*pp forwards.
These are the schedules the tuner sweeps most, with the most actions, so their actions are also generated
with numpy (`*_arrays`, in the order the programs give them; tested against them).
"""

from __future__ import annotations

import numpy as np

from paraplan.sim.program import BW, Action, ActionArrays, F, RankProgram


def one_f_one_b(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> tuple[RankProgram, ...]:
    """One chunk per rank (vpp unused), no F&B pairs (overlap_pairs unused)."""
    programs = []
    for rank in range(pp):
        warmup = min(pp - rank - 1, m)
        actions: list[Action] = [(F, 0, i) for i in range(warmup)]
        for i in range(m - warmup):
            actions += [(F, 0, warmup + i), (BW, 0, i)]
        actions += [(BW, 0, i) for i in range(m - warmup, m)]
        programs.append(RankProgram(tuple(actions)))
    return tuple(programs)


def megatron_schedule_table(m: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) forward order of Megatron's interleaved schedule (`get_schedule_table` in
    megatron/core/pipeline_parallel/schedules.py): groups of `group` micro-batches run chunk by chunk; the
    last group takes the remainder."""
    table: list[tuple[int, int]] = []
    for first in range(0, m, group):
        last = min(first + group, m)
        table += [(mb, chunk) for chunk in range(vpp) for mb in range(first, last)]
    return table


def interleaved_warmup(pp: int, vpp: int, rank: int, m: int) -> int:
    """Megatron's warm-up forwards for the interleaved schedule: (pp - rank - 1)*2 + (vpp - 1)*pp,
    capped at the vpp*m forwards there are."""
    return min((pp - rank - 1) * 2 + (vpp - 1) * pp, m * vpp)


def interleaved(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> tuple[RankProgram, ...]:
    """vpp chunks per rank; every steady-state (F, B) step is an F&B pair. With overlap_pairs (the caller runs
    the pairs overlapped: Megatron-LM's `overlap_moe_expert_parallel_comm`) a pair hands its forward output on
    only when it ends, so each rank warms up one more micro-batch to keep the next stage fed (DualPipe pays the
    same one extra: PP+1 activations)."""
    extra_warmup = 1 if overlap_pairs else 0
    table = megatron_schedule_table(m, vpp, pp)
    forward = [(F, chunk, mb) for mb, chunk in table]
    backward = [(BW, vpp - 1 - chunk, mb) for mb, chunk in table]
    total = m * vpp
    programs = []
    for rank in range(pp):
        warmup = min(interleaved_warmup(pp, vpp, rank, m) + extra_warmup, total)
        actions: list[Action] = forward[:warmup]
        pairs = []
        for k in range(total - warmup):
            pairs.append(len(actions))
            actions += [forward[warmup + k], backward[k]]
        actions += backward[total - warmup :]
        programs.append(RankProgram(tuple(actions), tuple(pairs)))
    return tuple(programs)


def one_f_one_b_arrays(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> ActionArrays:
    """`one_f_one_b(pp, vpp, m)`, flattened."""
    return _family_arrays(pp, 1, m, overlap_pairs, interleave=False)


def interleaved_arrays(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> ActionArrays:
    """`interleaved(pp, vpp, m, overlap_pairs)`, flattened."""
    return _family_arrays(pp, vpp, m, overlap_pairs, interleave=True)


def _family_arrays(pp: int, n_chunks: int, m: int, paired: bool, interleave: bool) -> ActionArrays:
    """Rank r: w_r warm-up forwards, then (F, B) steps, then the cool-down backwards, over Megatron's
    schedule table (micro-batches in groups of pp, chunk by chunk; the identity for 1F1B), whose k-th
    backward runs the chunks in reverse. Interleaved steps are the F&B pairs."""
    total = m * n_chunks
    index = np.arange(total)
    group, within = np.divmod(index, n_chunks * pp)
    table_chunk, lane = np.divmod(within, pp)
    table_mb = group * pp + lane
    if not interleave:
        table_chunk, table_mb = np.zeros(total, dtype=np.int64), index
        warmup = np.minimum(pp - 1 - np.arange(pp), m)
    else:
        warmup = np.array([min(interleaved_warmup(pp, n_chunks, r, m) + int(paired), total) for r in range(pp)])
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
    if interleave:  # every steady-state step is a pair
        starts = np.concatenate([r * 2 * total + np.arange(w, 2 * total - w, 2) for r, w in enumerate(warmup.tolist())])
    return ActionArrays(kind, chunk, table_mb[entry], np.full(pp, 2 * total, dtype=np.int64), starts)
