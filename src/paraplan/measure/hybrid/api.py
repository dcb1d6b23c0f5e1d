"""The hybrid projection end to end: plan the downscaled benchmark, run it (or read it from the cache),
time the collectives among the local devices, upscale through the core projection."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paraplan.cost.calibration import calibration_for
from paraplan.measure.device import HybridUnavailable, LocalDevices, detect, is_local_cpu
from paraplan.measure.hybrid.cache import MeasurementCache, default_cache_path
from paraplan.measure.hybrid.collectives import CollectiveSample
from paraplan.measure.hybrid.commfit import CommFit, fit_comm
from paraplan.measure.hybrid.plan import BenchPlan, plan_benchmark
from paraplan.measure.hybrid.upscale import BlockTimes, Source, upscale
from paraplan.result import Projection
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec

NEAR_TARGET_SIZE = 4.0  # samples within this factor of a size the target sends weigh more in the fit
NEAR_TARGET_WEIGHT = 100.0


@dataclass(frozen=True, slots=True)
class HybridOptions:
    device: str = "cpu"
    dtype: str | None = None  # default: fp32 on CPU, the target's 16-bit precision on CUDA
    cache_path: str | Path | None = None  # None: PARAPLAN_HYBRID_CACHE or ~/.cache/paraplan/hybrid.sqlite
    use_cache: bool = True
    threads: int = 1  # CPU threads per process
    warmup: int | None = None
    repeats: int | None = None
    collectives: bool = True  # time collectives among the local devices and fit the network to them
    replicas: int | None = None  # devices timing the blocks at once; None: min(local devices, target world)
    harness_overheads: bool | None = None  # None: on when the target is the local CPU (plain PyTorch loop)
    record_events: bool = False  # keep the simulator's events (for a trace)


@dataclass(frozen=True, slots=True)
class HybridResult:
    projection: Projection
    plan: BenchPlan
    devices: LocalDevices
    blocks: dict[str, Any]  # kind -> BlockMeasurement
    optimizer: Any  # OptimizerMeasurement
    comm: CommFit | None
    sources: dict[str, Source]
    system: SystemSpec  # the target system as projected (network fitted when it is the local machine)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = self.projection.to_dict()
        data["hybrid"] = {
            "device": self.devices.to_dict(),
            "plan": self.plan.to_dict(),
            "blocks": {k: m.to_dict() | {"cached": m.cached} for k, m in self.blocks.items()},
            "optimizer": self.optimizer.to_dict() if self.optimizer else None,
            "comm_fit": self.comm.to_dict() if self.comm else None,
            "sources": {part: s.to_dict() for part, s in self.sources.items()},
            "notes": list(self.notes),
        }
        return data


def _same_gpu(local_name: str, target_gpu: str) -> bool:
    """Whether the local GPU is the target's model (e.g. "NVIDIA H200" and "h200-sxm-141gb")."""
    family = re.split(r"[-_]", target_gpu.lower())[0]
    return family in local_name.lower().replace(" ", "")


def hybrid_project(
    model: ModelSpec, system: SystemSpec, train: TrainingSpec, options: HybridOptions | None = None
) -> HybridResult:
    """Raises HybridUnavailable (no PyTorch, no such device) so callers can fall back."""
    options = options or HybridOptions()
    devices = detect(options.device, options.threads)
    from paraplan.measure.hybrid.bench import BenchSettings
    from paraplan.measure.hybrid.job import measure

    notes: list[str] = []
    local_cpu = is_local_cpu(system)
    if devices.kind == "cpu" and not local_cpu:
        raise HybridUnavailable(
            f"the target runs on {system.gpu.name}, the device at hand is a CPU: its layer times say nothing "
            "about that GPU (use --device cuda on one, or a CPU system file)"
        )
    same_gpu = devices.kind == "cuda" and _same_gpu(devices.name, system.gpu.name)
    if devices.kind == "cuda" and not same_gpu:
        notes.append(f"measured on {devices.name}, not the target's {system.gpu.name}: compute is the local GPU's")
    cache = MeasurementCache((options.cache_path or default_cache_path()) if options.use_cache else None)
    plan = plan_benchmark(model, system, train, devices, options.dtype)
    defaults = BenchSettings.default(devices.kind, plan.dtype, plan.split_backward)
    settings = BenchSettings(
        devices.kind,
        plan.dtype,
        options.warmup if options.warmup is not None else defaults.warmup,
        options.repeats if options.repeats is not None else defaults.repeats,
        plan.split_backward,
    )
    fit_applies = local_cpu or same_gpu
    collective_ranks = plan.collective_ranks if options.collectives and fit_applies else 0
    if plan.collective_ranks >= 2 and not fit_applies:
        notes.append("collectives not timed: the local devices are not the target's; the preset's network is kept")
    replicas = options.replicas or max(1, min(devices.count, plan.train.world_size))
    measured = measure(model, plan.shard, plan.kinds, settings, devices, cache, replicas, collective_ranks)
    comm = None
    if measured.collectives:
        backend = "gloo" if devices.kind == "cpu" else "NCCL"
        comm = fit_comm(
            measured.collectives,
            f"{backend} among {measured.collectives[0].world} local {devices.kind} devices",
            weight=fit_weight(plan),
        )
    blocks, optimizer = measured.blocks, measured.optimizer
    times = {k: BlockTimes(m.forward_s, m.backward_s, m.backward_input_s, m.jitter_s) for k, m in blocks.items()}
    harness = options.harness_overheads if options.harness_overheads is not None else local_cpu
    projection, sources, projected_system = upscale(
        plan,
        system,
        times,
        calibration_for(system.gpu.name, train.framework),
        optimizer_s_per_param=optimizer.seconds_per_param,
        comm=comm,
        comm_scale_out=local_cpu,
        harness_overheads=harness,
        device=devices.kind,
        record_events=options.record_events,
    )
    return HybridResult(projection, plan, devices, blocks, optimizer, comm, sources, projected_system, tuple(notes))


def fit_weight(plan: BenchPlan) -> Callable[[CollectiveSample], float]:
    """Samples of a kind the target issues, near a size it sends, weigh more: the single alpha-beta model
    cannot match every kind of a backend (gloo's all-reduce is slower per byte than its send/recv)."""
    use = plan.comm_use

    def weight(sample: CollectiveSample) -> float:
        same_kind = [u.nbytes for u in use if u.kind is sample.kind]
        near = any(1 / NEAR_TARGET_SIZE <= sample.nbytes / max(n, 1.0) <= NEAR_TARGET_SIZE for n in same_kind)
        return NEAR_TARGET_WEIGHT if near else 5.0 if same_kind else 1.0

    return weight
