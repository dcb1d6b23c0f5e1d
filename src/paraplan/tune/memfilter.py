"""Memory pre-filter: the peak bytes per GPU in closed form, computed before any timing work.

Weights, gradients and optimizer states come from `paraplan.memory.model.state_bytes` under the candidate's
sharding; activations from the tensors the core's operator lists (`paraplan.graph.layers`) save for backward,
per layer kind and recompute mode, times the (chunk, micro-batch)s each rank holds at its peak, which the
schedule's static plan gives (`paraplan.sim.plan.build_plan`: the order of the actions, no durations).
Per-layer facts and plans are cached, so one estimate is a few dozen arithmetic operations.

The filter rejects a candidate only when the estimate exceeds the usable HBM by more than `slack`: the
projection's own memory model has the last word on everything that passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from paraplan.cost.block import gathered_params, weight_params
from paraplan.graph import layers as L
from paraplan.graph.ops import OpKind
from paraplan.graph.partition import PipelineSplit, pipeline_split, split_stages
from paraplan.memory.model import CUDA_CONTEXT_BYTES, FRAGMENTATION, HEADROOM, comm_buffer_bytes, state_bytes
from paraplan.sim.plan import build_plan
from paraplan.sim.schedules import chunk_model_stage, chunks_per_rank
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec

DEFAULT_SLACK = 0.05
"""Estimates up to 5% above the usable HBM still go to the projection, so that a small drift between this
estimate and the core's memory model never hides a configuration that fits."""


@dataclass(frozen=True, slots=True)
class BlockFacts:
    """Parameters and saved-for-backward bytes of one block (a layer kind, the head) for one micro-batch."""

    dense_params: float
    expert_params: float
    saved_none_bytes: float
    saved_selective_bytes: float

    def saved_bytes(self, mode: str) -> float:
        if mode == "selective":
            return self.saved_selective_bytes
        return 0.0 if mode == "full" else self.saved_none_bytes


def _facts(ops: list) -> BlockFacts:
    dense = expert = saved = selective_saved = 0.0
    for op in ops:
        if op.kind is OpKind.COMM:
            continue
        n = weight_params(op)
        if op.name.removeprefix("mtp_").startswith("expert_"):
            expert += n
        else:
            dense += n
        saved += op.saved_bytes
        if "selective" in op.tags:
            selective_saved += op.saved_bytes
    return BlockFacts(dense, expert, saved, saved - selective_saved)


@lru_cache(maxsize=4096)
def block_facts(model: ModelSpec, shard: L.Shard) -> dict[str, BlockFacts]:
    vocab = L.padded_vocab(model, shard.tp)
    facts = {
        "dense": _facts(L.decoder_layer_ops(model, shard, moe=False)),
        "head": _facts(L.head_ops(model, shard, vocab)),
    }
    if model.is_moe:
        facts["moe"] = _facts(L.decoder_layer_ops(model, shard, moe=True))
    if model.mtp_num_layers:
        facts["mtp"] = _facts(L.mtp_ops(model, shard, vocab))
    return facts


@lru_cache(maxsize=64)
def _moe_prefix(model: ModelSpec) -> tuple[int, ...]:
    """prefix[i] = MoE layers among the first i decoder layers."""
    out = [0]
    for i in range(model.num_layers):
        out.append(out[-1] + int(model.is_moe_layer(i)))
    return tuple(out)


Chunk = tuple[int, int, bool]
"""(first decoder layer, decoder layers, holds the head) of one model stage."""


@lru_cache(maxsize=2048)
def _rank_chunks(
    model: ModelSpec, split: PipelineSplit
) -> tuple[tuple[tuple[Chunk, ...], ...], tuple[Chunk, ...], np.ndarray]:
    """[rank][local chunk] -> the model stage it holds (DualPipe's second chunk is a copy of another stage);
    the distinct stages, and [rank, local chunk] -> index of its stage among them."""
    schedule, pp, vpp = split[:3]
    stages = [(s.first_layer, s.num_layers, s.has_head) for s in split_stages(model, split)]
    rank_chunks = tuple(tuple(stages[index] for index in row) for row in chunk_model_stage(schedule, pp, vpp))
    distinct = tuple(dict.fromkeys(chunk for chunks in rank_chunks for chunk in chunks))
    where = {chunk: k for k, chunk in enumerate(distinct)}
    return rank_chunks, distinct, np.array([[where[chunk] for chunk in chunks] for chunks in rank_chunks])


