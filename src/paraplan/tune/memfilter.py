"""Memory pre-filter: the projection's own memory verdict, computed before any timing work.

It is the memory model of `project_specs`, not an estimate of it: the stages' blocks come from the same
partition (`projection._layout_parts`), each block's parameters and saved bytes from the same function
(`projection.block_memory_of`, i.e. `memory.blocks.block_memory`), the stages' sums from
`projection.stage_footprint`, the activations in flight from the schedule's static plan that the simulator
plays (`sim.engine.schedule_plan`, `sim.plan.peak_live_bytes`), and the bytes per rank from
`memory.model.pipeline_memory`. What it skips is the timing (block costs, the simulation), which memory does
not depend on. So a candidate it rejects is one the projection would call OOM, and no slack is needed
(`tests/tune/test_memfilter.py` checks the two agree on every candidate of tuner runs).
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.graph import layers as L
from paraplan.graph.partition import PipelineSplit, chunks_per_rank, pipeline_split
from paraplan.memory.activations import layer_modes
from paraplan.memory.model import (
    MemoryResult,
    RankStatesCache,
    StageFootprint,
    fragmentation_share,
    may_read_moments,
    pipeline_memory,
    quantized_copy_bytes_per_weight,
    stage_maxima,
    states_floor_bytes,
)
from paraplan.projection import Parts, _layout_parts, stage_footprints
from paraplan.sim.engine import schedule_plan
from paraplan.sim.plan import Plan, peak_live_bytes
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec, spec_with

FLOOR_MARGIN = 1e-9
"""Relative margin of `GroupMemory.cannot_fit` over the rounding (about 1e-15) by which two recompute variants' states
can differ."""


class StageCache:
    """The stages of one model, shared by the structures of a search: each layout's stages by (pipeline split, layer
    modes), each stage's footprint by (shard, its blocks). Value keys without the ModelSpec, whose hash the core's
    caches pay on every lookup (a few microseconds)."""

    def __init__(self, model: ModelSpec) -> None:
        self.model = model
        self.layouts: dict[PipelineSplit, dict[tuple, tuple[Parts, ...]]] = {}
        self.footprints: dict[L.Shard, dict[Parts, StageFootprint]] = {}
        # each layout's stage footprints in stage order, by (split, shard), then layer modes
        self.layout_footprints: dict[tuple[PipelineSplit, L.Shard], dict[tuple, list[StageFootprint]]] = {}


class GroupMemory:
    """The memory of one structure (layout, batch, sharding, schedule), for any of its recompute variants: the
    plan and the stage holders are looked up once, the stages' footprints per variant (`StageCache`), the ranks'
    states once for all variants (`memory.model.RankStates`), each variant's memory once (the filter's verdict and
    the projection's memory)."""

    def __init__(
        self, model: ModelSpec, system: SystemSpec, train: TrainingSpec, stages: StageCache | None = None
    ) -> None:
        """`stages`: the search's stages of this model (a cache for this structure alone when None)."""
        self.model = model
        self.system = system
        self.train = train
        self.shard = L.Shard.of(train)
        self.split = pipeline_split(train)
        self.holder = train.schedule.chunk_model_stage(train.pp, train.vpp)
        self._plan: Plan | None = None  # built when a variant's activations are first asked for
        self._multi_chunk = any(len(row) != 1 for row in self.holder)
        self._trains: dict[tuple[str, int | None], TrainingSpec] = {
            (train.recompute_granularity, train.recompute_num_layers): train
        }
        self._memories: dict[tuple[str, int | None], MemoryResult] = {}
        self._peaks: dict[tuple[str, int | None], list[float]] = {}  # each variant's in-flight peaks per rank
        self._floors: list[float] = []  # per rank, `states_floor_bytes` (`cannot_fit`: empty until it ran)
        # the ranks' weights, gradients and optimizer states: the same for every recompute variant (`RankStates`)
        self._states: RankStatesCache = {}
        self._copy_bytes = quantized_copy_bytes_per_weight(train, system.gpu)  # the quantised weights' copies
        # the stages' blocks by layer modes, and each stage's footprint by its blocks, for this split and shard
        if stages is None or stages.model is not model:
            stages = StageCache(model)
        self._layouts = stages.layouts.setdefault(self.split, {})
        self._footprints = stages.footprints.setdefault(self.shard, {})
        self._layout_footprints = stages.layout_footprints.setdefault((self.split, self.shard), {})

    def train_for(self, mode: str, full_layers: int | None = None) -> TrainingSpec:
        """The structure's training spec with this recompute (built once, positionally: `spec_with`; the tuner asks
        for it twice, to screen and to project)."""
        key = (mode, full_layers)
        train = self._trains.get(key)
        if train is None:
            train = self._trains[key] = spec_with(
                self.train, {"recompute_granularity": mode, "recompute_num_layers": full_layers}
            )
        return train

    def memory(self, mode: str, full_layers: int | None = None) -> MemoryResult:
        """Bytes per GPU of every pipeline rank with this recompute (`full_layers`: `recompute_num_layers`): computed
        once per variant, so the projection of a variant that fits takes it instead of computing it again."""
        key = (mode, full_layers)
        memory = self._memories.get(key)
        if memory is None:
            memory = self._memories[key] = self._memory(mode, full_layers)
        return memory

    @property
    def plan(self) -> Plan:
        """The schedule's static plan (`sim.engine.schedule_plan`: cached per shape, built the first time)."""
        if self._plan is None:
            train = self.train
            self._plan = schedule_plan(
                train.pipeline_schedule, train.pp, chunks_per_rank(train), train.num_microbatches, train.overlaps_ep
            )
            self._runs = [bool(len(vectors)) for vectors in self._plan.inflight_vectors]
        return self._plan

    def _stage_footprints(self, modes: tuple) -> list[StageFootprint]:
        """The stages' footprints under these layer modes (`memory.activations.layer_modes`), in stage order."""
        footprints = self._layout_footprints.get(modes)
        if footprints is None:  # the same layout and shard in another structure: the same footprints (read only)
            stage_parts = self._layouts.get(modes)
            if stage_parts is None:
                stage_parts = self._layouts[modes] = _layout_parts(self.model, self.split, *modes)[0]
            footprints = self._layout_footprints[modes] = stage_footprints(
                stage_parts, self.model, self.shard, self._footprints
            )
        return footprints

    def cannot_fit(self) -> bool:
        """Whether no recompute variant fits, known without the plan: a rank's floor (`memory.model.
        states_floor_bytes`, what it holds whatever it recomputes and keeps in flight) is above the usable HBM. The
        floor is the structure's own spec's; a variant's stages add up the same parameters grouped otherwise, which
        can move its states by a few roundings, far inside `FLOOR_MARGIN`."""
        footprints = self._stage_footprints(layer_modes(self.train))
        floors = states_floor_bytes(
            self.model, self.shard, self.train, footprints, self.holder, self._states, self._copy_bytes
        )
        self._floors = floors
        return max(floors, default=0.0) > self._usable_bytes() * (1 + FLOOR_MARGIN)

    def _usable_bytes(self) -> float:
        return MemoryResult((), self.system.gpu.hbm_bytes).usable_bytes

    def surely_over(self, mode: str, full_layers: int | None = None) -> bool:
        """Whether this recompute variant is known not to fit without its memory per rank: a rank's floor (`cannot_fit`,
        run before) plus what the variant adds to it at least (its in-flight activations with their fragmentation, the
        largest recompute and backward working sets: parts that are never negative) is above the usable HBM by more
        than `FLOOR_MARGIN`, far beyond the roundings by which that sum and `pipeline_memory`'s total can differ. False
        where it cannot tell: before `cannot_fit`, or where the ranks' activations may come from the plan's memory
        moments (`memory.model.may_read_moments`), which can be below the static peak."""
        if not self._floors or may_read_moments(self.train):
            return False
        train = self.train_for(mode, full_layers)
        footprints = self._stage_footprints(layer_modes(train))
        peaks = self._peaks_of((mode, full_layers), footprints)
        _, full_saved, transient = stage_maxima(footprints)
        fragmentation = fragmentation_share(train)
        limit = self._usable_bytes() * (1 + FLOOR_MARGIN)
        return any(
            floor + peak + fragmentation * peak + full_saved + transient > limit
            for floor, peak in zip(self._floors, peaks, strict=True)
        )

    def _peaks_of(self, key: tuple[str, int | None], footprints: list[StageFootprint]) -> list[float]:
        """The variant's in-flight activation peak per rank (`peak_live_bytes` of its stages' saved bytes)."""
        peaks = self._peaks.get(key)
        if peaks is None:
            if self._multi_chunk:
                plan = self.plan
                peaks = [
                    peak_live_bytes(plan, r, [footprints[i].saved_bytes for i in row])
                    for r, row in enumerate(self.holder)
                ]
            else:
                peaks = self._one_chunk_peaks(footprints)
            self._peaks[key] = peaks
        return peaks

    def _memory(self, mode: str, full_layers: int | None) -> MemoryResult:
        train = self.train_for(mode, full_layers)
        footprints = self._stage_footprints(layer_modes(train))
        peaks = self._peaks_of((mode, full_layers), footprints)
        return pipeline_memory(
            self.model, self.shard, train, self.system.gpu.hbm_bytes, footprints, self.holder, peaks,
            lambda: self.plan.memory_moments, self._states, self._copy_bytes,
        )  # fmt: skip

    def _one_chunk_peaks(self, footprints: list[StageFootprint]) -> list[float]:
        """`peak_live_bytes` of ranks holding one stage each, its one-chunk case inline: the most live micro-batches
        times the stage's saved bytes (the same product), 0 where the rank runs none."""
        peaks = []
        plan = self.plan
        for r, row in enumerate(self.holder):
            saved = footprints[row[0]].saved_bytes
            if not self._runs[r]:
                peaks.append(0.0)
            elif saved >= 0:
                peaks.append(float(plan.peak_inflight_chunks[r]) * saved)
            else:
                peaks.append(peak_live_bytes(plan, r, [saved]))
        return peaks

    def peak_bytes(self, mode: str, full_layers: int | None = None) -> float:
        """Peak bytes per GPU over the pipeline ranks with this recompute."""
        return self.memory(mode, full_layers).peak.total_bytes

    def fits(self, mode: str, full_layers: int | None = None) -> bool:
        """The projection's verdict (`MemoryResult.fits`), without the memory per rank where `surely_over` knows."""
        if (mode, full_layers) not in self._memories and self.surely_over(mode, full_layers):
            return False
        return self.memory(mode, full_layers).fits


def estimate_peak_bytes(model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> float:
    """Peak bytes per GPU over the pipeline ranks (a legal, dp-resolved training spec)."""
    return GroupMemory(model, system, train).peak_bytes(train.recompute_granularity, train.recompute_num_layers)


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Rejects what cannot fit before any timing work: exactly what the projection's `memory.fits` rejects."""

    def admits(self, model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> bool:
        return GroupMemory(model, system, train).fits(train.recompute_granularity, train.recompute_num_layers)
