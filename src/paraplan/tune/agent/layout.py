"""Uneven pipeline layouts: decoder layers per model stage chosen from the layers' projected costs.

A pipeline's steady state runs at the pace of its slowest stage (Narayanan et al. 2021, section 3.2: step =
(m + p - 1) x the slowest stage for 1F1B), so the layout that minimises the heaviest stage's busy time is the
fastest split. Megatron-LM takes it as `--pipeline-model-parallel-layout` (or `--decoder-first/last-pipeline-
num-layers`); DeepSeek-V3's and Llama 3's published layouts move layers off the stages holding the embedding
and the loss for the same reason.
"""

from __future__ import annotations

from paraplan.tune.agent.diagnosis import LayerCosts


def balanced(costs: LayerCosts, stages: int) -> tuple[int, ...] | None:
    """The contiguous split into `stages` stages of at least one layer each whose heaviest stage is lightest
    (dynamic programme over split points, O(stages x layers^2)); None when there are fewer layers than stages."""
    work = costs.layers_s
    n = len(work)
    if stages < 1 or n < stages:
        return None
    prefix = [0.0]
    for w in work:
        prefix.append(prefix[-1] + w)

    def load(start: int, end: int, stage: int) -> float:
        extra = (costs.embedding_s if stage == 0 else 0.0) + (costs.head_s if stage == stages - 1 else 0.0)
        return prefix[end] - prefix[start] + extra

    inf = float("inf")
    # best[s][i]: the lightest heaviest stage placing the first i layers on stages 0..s
    best = [[inf] * (n + 1) for _ in range(stages)]
    cut = [[0] * (n + 1) for _ in range(stages)]
    for i in range(1, n - stages + 2):
        best[0][i] = load(0, i, 0)
    for s in range(1, stages):
        for i in range(s + 1, n - (stages - s - 1) + 1):
            for j in range(s, i):
                value = max(best[s - 1][j], load(j, i, s))
                if value < best[s][i]:
                    best[s][i], cut[s][i] = value, j
    counts, end = [], n
    for s in range(stages - 1, 0, -1):
        start = cut[s][end]
        counts.append(end - start)
        end = start
    counts.append(end)
    return tuple(reversed(counts))


def move_one_layer(costs: LayerCosts, layout: tuple[int, ...]) -> tuple[int, ...] | None:
    """The layout with one layer moved from the heaviest stage to its lighter neighbour (a small, explainable
    step); None when that does not lower the heaviest stage."""
    busy = costs.stage_s(layout)
    heavy = max(range(len(layout)), key=lambda i: busy[i])
    if layout[heavy] <= 1:
        return None
    neighbours = [i for i in (heavy - 1, heavy + 1) if 0 <= i < len(layout)]
    if not neighbours:
        return None
    light = min(neighbours, key=lambda i: busy[i])
    moved = list(layout)
    moved[heavy] -= 1
    moved[light] += 1
    after = costs.stage_s(tuple(moved))
    return tuple(moved) if max(after) < max(busy) - 1e-12 else None