@lru_cache(maxsize=4096)
def _inflight(schedule: str, pp: int, vpp: int, m: int, paired: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The schedule's candidate peak (chunk, micro-batch) counts, all ranks stacked: (counts [rows, chunks],
    the rank of each row, each rank's first row)."""
    plan = build_plan(schedule, pp, vpp, m, paired)
    rows = [v if len(v) else np.zeros((1, plan.n_chunks), dtype=np.int64) for v in plan.inflight_vectors]
    owner = np.concatenate([np.full(len(v), r) for r, v in enumerate(rows)])
    starts = np.concatenate(([0], np.cumsum([len(v) for v in rows])[:-1]))
    return np.vstack(rows).astype(float), owner, starts


class GroupMemory:
    """The memory estimate of one structure, for any of its recompute variants.

    States (weights, gradients, optimizer) do not depend on recompute and are computed once per distinct
    rank; activations per variant from the chunks' saved bytes and the plan's in-flight counts.
    """

    def __init__(self, model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> None:
        shard = L.Shard.of(train)
        self.facts = block_facts(model, shard)
        self.model = model
        self.moe_prefix = _moe_prefix(model)
        self.layer_input_bytes = L.ACT_BYTES * shard.tokens * model.hidden_size / shard.sp_div
        p, schedule = train.pp, train.pipeline_schedule
        self.rank_chunks, self.distinct_chunks, self.chunk_index = _rank_chunks(model, pipeline_split(train))
        self.n_chunks = chunks_per_rank(schedule, train.vpp)
        self.counts, self.owner, self.starts = _inflight(
            schedule, p, train.vpp, train.num_microbatches, train.overlaps_ep
        )
        edp = max(1, (train.tp * train.cp * train.dp) // (train.etp * train.ep))
        dense, moe = self.facts["dense"], self.facts.get("moe")
        max_layer_params = 0.0
        rank_params: list[tuple[float, float]] = []
        for chunks in self.rank_chunks:
            dense_p = expert_p = 0.0
            for first, n, has_head in chunks:
                n_moe = self.moe_prefix[first + n] - self.moe_prefix[first]
                dense_p += (n - n_moe) * dense.dense_params
                if n_moe and moe is not None:
                    dense_p += n_moe * moe.dense_params
                    expert_p += n_moe * moe.expert_params
                    max_layer_params = max(max_layer_params, moe.dense_params + moe.expert_params)
                if n - n_moe:
                    max_layer_params = max(max_layer_params, dense.dense_params)
                if first == 0 and not (model.tied_embeddings and has_head):
                    dense_p += L.padded_vocab(model, shard.tp) // shard.tp * model.hidden_size  # embedding table
                if has_head:
                    dense_p += self.facts["head"].dense_params
                    if "mtp" in self.facts:
                        dense_p += model.mtp_num_layers * self.facts["mtp"].dense_params
                        expert_p += model.mtp_num_layers * self.facts["mtp"].expert_params
            rank_params.append((dense_p, expert_p))
        states: dict[tuple[float, float], float] = {}
        gathered = gathered_params(train, max_layer_params, lambda: L.all_decoder_layer_ops(model, shard))
        for params in set(rank_params):
            parts = state_bytes(params[0], params[1], train, edp, gathered_params=gathered)
            states[params] = sum(parts.values())
        self.state_bytes = np.array([states[params] for params in rank_params])
        self.fixed_bytes = comm_buffer_bytes(model, shard, train) + CUDA_CONTEXT_BYTES

    def _chunk_saved(self, chunk: Chunk, mode: str, full_layers: int | None) -> tuple[float, float]:
        """(saved bytes of one micro-batch through this chunk, largest layer working set when recomputing)."""
        first, n, has_head = chunk
        facts, prefix = self.facts, self.moe_prefix
        n_moe = prefix[first + n] - prefix[first]
        dense, moe = facts["dense"], facts.get("moe")
        working = 0.0
        if mode == "full":
            recomputed = n if full_layers is None else min(n, full_layers)
            kept_moe = prefix[first + n] - prefix[first + recomputed]
            kept_dense = n - recomputed - kept_moe
            saved = recomputed * self.layer_input_bytes + kept_dense * dense.saved_none_bytes
            if kept_moe and moe is not None:
                saved += kept_moe * moe.saved_none_bytes
            if recomputed:
                working = max(
                    dense.saved_none_bytes if n - n_moe else 0.0, moe.saved_none_bytes if n_moe and moe else 0.0
                )
        else:
            saved = (n - n_moe) * dense.saved_bytes(mode)
            if n_moe and moe is not None:
                saved += n_moe * moe.saved_bytes(mode)
        if has_head:
            saved += facts["head"].saved_none_bytes
            if "mtp" in facts:
                saved += self.model.mtp_num_layers * facts["mtp"].saved_none_bytes
        return saved, working

    def peak_bytes(self, mode: str, full_layers: int | None = None) -> float:
        """Peak bytes per GPU over the pipeline ranks with this recompute."""
        per_chunk = [self._chunk_saved(chunk, mode, full_layers) for chunk in self.distinct_chunks]
        saved = np.array([chunk_saved for chunk_saved, _ in per_chunk])[self.chunk_index]
        working = max([0.0] + [chunk_working for _, chunk_working in per_chunk])
        per_row = (self.counts * saved[self.owner]).sum(axis=1)
        activations = np.maximum.reduceat(per_row, self.starts)
        return float((self.state_bytes + activations * (1 + FRAGMENTATION)).max()) + working + self.fixed_bytes


def estimate_peak_bytes(model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> float:
    """Peak bytes per GPU over the pipeline ranks (a legal, dp-resolved training spec)."""
    return GroupMemory(model, system, train).peak_bytes(train.recompute_granularity, train.recompute_num_layers)


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Rejects what cannot fit before any timing work."""

    slack: float = DEFAULT_SLACK

    def usable_bytes(self, system: SystemSpec) -> float:
        return system.gpu.hbm_bytes * (1 - HEADROOM)

    def limit_bytes(self, system: SystemSpec) -> float:
        return self.usable_bytes(system) * (1 + self.slack)

    def admits(self, model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> bool:
        return estimate_peak_bytes(model, system, train) <= self.limit_bytes(system)
