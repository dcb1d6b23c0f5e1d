"""Uneven pipeline layouts: decoder layers per model stage chosen from the layers' projected costs.

A pipeline's steady state runs at the pace of its slowest stage (Narayanan et al. 2021, section 3.2: step =
(m + p - 1) x the slowest stage for 1F1B), so the layout that minimises the heaviest stage's busy time is the
fastest split. Megatron-LM takes it as `--pipeline-model-parallel-layout` (or `--decoder-first/last-pipeline-
num-layers`); DeepSeek-V3's and Llama 3's published layouts move layers off the stages holding the embedding
and the loss for the same reason.
"""

from __future__ import annotations

from paraplan.graph.balance import min_max_split
from paraplan.tune.agent.diagnosis import LayerCosts


def balanced(costs: LayerCosts, stages: int) -> tuple[int, ...] | None:
    """The contiguous split into `stages` stages of at least one layer each whose heaviest stage is lightest, from
    the layers' projected costs (`graph.balance.min_max_split`); None when there are fewer layers than stages."""
    return min_max_split(costs.layers_s, stages, costs.embedding_s, costs.head_s)


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
