"""Rank programs: the static order of actions one pipeline rank runs, and their flat-array form.

An action is (kind, local chunk, micro-batch) with kind F (forward), B (input gradient), W (weight gradient)
or BW (B and W back to back, as 1F1B runs them). The program builders (`paraplan.sim.schedules`) produce
one `RankProgram` per rank; the engine plays them against real durations and dependencies.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

F, B, W, BW = 0, 1, 2, 3
KIND_NAMES = ("F", "B", "W", "BW")

Action = tuple[int, int, int]
"""(kind, local chunk, micro-batch)."""


@dataclass(frozen=True, slots=True)
class RankProgram:
    """The static order of one pipeline rank."""

    actions: tuple[Action, ...]
    pairs: tuple[int, ...] = ()
    """Indices k where actions[k] (an F) and actions[k + 1] (a B or BW of another micro-batch) may run as
    one overlapped F&B pair, so one's EP all-to-all hides behind the other's compute (DualPipe)."""


class ActionArrays(NamedTuple):
    """The actions of every rank as flat arrays: what `paraplan.sim.plan` builds its task graph from."""

    kind: np.ndarray  # per action, all ranks concatenated in execution order
    chunk: np.ndarray
    mb: np.ndarray
    lengths: np.ndarray  # actions per rank
    pair_starts: np.ndarray  # global index k of each marked F&B pair (actions k and k + 1)


def flatten(programs: Sequence[RankProgram]) -> ActionArrays:
    """The programs' actions, all ranks concatenated in execution order."""
    lengths = np.array([len(p.actions) for p in programs], dtype=np.int64)
    flat = np.fromiter(
        itertools.chain.from_iterable(itertools.chain.from_iterable(p.actions for p in programs)), dtype=np.int64
    ).reshape(-1, 3)
    offset = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    starts = np.array([offset[r] + k for r, p in enumerate(programs) for k in p.pairs], dtype=np.int64)
    return ActionArrays(flat[:, 0].copy(), flat[:, 1].copy(), flat[:, 2].copy(), lengths, starts)


def rank_starts(lengths: np.ndarray) -> np.ndarray:
    """The index of each rank's first action in the flat arrays."""
    return np.concatenate(([0], np.cumsum(lengths)[:-1]))


def ordinal_in_rank(selected: np.ndarray, rank: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For every action, how many selected actions come before it on its rank (its place among them where
    selected): the micro-batch of a counter a program builder increments per call."""
    count = np.cumsum(selected)
    before = np.concatenate(([0], count))[start]  # selected actions of the earlier ranks
    return count - selected - before[rank]


def counted_arrays(codes: Sequence[Sequence[int]], kinds: Sequence[int], chunks: Sequence[int]) -> ActionArrays:
    """The actions of programs written as op codes, one list per rank, where op code c runs `kinds[c]` on chunk
    `chunks[c]` for the next micro-batch of its own counter (the builder's per-rank counter of that kind and chunk,
    from 0). No F&B pairs."""
    lengths = np.array([len(c) for c in codes], dtype=np.int64)
    code = np.fromiter(itertools.chain.from_iterable(codes), dtype=np.int64, count=int(lengths.sum()))
    rank = np.repeat(np.arange(len(codes), dtype=np.int64), lengths)
    start = rank_starts(lengths)
    mb = np.zeros(len(code), dtype=np.int64)
    for c in range(len(kinds)):
        selected = code == c
        mb[selected] = ordinal_in_rank(selected, rank, start)[selected]
    kind = np.array(kinds, dtype=np.int64)[code]
    chunk = np.array(chunks, dtype=np.int64)[code]
    return ActionArrays(kind, chunk, mb, lengths, np.zeros(0, dtype=np.int64))
