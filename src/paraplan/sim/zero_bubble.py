"""Zero-bubble programs: ZB-H1 and ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024).

Both split the backward into B (input gradient, on the critical path between stages) and W (weight
gradient, local), and move W into what would otherwise be bubbles.
"""

from __future__ import annotations

import numpy as np

from paraplan.sim.program import Action, ActionArrays, B, F, RankProgram, W, counted_arrays


def zb_h1(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> tuple[RankProgram, ...]:
    """ZB-H1 ("Zero Bubble Pipeline Parallelism", Qi et al. 2023, section 3.1, figure 3); one chunk per rank
    (vpp unused), no F&B pairs (overlap_pairs unused).

    1F1B's warm-up (pp - r - 1 forwards on rank r), then F B W in the steady state, with rank r running the
    W of micro-batch j - r after the B of micro-batch j: later ranks, which hold fewer micro-batches under
    1F1B, delay their W passes into the cool-down where they fill the bubble. Every rank then holds at most
    pp micro-batches (counted from F until W), 1F1B's peak (rank 0), and with T_F = T_B = T_W the bubble
    shrinks from (pp-1)(T_F + T_B + T_W) to (pp-1)(T_F + T_B - T_W), a third."""
    programs = []
    for rank in range(pp):
        warmup = min(pp - rank - 1, m)
        delay = rank
        actions: list[Action] = [(F, 0, i) for i in range(warmup)]
        next_w = 0
        for j in range(m):
            if j < m - warmup:
                actions.append((F, 0, warmup + j))
            actions.append((B, 0, j))
            if j - delay >= 0:
                actions.append((W, 0, next_w))
                next_w += 1
        actions += [(W, 0, i) for i in range(next_w, m)]
        programs.append(RankProgram(tuple(actions)))
    return tuple(programs)


def zb_v(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> tuple[RankProgram, ...]:
    """ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR, section 6): 2 chunks per rank in a V
    (rank r holds stages r and 2pp-1-r), the handcrafted order torchtitan runs as `ZBVZeroBubble`
    (torch.distributed.pipelining `ScheduleZBVZeroBubble._calculate_single_rank_operations`). Two chunks per
    rank whatever vpp says; no F&B pairs (overlap_pairs unused).

    Rank r: warm-up 2(pp - r) - 1 forwards of chunk 0, then r pairs (F chunk 1, F chunk 0), then pp - r rounds
    of F B W on chunk 1; steady state F B W on chunk 0 then F B W on chunk 1 (one forward and one backward per
    chunk, like 1F1B, so the steady state has no bubble whatever the pass times); cool-down r pairs of B
    (chunk 0, chunk 1) with their W deferred, pp - r rounds of B W on chunk 0, then the deferred W passes,
    which fill the drain. It holds at most 2pp chunk-micro-batches per rank (pp whole-rank micro-batches),
    1F1B's peak. Fewer than 2pp - 1 micro-batches: the order for 2pp - 1 with the missing micro-batches' actions
    left out, as torch does.

    A static order is played with the real pass times, so it must not depend on them: an order built for unit
    F = B = W times (a greedy list scheduler) interleaves deferred W passes into the steady state and, once B
    and W differ (activation recompute makes B about twice F and W small), stalls every rank on its neighbours
    once per micro-batch, a bubble that grows with m. Primus's `zero_bubble_v_schedule` (the zero-bubble
    repository) may order its passes from measured pass times instead; paraplan plays this order for it too."""
    n = max(2 * pp - 1, m)
    programs = []
    for rank in range(pp):
        actions: list[Action] = []
        f0 = f1 = b0 = b1 = 0
        for _ in range(2 * (pp - rank) - 1):
            actions.append((F, 0, f0))
            f0 += 1
        for _ in range(rank):
            actions += [(F, 1, f1), (F, 0, f0)]
            f1 += 1
            f0 += 1
        for _ in range(pp - rank):
            actions += [(F, 1, f1), (B, 1, b1), (W, 1, b1)]
            f1 += 1
            b1 += 1
        while f1 < f0 or f0 < n:  # steady state
            if f0 < n:
                actions.append((F, 0, f0))
                f0 += 1
            actions += [(B, 0, b0), (W, 0, b0), (F, 1, f1), (B, 1, b1), (W, 1, b1)]
            b0 += 1
            f1 += 1
            b1 += 1
        w0, w1 = b0, b1
        for _ in range(rank):  # cool-down: W deferred into the drain
            actions += [(B, 0, b0), (B, 1, b1)]
            b0 += 1
            b1 += 1
        for _ in range(pp - rank):
            actions += [(B, 0, b0), (W, 0, w0)]
            b0 += 1
            w0 += 1
        actions += [(W, 1, mb) for mb in range(w1, b1)]
        actions += [(W, 0, mb) for mb in range(w0, b0)]
        programs.append(RankProgram(tuple(a for a in actions if a[2] < m)))
    return tuple(programs)


# ------------------------------------------------------------------ the same actions as flat arrays (the fast path)
# Each (kind, chunk) of these programs runs its micro-batches in order, one counter each (`program.counted_arrays`):
# the programs written as op codes by segment, with list repetition.
_H1_KINDS, _H1_CHUNKS = (F, B, W), (0, 0, 0)
_V_KINDS, _V_CHUNKS = (F, F, B, B, W, W), (0, 1, 0, 1, 0, 1)
_F0, _F1, _B0, _B1, _W0, _W1 = range(6)


def zb_h1_arrays(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> ActionArrays:
    """`zb_h1(pp, vpp, m)`, flattened: step j runs F (while forwards are left), B, then W from step `rank` on."""
    f, b, w = 0, 1, 2
    codes = []
    for rank in range(pp):
        warmup = min(pp - rank - 1, m)
        forwards_until, weights_from = m - warmup, rank  # steps with an F: j < forwards_until; with a W: j >= rank
        low = min(forwards_until, weights_from, m)
        high = min(max(forwards_until, weights_from), m)
        middle = [b] if forwards_until < weights_from else [f, b, w]
        rank_codes = [f] * warmup + [f, b] * low + middle * (high - low) + [b, w] * (m - high)
        rank_codes += [w] * (m - max(0, m - weights_from))  # the W passes left for the cool-down
        codes.append(rank_codes)
    return counted_arrays(codes, _H1_KINDS, _H1_CHUNKS)


def zb_v_arrays(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> ActionArrays:
    """`zb_v(pp, vpp, m)`, flattened: the phases of its loops as repeated op codes, the actions of micro-batches
    past m dropped."""
    n = max(2 * pp - 1, m)
    codes = []
    for rank in range(pp):
        f0 = 2 * pp - rank - 1  # forwards of chunk 0 and 1 before the steady state
        with_f0 = max(0, n - f0)  # steady-state rounds with a forward of chunk 0, then those without
        without = max(0, max(n, f0) - (pp + with_f0))
        codes.append(
            [_F0] * (2 * (pp - rank) - 1) + [_F1, _F0] * rank + [_F1, _B1, _W1] * (pp - rank)
            + [_F0, _B0, _W0, _F1, _B1, _W1] * with_f0 + [_B0, _W0, _F1, _B1, _W1] * without
            + [_B0, _B1] * rank + [_B0, _W0] * (pp - rank) + [_W1] * rank + [_W0] * rank
        )  # fmt: skip
    arrays = counted_arrays(codes, _V_KINDS, _V_CHUNKS)
    if n == m:
        return arrays
    keep = arrays.mb < m
    rank = np.repeat(np.arange(pp, dtype=np.int64), arrays.lengths)
    lengths = np.bincount(rank[keep], minlength=pp).astype(np.int64)
    return ActionArrays(arrays.kind[keep], arrays.chunk[keep], arrays.mb[keep], lengths, arrays.pair_starts)
