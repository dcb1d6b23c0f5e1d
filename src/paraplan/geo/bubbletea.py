"""BubbleTea: inference prefill in the bubbles of a training pipeline (Palak et al. 2024, "Training LLMs
across geo-distributed datacenters", section on BubbleTea: prefill-as-a-service in the idle time that
pipeline fill/drain and WAN latency leave on every GPU).

1. Bubbles: from the simulated training step, each stage's idle intervals on its compute stream (outside
   its datacenter-internal gradient collectives); a step repeats, so the pattern tiles the horizon.
2. Lanes: a stage of `tp` GPUs runs tp / serving_tp prefill instances side by side; a stage serves only if
   the serving model's weights and one prompt's KV cache fit beside the training state (core memory model).
3. Placement (`placer`), event-driven in time order: a lane entering a bubble, or finishing a prefill
   inside one, takes the longest of the `lookahead` oldest queued requests that fits what is left of the
   bubble; an arriving request goes to the idle lane whose bubble ends soonest while still fitting. A
   request fits if predicted time * (1 + guard_fraction) + guard_s ends inside the bubble and within
   max_ttft_s of its arrival; a request that can no longer make max_ttft_s is left to the serving cluster.
   Prefill time comes from paraplan's own cost model (`prefill`).
4. Check (`NoSlowdownCheck`): prefills run for their actual time (predicted * (1 + prediction_error)); on
   every step none may run into the next training job of its stage, and the busiest steps are re-simulated
   on the event engine with the prefills inserted into the compute streams: every training job must start
   when it did without them, so the step time is unchanged.

GPU utilisation = (training compute + the gradient collectives the GPUs run + prefill) / wall time, over
every GPU of the plan; each part is reported on its own.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from paraplan.errors import ConfigError
from paraplan.geo.geosim import GeoSimResult, Interval, simulate_geo
from paraplan.geo.placer import Placed, place_prefills
from paraplan.geo.prefill import PrefillModel
from paraplan.geo.requests import PrefillRequests
from paraplan.geo.stages import StageMemory
from paraplan.geo.topology import GeoSystem
from paraplan.memory.model import GIB
from paraplan.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class BubbleTeaSettings:
    """See `paraplan.geo.config.BubbleTeaConfig` for each field."""

    guard_fraction: float = 0.10
    guard_s: float = 0.001
    max_ttft_s: float = 2.0
    prediction_error: float = 0.05
    lookahead: int = 64
    check_steps: int = 4
    serving_tp: int | None = None


@dataclass(frozen=True, slots=True)
class Lane:
    slot: int
    gpus: int
    dc: str
    model: PrefillModel


@dataclass(frozen=True)
class NoSlowdownCheck:
    """Two checks that training is untouched. Local, on every step: each prefill (actual duration) ends
    before the next training job of its stage was due and before the step ends; as no training job moves,
    nothing downstream can (the event engine plays the same order). Global, on the `steps_checked` steps
    with the most prefill: the step re-simulated on the event engine with the prefills inserted."""

    steps_local: int
    local_overrun_s: float
    """Largest overrun of a prefill past the next training job (or the step end), over every step."""
    steps_checked: int
    baseline_step_s: float
    worst_step_s: float
    max_job_delay_s: float
    """Largest delay of any training job's start, over the checked steps."""
    max_spill_s: float = 0.0
    """Largest overrun of a prefill past the end of its step (it would delay the next step)."""

    @property
    def unchanged(self) -> bool:
        return (
            self.local_overrun_s <= 1e-9
            and self.max_job_delay_s <= 1e-9
            and self.worst_step_s <= self.baseline_step_s + 1e-9
            and self.max_spill_s <= 1e-9
        )


