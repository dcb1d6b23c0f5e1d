"""DualPipe and DualPipeV programs (DeepSeek-V3 technical report, section 3.2.1; deepseek-ai/DualPipe).

Both follow the eight steps of `DualPipe.step` / `DualPipeV.step` in the DualPipe repository:
  1 nF0, 2 nF0F1, 3 nB1W1F1 (zero bubble), 4 nF0B1F1B0 (main step, F&B pairs), 5 nB1F1B0,
  6 nB1B0 (second half with zero bubble), 7 nWB0 (zero bubble), 8 nW.
"Phase" 0 is the half of the model a rank sees first, phase 1 the other half:
- DualPipe (pp ranks, even): micro-batches 0..m/2-1 enter at rank 0 (direction 0, chunk 0 holds model stage
  r), m/2..m-1 enter at rank pp-1 (direction 1, chunk 1 holds model stage pp-1-r). Rank r and rank pp-1-r
  run mirror programs; for ranks in the second half phase 0 is direction 1.
- DualPipeV (the "cut-in-half" V variant): every micro-batch goes down chunk 0 (stages 0..pp-1) and back up
  chunk 1 (stages pp..2pp-1); phase = chunk.
A backward "with zero bubble" is B alone, its W queued and run later by a `_weight_chunk` (FIFO,
`WeightGradStore`); the others are B and W together (BW).
"""

from __future__ import annotations

import itertools
from collections import deque

import numpy as np

from paraplan.sim.program import BW, Action, ActionArrays, B, F, RankProgram, W, ordinal_in_rank, rank_starts


class _Program:
    """Mimics the chunk calls of DualPipe.step to record one rank's action order."""

    def __init__(self, chunk_of_phase: tuple[int, int], first_microbatch_of_chunk: tuple[int, int]) -> None:
        self.chunk_of_phase = chunk_of_phase
        self.first_microbatch = first_microbatch_of_chunk
        self.forwards = [0, 0]
        self.backwards = [0, 0]
        self.weights: deque[tuple[int, int]] = deque()
        self.actions: list[Action] = []
        self.pairs: list[int] = []

    def forward(self, phase: int) -> None:
        chunk = self.chunk_of_phase[phase]
        self.actions.append((F, chunk, self.first_microbatch[chunk] + self.forwards[phase]))
        self.forwards[phase] += 1

    def backward(self, phase: int, zero_bubble: bool = False) -> None:
        chunk = self.chunk_of_phase[phase]
        mb = self.first_microbatch[chunk] + self.backwards[phase]
        self.backwards[phase] += 1
        if zero_bubble:
            self.actions.append((B, chunk, mb))
            self.weights.append((chunk, mb))
        else:
            self.actions.append((BW, chunk, mb))

    def weight(self) -> None:
        chunk, mb = self.weights.popleft()
        self.actions.append((W, chunk, mb))

    def forward_backward(self, phase_f: int, phase_b: int) -> None:
        """`_forward_backward_chunk`: F of one micro-batch overlapped with B of another."""
        self.pairs.append(len(self.actions))
        self.forward(phase_f)
        self.backward(phase_b)


def _eight_steps(prog: _Program, half_ranks: int, half_rank: int, chunks: int, is_turn: bool) -> None:
    """The body shared by DualPipe.step (half_* per direction) and DualPipeV.step (half_ranks = pp)."""
    n, r = half_ranks, half_rank
    for _ in range((n - r - 1) * 2):  # step 1: nF0
        prog.forward(0)
    for _ in range(r + 1):  # step 2: nF0F1
        prog.forward(0)
        prog.forward(1)
    for _ in range(n - r - 1):  # step 3: nB1W1F1 (zero bubble)
        prog.backward(1, zero_bubble=True)
        prog.weight()
        prog.forward(1)
    for i in range(chunks - 2 * n + r + 1):  # step 4 (main step): nF0B1F1B0
        if i == 0 and is_turn:
            # the repository does not overlap these two chunks, to shorten the bubble
            prog.forward(0)
            prog.backward(1)
        else:
            prog.forward_backward(0, 1)
        prog.forward_backward(1, 0)
    for _ in range(n - r - 1):  # step 5: nB1F1B0
        prog.backward(1)
        prog.forward_backward(1, 0)
    zero_bubble = False
    steps_6 = r + 1
    for i in range(steps_6):  # step 6: nB1B0, the second half with zero bubble
        if i == steps_6 // 2 and r % 2 == 1:
            zero_bubble = True
        prog.backward(1, zero_bubble)
        if i == steps_6 // 2 and r % 2 == 0:
            zero_bubble = True
        prog.backward(0, zero_bubble)
    for _ in range(n - r - 1):  # step 7: nWB0 (zero bubble)
        prog.weight()
        prog.backward(0, zero_bubble=True)
    for _ in range(r + 1):  # step 8: nW
        prog.weight()
    assert not prog.weights, "every queued weight gradient runs"


