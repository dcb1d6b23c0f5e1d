"""Random per-chunk costs for the simulator's property tests (shared by the engine and compiled-loop tests)."""

from __future__ import annotations

import random

from paraplan.sim.costs import ChunkCost, PipelineCosts
from paraplan.specs.schedule import schedule as schedule_named


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
        fsdp_units=rng.choice([1, 1, 4, 32]),
        fsdp_on_demand=fsdp and rng.random() < 0.25,
    )


def random_pipeline(rng: random.Random, schedule: str, pp: int, vpp: int, m: int, fsdp: bool) -> PipelineCosts:
    """A whole schedule's costs: random chunks, p2p (large enough sometimes to queue sends), overlap flags."""
    n_chunks = schedule_named(schedule).chunks_per_rank(vpp)
    return PipelineCosts(
        schedule=schedule,
        num_microbatches=m,
        chunks=tuple(tuple(random_chunk(rng, fsdp) for _ in range(n_chunks)) for _ in range(pp)),
        p2p_s=rng.choice([0.0, rng.uniform(0, 0.2), rng.uniform(0.5, 3.0)]),
        optimizer_s=tuple(rng.uniform(0, 1) for _ in range(pp)),
        overlap_grad_reduce=rng.random() < 0.5,
        overlap_param_gather=rng.random() < 0.5,
        ep_overlap=rng.choice([None, True, False]),
        dp_buckets_per_chunk=rng.choice([1, 4, 8]),
    )