@dataclass(frozen=True)
class BubbleTeaResult:
    source: str
    steps: int
    step_time_s: float
    horizon_s: float
    gpus: int
    lanes: int
    excluded: tuple[str, ...]
    """Stages that cannot serve (memory), one line each."""
    requests: int
    placed: tuple[Placed, ...]
    prompt_tokens: np.ndarray
    arrival_s: np.ndarray
    training_busy_gpu_s: float
    """GPU-seconds of training compute (F, B, W, optimizer)."""
    collective_gpu_s: float
    """GPU-seconds of the datacenter-internal gradient collectives (NCCL kernels on the GPU; no prefill then)."""
    prefill_busy_gpu_s: float
    bubble_gpu_s: float
    """GPU-seconds of bubbles (idle compute streams outside the collectives) on the lanes that can serve."""
    check: NoSlowdownCheck
    lane_slots: tuple[int, ...] = ()
    """Per lane: the simulated stage (slot index) it runs on."""

    @property
    def admitted(self) -> int:
        return len(self.placed)

    @property
    def utilisation_training(self) -> float:
        """Training busy time (compute and its gradient collectives) / wall time, over every GPU of the plan."""
        return (self.training_busy_gpu_s + self.collective_gpu_s) / (self.gpus * self.horizon_s)

    @property
    def utilisation(self) -> float:
        """(training + prefill busy time) / wall time, over every GPU of the plan."""
        return self.utilisation_training + self.prefill_busy_gpu_s / (self.gpus * self.horizon_s)

    @property
    def ttft_s(self) -> np.ndarray:
        return np.array([p.end_s - self.arrival_s[p.request] for p in self.placed])

    @property
    def prefill_tokens_per_s(self) -> float:
        return float(sum(int(self.prompt_tokens[p.request]) for p in self.placed)) / self.horizon_s

    @property
    def prefills_per_s(self) -> float:
        return self.admitted / self.horizon_s

    def to_dict(self) -> dict:
        ttft = self.ttft_s
        pct = (lambda q: float(np.percentile(ttft, q))) if ttft.size else (lambda q: float("nan"))
        return {
            "stream": self.source,
            "steps": self.steps,
            "horizon_s": self.horizon_s,
            "gpus": self.gpus,
            "prefill_lanes": self.lanes,
            "excluded_stages": list(self.excluded),
            "requests": self.requests,
            "admitted": self.admitted,
            "admitted_fraction": self.admitted / self.requests if self.requests else 0.0,
            "gpu_utilisation_training_only": self.utilisation_training,
            "gpu_utilisation_with_prefill": self.utilisation,
            "gpu_time_shares": {
                "training_compute": self.training_busy_gpu_s / (self.gpus * self.horizon_s),
                "training_collectives": self.collective_gpu_s / (self.gpus * self.horizon_s),
                "prefill": self.prefill_busy_gpu_s / (self.gpus * self.horizon_s),
                "idle": 1 - self.utilisation,
            },
            "bubble_share_before_prefill": self.bubble_gpu_s / (self.gpus * self.horizon_s),
            "gpu_compute_utilisation_with_prefill": (self.training_busy_gpu_s + self.prefill_busy_gpu_s)
            / (self.gpus * self.horizon_s),
            "prefills_per_s": self.prefills_per_s,
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "ttft_s": {"p50": pct(50), "p90": pct(90), "p99": pct(99), "max": pct(100)},
            "no_slowdown_check": {
                "steps_checked_locally": self.check.steps_local,
                "local_overrun_s": self.check.local_overrun_s,
                "steps_resimulated": self.check.steps_checked,
                "baseline_step_s": self.check.baseline_step_s,
                "worst_step_s": self.check.worst_step_s,
                "max_training_job_delay_s": self.check.max_job_delay_s,
                "max_prefill_spill_s": self.check.max_spill_s,
                "unchanged": self.check.unchanged,
            },
        }


def idle_intervals(sim: GeoSimResult, slot: int) -> list[Interval]:
    """Gaps of the slot's compute stream in [0, step], minus the time its gradient collectives run."""
    taken = sorted(list(sim.busy[slot]) + list(sim.reserved[slot]))
    gaps, at = [], 0.0
    for a, b in taken:
        if a > at:
            gaps.append((at, a))
        at = max(at, b)
    if sim.step_time_s > at:
        gaps.append((at, sim.step_time_s))
    return gaps


