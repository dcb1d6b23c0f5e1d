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

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from paraplan.cost.block import gathered_params, weight_params
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.ops import OpKind
from paraplan.graph.partition import PipelineSplit, pipeline_split, split_stages
from paraplan.memory.model import CUDA_CONTEXT_BYTES, FRAGMENTATION, HEADROOM, comm_buffer_bytes, state_bytes
from paraplan.sim.plan import build_plan
from paraplan.specs.model import ModelSpec
from paraplan.specs.schedule import schedule as schedule_named
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
        if op.expert:
            expert += n
        else:
            dense += n
        saved += op.saved_bytes
        if "selective" in op.tags:
            selective_saved += op.saved_bytes
    return BlockFacts(dense, expert, saved, saved - selective_saved)


def _kind_facts(kind: K.LayerKind, model: ModelSpec, shard: L.Shard) -> BlockFacts:
    facts = _facts(kind.ops(model, shard))
    table_params = kind.params_of(model, shard)
    return facts if table_params is None else replace(facts, dense_params=table_params)


@lru_cache(maxsize=4096)
def block_facts(model: ModelSpec, shard: L.Shard) -> dict[str, BlockFacts]:
    """The facts of each layer kind the model has (`graph.kinds`): its kinds of decoder layer, its edge blocks."""
    counts = K.block_counts(model)
    kinds = K.decoder_kinds(model) + tuple(k for k in K.layer_kinds() if not k.is_decoder_layer and k.name in counts)
    return {kind.name: _kind_facts(kind, model, shard) for kind in kinds}


@lru_cache(maxsize=64)
def _layer_prefix(model: ModelSpec) -> dict[str, tuple[int, ...]]:
    """prefix[kind][i] = decoder layers of that kind among the first i decoder layers."""
    kinds = [K.decoder_kind_of(model, i).name for i in range(model.num_layers)]
    out = {}
    for kind in K.decoder_kinds(model):
        prefix = [0]
        for name in kinds:
            prefix.append(prefix[-1] + int(name == kind.name))
        out[kind.name] = tuple(prefix)
    return out


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
    rank_chunks = tuple(
        tuple(stages[index] for index in row) for row in schedule_named(schedule).chunk_model_stage(pp, vpp)
    )
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
        self.layer_prefix = _layer_prefix(model)
        self.decoder_kinds = K.decoder_kinds(model)
        counts = K.block_counts(model)
        # (kind, blocks in the model) at each end: the first stage's (embedding), the last stage's (head, MTP)
        self.first_edges = [(k, counts[k.name]) for k in K.edge_kinds(K.Placement.FIRST) if k.name in counts]
        self.last_edges = [(k, counts[k.name]) for k in K.edge_kinds(K.Placement.LAST) if k.name in counts]
        self.layer_input_bytes = L.ACT_BYTES * shard.tokens * model.hidden_size / shard.sp_div
        p, schedule = train.pp, train.pipeline_schedule
        self.rank_chunks, self.distinct_chunks, self.chunk_index = _rank_chunks(model, pipeline_split(train))
        self.n_chunks = train.schedule.chunks_per_rank(train.vpp)
        self.counts, self.owner, self.starts = _inflight(
            schedule, p, train.vpp, train.num_microbatches, train.overlaps_ep
        )
        edp = max(1, (train.tp * train.cp * train.dp) // (train.etp * train.ep))
        max_layer_params = 0.0
        rank_params: list[tuple[float, float]] = []
        for chunks in self.rank_chunks:
            dense_p = expert_p = 0.0
            for chunk in chunks:
                for kind, count in self._layer_counts(chunk, 0):
                    facts = self.facts[kind.name]
                    dense_p += count * facts.dense_params
                    expert_p += count * facts.expert_params
                    if count:
                        max_layer_params = max(max_layer_params, facts.dense_params + facts.expert_params)
                edges = self._edges(chunk)
                present = {kind.name for kind, _ in edges}
                for kind, count in edges:
                    if model.tied_embeddings and kind.tied_to in present:
                        continue  # one shared table (the embedding's and the LM head's), counted with the head
                    dense_p += count * self.facts[kind.name].dense_params
                    expert_p += count * self.facts[kind.name].expert_params
            rank_params.append((dense_p, expert_p))
        states: dict[tuple[float, float], float] = {}
        gathered = gathered_params(train, max_layer_params, lambda: K.all_decoder_layer_ops(model, shard))
        for params in set(rank_params):
            parts = state_bytes(params[0], params[1], train, edp, gathered_params=gathered)
            states[params] = sum(parts.values())
        self.state_bytes = np.array([states[params] for params in rank_params])
        self.fixed_bytes = comm_buffer_bytes(model, shard, train) + CUDA_CONTEXT_BYTES

    def _layer_counts(self, chunk: Chunk, skip: int) -> list[tuple[K.LayerKind, int]]:
        """(decoder layer kind, its layers in the chunk after the chunk's first `skip`) for each of the model's."""
        first, n, _ = chunk
        start = first + min(skip, n)
        prefix = self.layer_prefix
        return [(k, prefix[k.name][first + n] - prefix[k.name][start]) for k in self.decoder_kinds]

    def _edges(self, chunk: Chunk) -> list[tuple[K.LayerKind, int]]:
        """(edge kind, blocks) on the chunk: the first stage's (the chunk that starts at layer 0), the last's."""
        first, _, has_head = chunk
        return (self.first_edges if first == 0 else []) + (self.last_edges if has_head else [])

    def _chunk_saved(self, chunk: Chunk, mode: str, full_layers: int | None) -> tuple[float, float]:
        """(saved bytes of one micro-batch through this chunk, largest layer working set when recomputing)."""
        n = chunk[1]
        facts = self.facts
        working = 0.0
        if mode == "full":
            recomputed = n if full_layers is None else min(n, full_layers)
            saved = recomputed * self.layer_input_bytes
            for kind, kept in self._layer_counts(chunk, recomputed):
                saved += kept * facts[kind.name].saved_none_bytes
            if recomputed:
                present = [facts[kind.name].saved_none_bytes for kind, count in self._layer_counts(chunk, 0) if count]
                working = max([0.0, *present])
        else:
            saved = 0.0
            for kind, count in self._layer_counts(chunk, 0):
                saved += count * facts[kind.name].saved_bytes(mode)
        for kind, count in self._edges(chunk):  # edge blocks are never recomputed
            saved += count * facts[kind.name].saved_none_bytes
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
