"""Stragglers: the expected wait of a synchronous step for its slowest data-parallel rank.

Ranks that reduce gradients together all wait for the slowest. With the run-to-run variation sigma_k of
each block measured on the local devices, a rank's compute between two synchronisations varies by
sigma = sqrt(sum_k n_k sigma_k^2) (independent runs), and the slowest of N ranks finishes c(N) sigma after
the average one, c(N) being the expected maximum of N standard normal draws (c(2) = 0.56, c(64) = 2.34,
c(1024) = 3.25; order statistics, e.g. Gumbel 1958). The core projection has no such term: the hybrid adds
it as a part of its own, `straggler_wait`. On GPUs, whose kernels vary by well under 1%, it stays small.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from functools import cache

from paraplan.graph import kinds as K
from paraplan.result import BreakdownPart, Projection
from paraplan.specs.training import TrainingSpec


@cache
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normal draws], by numerical integration."""
    if n <= 1:
        return 0.0
    steps, lo, hi = 4000, -9.0, 9.0
    dx = (hi - lo) / steps
    total = 0.0
    for i in range(steps + 1):
        x = lo + i * dx
        pdf = math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        weight = 0.5 if i in (0, steps) else 1.0
        total += weight * x * n * pdf * cdf ** (n - 1)
    return total * dx


def straggler_wait_s(train: TrainingSpec, layer_counts: Mapping[str, int], jitter_s: Mapping[str, float]) -> float:
    """Expected wait per step at the gradient reduction for the slowest of the dp * cp ranks."""
    ranks = train.dp * train.cp
    if ranks <= 1:
        return 0.0
    variance = 0.0
    for kind, count in layer_counts.items():
        # kinds that hold a layer are spread over the pipeline stages; the embedding and the head sit on one
        per_rank = count / train.pp if K.layer_kind(kind).holds_layer else count
        variance += per_rank * jitter_s.get(kind, 0.0) ** 2
    return expected_max_normal(ranks) * math.sqrt(train.num_microbatches * variance)


def with_straggler_wait(projection: Projection, wait_s: float) -> Projection:
    """The projection with `wait_s` added to the step as the part `BreakdownPart.STRAGGLER_WAIT`."""
    if wait_s <= 0:
        return projection
    pipeline = projection.pipeline
    breakdown = dict(pipeline.breakdown) | {BreakdownPart.STRAGGLER_WAIT: wait_s}
    pipeline = replace(pipeline, step_time_s=pipeline.step_time_s + wait_s, breakdown=breakdown)
    return replace(projection, pipeline=pipeline, step_time_s=pipeline.step_time_s)