def build_lanes(
    sim: GeoSimResult,
    serving: ModelSpec,
    geo: GeoSystem,
    memory: tuple[StageMemory, ...],
    serving_tp: int | None,
    max_prompt_tokens: int,
) -> tuple[list[Lane], list[str]]:
    """Prefill lanes per simulated stage (repeated for the identical pipelines a slot stands for)."""
    lanes, excluded = [], []
    tp = sim.plan.tp
    s_tp = serving_tp or tp
    if tp % s_tp:
        raise ConfigError(f"bubbletea: field 'serving_tp' {s_tp} must divide the training TP size {tp}")
    seen: set[int] = set()
    for slot in sim.slots:
        model = PrefillModel(serving, geo.dc(slot.dc).system, s_tp)
        mem = memory[slot.group * sim.plan.pp + slot.stage]
        need = model.memory_bytes(max_prompt_tokens)
        if need > mem.free_bytes:
            if slot.stage not in seen:
                excluded.append(
                    f"stage {slot.stage} ({slot.dc}): {serving.name} prefill needs {need / GIB:.1f} GiB per GPU at "
                    f"serving_tp={s_tp}, {mem.free_bytes / GIB:.1f} GiB free beside training"
                )
                seen.add(slot.stage)
            continue
        lanes += [Lane(slot.index, s_tp, slot.dc, model)] * (slot.weight * (tp // s_tp))
    return lanes, excluded


def _union(intervals: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _local_overrun_s(sim: GeoSimResult, per_step: dict[int, dict[int, list[Interval]]]) -> float:
    """How far any inserted interval runs past the next training job of its stage (or the step end)."""
    worst = 0.0
    for slots in per_step.values():
        for slot, intervals in slots.items():
            busy = sim.busy[slot]
            starts = [a for a, _ in busy] + [sim.step_time_s]
            for a, b in intervals:
                nxt = starts[bisect.bisect_right(starts, a)] if a < sim.step_time_s else sim.step_time_s
                prev_end = max((e for s0, e in busy if s0 <= a), default=0.0)
                worst = max(worst, b - nxt, prev_end - a)
    return worst


def check_no_slowdown(
    sim: GeoSimResult, geo: GeoSystem, lanes: list[Lane], placed: list[Placed], steps: int, max_steps: int
) -> NoSlowdownCheck:
    step = sim.step_time_s
    per_step: dict[int, dict[int, list[Interval]]] = {}
    load = [0.0] * steps
    for p in placed:
        k = p.step
        start = p.start_s - k * step
        per_step.setdefault(k, {}).setdefault(lanes[p.lane].slot, []).append((start, start + p.actual_s))
        load[k] += p.actual_s
    local = _local_overrun_s(sim, per_step)
    chosen = sorted(per_step, key=lambda k: -load[k])[:max_steps]
    worst, delay, spill = sim.step_time_s, 0.0, 0.0
    for k in chosen:
        extra = {slot: [(a, b - a) for a, b in _union(iv)] for slot, iv in per_step[k].items()}
        again = simulate_geo(sim.plan, geo, baseline=sim, extra=extra)
        worst = max(worst, again.step_time_s)
        for base, new in zip(sim.compute_starts, again.compute_starts, strict=True):
            delay = max(delay, max((b - a for a, b in zip(base, new, strict=True)), default=0.0))
        for intervals in again.extra_intervals:
            spill = max(spill, max((b - again.step_time_s for _, b in intervals), default=0.0))
    return NoSlowdownCheck(steps, local, len(chosen), sim.step_time_s, worst, delay, spill)


def run_bubbletea(
    sim: GeoSimResult,
    geo: GeoSystem,
    memory: tuple[StageMemory, ...],
    serving: ModelSpec,
    requests: PrefillRequests,
    settings: BubbleTeaSettings,
) -> BubbleTeaResult:
    """Place `requests` into the bubbles of the simulated step `sim` (repeated over the stream's duration)."""
    step = sim.step_time_s
    steps = max(1, math.floor(requests.duration_s / step + 1e-9))  # whole steps inside the stream
    max_prompt = int(requests.prompt_tokens.max()) if requests.count else 1
    lanes, excluded = build_lanes(sim, serving, geo, memory, settings.serving_tp, max_prompt)
    per_slot = {slot: idle_intervals(sim, slot) for slot in {lane.slot for lane in lanes}}
    patterns = [per_slot[lane.slot] for lane in lanes]
    models = sorted({lane.model for lane in lanes}, key=lambda m: (m.system.gpu.name, m.tp))
    predicted = [m.times_s(requests.prompt_tokens) for m in models]
    placed = place_prefills(
        patterns,
        [models.index(lane.model) for lane in lanes],
        predicted,
        requests.arrival_s,
        step,
        steps,
        guard_fraction=settings.guard_fraction,
        guard_s=settings.guard_s,
        max_ttft_s=settings.max_ttft_s,
        prediction_error=settings.prediction_error,
        lookahead=settings.lookahead,
    )
    check = check_no_slowdown(sim, geo, lanes, placed, steps, settings.check_steps)
    train_busy = sum(sim.busy_s(s.index) * s.gpus * s.weight for s in sim.slots) * steps
    collectives = sum(sum(b - a for a, b in sim.reserved[s.index]) * s.gpus * s.weight for s in sim.slots) * steps
    bubbles = sum(sum(b - a for a, b in pat) * lane.gpus for pat, lane in zip(patterns, lanes, strict=True))
    return BubbleTeaResult(
        source=requests.source,
        steps=steps,
        step_time_s=step,
        horizon_s=steps * step,
        gpus=sim.plan.num_gpus,
        lanes=len(lanes),
        excluded=tuple(excluded),
        requests=int(np.searchsorted(requests.arrival_s, steps * step)),
        placed=tuple(placed),
        prompt_tokens=requests.prompt_tokens,
        arrival_s=requests.arrival_s,
        training_busy_gpu_s=train_busy,
        collective_gpu_s=collectives,
        prefill_busy_gpu_s=sum(p.actual_s * lanes[p.lane].gpus for p in placed),
        bubble_gpu_s=bubbles * steps,
        check=check,
        lane_slots=tuple(lane.slot for lane in lanes),
    )
