"""Random per-chunk costs for the simulator's property tests (shared by the engine and compiled-loop tests)."""

from __future__ import annotations

import random

from paraplan.sim.costs import ChunkCost


def random_chunk(rng: random.Random, fsdp: bool) -> ChunkCost:
    """One chunk's costs: backward 1-2.5x forward, some weight gradient, TP and EP traffic, DP/FSDP work."""
    f = rng.uniform(0.2, 2.0)
    return ChunkCost(
        forward_s=f,
        backward_input_s=f * rng.uniform(1.0, 2.5),
        backward_weight_s=f * rng.uniform(0.0, 1.2),
        comm_total_s={"tp": rng.uniform(0, 0.3), "ep": rng.uniform(0, 0.8)},
        comm_exposed_s={"tp": rng.uniform(0, 0.1), "ep": rng.uniform(0, 0.5)},
        activation_bytes=rng.uniform(1, 10),
        dp_grad_reduce_s=rng.choice([0.0, rng.uniform(0, 3)]),
        dp_param_gather_s=rng.choice([0.0, rng.uniform(0, 3)]),
        fsdp_gather_s=fsdp * rng.uniform(0, 2),
        fsdp_reduce_scatter_s=fsdp * rng.uniform(0, 2),
    )