def dualpipe(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> tuple[RankProgram, ...]:
    """DualPipe on pp ranks (even) with m micro-batches (even, >= 2*pp); two chunks per rank whatever vpp says.
    Its F&B pairs are marked whether or not the caller overlaps them."""
    half = pp // 2
    programs = []
    for rank in range(pp):
        second_half = rank >= half
        half_rank = pp - 1 - rank if second_half else rank
        prog = _Program((1, 0) if second_half else (0, 1), (0, m // 2))
        _eight_steps(prog, half, half_rank, m // 2, is_turn=half_rank == half - 1)
        programs.append(RankProgram(tuple(prog.actions), tuple(prog.pairs)))
    return tuple(programs)


def dualpipev(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> tuple[RankProgram, ...]:
    """DualPipeV on pp ranks (2 chunks each, V shape, whatever vpp says) with m >= 2*pp micro-batches. Its F&B
    pairs are marked whether or not the caller overlaps them."""
    programs = []
    for rank in range(pp):
        prog = _Program((0, 1), (0, 0))
        _eight_steps(prog, pp, rank, m, is_turn=rank == pp - 1)
        programs.append(RankProgram(tuple(prog.actions), tuple(prog.pairs)))
    return tuple(programs)


# ------------------------------------------------------------------ the same actions as flat arrays (the fast path)
# `_eight_steps` as op codes, written step by step with list repetition; `_decode` numbers them in one numpy pass over
# every rank. Codes: a forward of phase 0 / 1 (plain, or heading an F&B pair), a backward of phase 0 / 1 (BW, or B
# with zero bubble, its W queued), a queued W.
_F, _PF, _BW, _ZB, _W = 0, 2, 4, 6, 8  # + phase for the first four


def _eight_step_codes(n: int, r: int, chunks: int, is_turn: bool) -> list[int]:
    """`_eight_steps(prog, n, r, chunks, is_turn)`'s calls, one op code each, in order."""
    codes = [_F] * ((n - r - 1) * 2)  # step 1
    codes += [_F, _F + 1] * (r + 1)  # step 2
    codes += [_ZB + 1, _W, _F + 1] * (n - r - 1)  # step 3
    main = chunks - 2 * n + r + 1  # step 4
    if main > 0:
        first = [_F, _BW + 1] if is_turn else [_PF, _BW + 1]
        codes += first + [_PF + 1, _BW] + [_PF, _BW + 1, _PF + 1, _BW] * (main - 1)
    codes += [_BW + 1, _PF + 1, _BW] * (n - r - 1)  # step 5
    zero_bubble = False
    steps_6 = r + 1
    for i in range(steps_6):  # step 6
        if i == steps_6 // 2 and r % 2 == 1:
            zero_bubble = True
        codes.append((_ZB if zero_bubble else _BW) + 1)
        if i == steps_6 // 2 and r % 2 == 0:
            zero_bubble = True
        codes.append(_ZB if zero_bubble else _BW)
    codes += [_W, _ZB] * (n - r - 1)  # step 7
    codes += [_W] * (r + 1)  # step 8
    return codes


def _decode(codes: list[list[int]], chunk_of_phase: list[tuple[int, int]], first_mb: tuple[int, int]) -> ActionArrays:
    """The actions of `_Program` for each rank's op codes: each forward (backward) of a phase takes the phase's next
    micro-batch, a W the oldest queued B's (chunk, micro-batch)."""
    lengths = np.array([len(c) for c in codes], dtype=np.int64)
    code = np.fromiter(itertools.chain.from_iterable(codes), dtype=np.int64, count=int(lengths.sum()))
    rank = np.repeat(np.arange(len(codes), dtype=np.int64), lengths)
    start = rank_starts(lengths)
    is_w = code == _W
    phase = np.where(is_w, 0, code % 2)
    chunk = np.array(chunk_of_phase, dtype=np.int64)[rank, phase]
    forward = code < _BW
    mb = np.zeros(len(code), dtype=np.int64)
    for is_forward in (True, False):
        for p in (0, 1):
            selected = (forward == is_forward) & ~is_w & (phase == p)
            mb[selected] = ordinal_in_rank(selected, rank, start)[selected]
    mb += np.array(first_mb, dtype=np.int64)[chunk]
    kind = np.select([forward, code >= _ZB], [F, B], BW)
    queued = np.flatnonzero((code == _ZB) | (code == _ZB + 1))  # FIFO per rank: the i-th W of a rank takes its
    waits = np.flatnonzero(is_w)  # i-th queued B, and each rank's queue ends empty (`_eight_steps` asserts it)
    if len(queued) != len(waits):
        raise AssertionError("every queued weight gradient runs")
    chunk[waits], mb[waits] = chunk[queued], mb[queued]
    kind[is_w] = W
    pairs = np.flatnonzero((code == _PF) | (code == _PF + 1))
    return ActionArrays(kind, chunk, mb, lengths, pairs)


def dualpipe_arrays(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> ActionArrays:
    """`dualpipe(pp, vpp, m)`, flattened."""
    half = pp // 2
    codes, chunk_of_phase = [], []
    for rank in range(pp):
        second_half = rank >= half
        half_rank = pp - 1 - rank if second_half else rank
        codes.append(_eight_step_codes(half, half_rank, m // 2, half_rank == half - 1))
        chunk_of_phase.append((1, 0) if second_half else (0, 1))
    return _decode(codes, chunk_of_phase, (0, m // 2))


def dualpipev_arrays(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> ActionArrays:
    """`dualpipev(pp, vpp, m)`, flattened."""
    codes = [_eight_step_codes(pp, rank, m, rank == pp - 1) for rank in range(pp)]
    return _decode(codes, [(0, 1)] * pp, (0, 0))
