"""Pipeline splits that balance unequal decoder layers (a hybrid model's Mamba, attention, MLP and MoE blocks).

An even split by layer count leaves a hybrid model's stages unequal: a Nemotron-H MLP block does about 1.6x the work
of a Mamba block, and an attention block's work grows with the sequence. `balanced_layout` gives the contiguous split
(a `pipeline_layout`, Megatron's '|' in the hybrid pattern) whose heaviest stage does the least forward work, the
LM head counted on the last stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from paraplan.graph import kinds as K
from paraplan.graph.layers import Shard
from paraplan.graph.ops import OpKind
from paraplan.specs.model import ModelSpec

WORK_KINDS = (OpKind.GEMM, OpKind.ATTENTION, OpKind.SCAN)


def _shard(seq: int) -> Shard:
    return Shard(batch=1, seq=seq, seq_full=seq, tp=1, sp=False, cp=1, ep=1, etp=1, precision="bf16", flash=True)


def _work(ops: list) -> float:
    return sum(op.flops for op in ops if op.kind in WORK_KINDS)


@lru_cache(maxsize=256)
def layer_work(model: ModelSpec, seq: int) -> tuple[tuple[float, ...], float, float]:
    """(forward FLOPs of each decoder layer, of the first stage's edge blocks, of the last stage's) for one sequence.
    Routed experts count their top-k share, as a GPU computes them."""
    shard = _shard(seq)
    per_kind = {}
    layers = []
    for i in range(model.num_layers):
        kind = K.decoder_kind_of(model, i)
        if kind.name not in per_kind:
            per_kind[kind.name] = _work(kind.ops(model, shard))
        layers.append(per_kind[kind.name])
    first = sum(_work(k.ops(model, shard)) * (k.count(model) or 0) for k in K.edge_kinds(K.Placement.FIRST))
    last = sum(_work(k.ops(model, shard)) * (k.count(model) or 0) for k in K.edge_kinds(K.Placement.LAST))
    return tuple(layers), first, last


@lru_cache(maxsize=1024)
def balanced_layout(model: ModelSpec, stages: int, seq: int = 4096) -> tuple[int, ...] | None:
    """Decoder layers per model stage, contiguous and at least one each, minimising the heaviest stage's forward work
    (the embedding on the first stage, the head on the last); None when there are fewer layers than stages."""
    work, first, last = layer_work(model, seq)
    return min_max_split(work, stages, first, last)


def min_max_split(
    work: Sequence[float], stages: int, first_extra: float = 0.0, last_extra: float = 0.0
) -> tuple[int, ...] | None:
    """The contiguous split of `work` (one entry per layer) into `stages` stages of at least one layer each whose
    heaviest stage is lightest, `first_extra` counted on the first stage and `last_extra` on the last (dynamic
    programme over split points, O(stages x layers^2)); None when there are fewer layers than stages."""
    n = len(work)
    if stages < 1 or n < stages:
        return None
    prefix = [0.0]
    for w in work:
        prefix.append(prefix[-1] + w)

    def load(start: int, end: int, stage: int) -> float:
        extra = (first_extra if stage == 0 else 0.0) + (last_extra if stage == stages - 1 else 0.0)
        return prefix[end] - prefix[start] + extra

    # best[s][i]: the least heaviest load of stages 0..s-1 holding the first i layers; cut[s][i] the last start
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        lo, hi = s, n - (stages - s)
        for i in range(lo, hi + 1):
            for j in range(s - 1, i):
                value = max(best[s - 1][j], load(j, i, s - 1))
                if value < best[s][i]:
                    best[s][i], cut[s][i] = value, j
    counts = []
    i = n
    for s in range(stages, 0, -1):
        j = cut[s][i]
        counts.append(i - j)
        i = j
    return tuple(reversed(counts))
