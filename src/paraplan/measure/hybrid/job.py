"""The benchmark run as one local job, with its results cached in SQLite keyed by device and shapes.

The downscaled configuration is one rank. With several local devices it is replicated on each of them and
all run at once, as the ranks of the real job would: devices that share anything (a CPU's cores share
caches, memory bandwidth and the operating system's scheduler; GPUs of a node share power and PCIe) are
then measured under the load a real run puts on them, and their figures pooled. Then the in-scope
collectives run among the same devices.
One device: everything runs in this process.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from paraplan.graph.layers import Shard
from paraplan.measure.device import LocalDevices, torch_threads
from paraplan.measure.hybrid.bench import (
    BENCH_VERSION,
    BenchSettings,
    BlockMeasurement,
    OptimizerMeasurement,
    block_param_shapes,
    shape_key,
    time_block,
    time_optimizer,
)
from paraplan.measure.hybrid.cache import MeasurementCache
from paraplan.measure.hybrid.collectives import (
    CPU_SIZES_BYTES,
    GPU_SIZES_BYTES,
    CollectiveSample,
    collectives_from_rows,
    time_collectives,
)
from paraplan.measure.hybrid.timing import Stats
from paraplan.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class BenchJob:
    model: ModelSpec
    shard: Shard
    settings: BenchSettings
    kinds: tuple[str, ...]  # blocks still to time
    optimizer_shapes: tuple[tuple[int, ...], ...] | None  # None: optimizer cached
    collective_sizes: tuple[int, ...] | None  # None: no collectives to time
    replicas: int = 1  # ranks that time the blocks (the others only join the collectives)


@dataclass(frozen=True, slots=True)
class Measurements:
    blocks: dict[str, BlockMeasurement]
    optimizer: OptimizerMeasurement
    collectives: list[CollectiveSample] = field(default_factory=list)
    replicas: int = 1


def _run(rank: int, world: int, job: BenchJob) -> dict[str, Any]:
    """Every replica times the same blocks in step (a barrier before each), then the collectives."""
    import torch

    distributed = world > 1

    def together() -> None:
        if distributed:
            torch.distributed.barrier()

    timing = rank < job.replicas
    out: dict[str, Any] = {"blocks": {}}
    for kind in job.kinds:
        together()
        if timing:
            out["blocks"][kind] = time_block(kind, job.model, job.shard, job.settings).to_dict()
    if job.optimizer_shapes is not None:
        together()
        if timing:
            out["optimizer"] = time_optimizer(list(job.optimizer_shapes), job.settings).to_dict()
    if distributed and job.collective_sizes:
        together()
        warmup, repeats = job.settings.warmup, job.settings.repeats
        out["collectives"] = time_collectives(rank, world, job.settings.device, job.collective_sizes, warmup, repeats)
    return out


def merge_replicas(stats: Sequence[Stats]) -> Stats:
    """One device's figures from the replicas': the mean over all of their runs (the replicas' means
    averaged), the typical median, the extremes over all, the largest run-to-run variation. What the
    slowest of a synchronous job's ranks costs beyond that is `paraplan.measure.hybrid.straggler`'s part."""
    return Stats(
        statistics.median(s.median_s for s in stats),
        min(s.min_s for s in stats),
        max(s.max_s for s in stats),
        max(s.spread for s in stats),
        sum(s.repeats for s in stats),
        statistics.fmean(s.expected_s for s in stats),
        max(s.stdev_s for s in stats),
    )


def merge_block_replicas(rows: Sequence[dict[str, Any]]) -> BlockMeasurement:
    parts = [BlockMeasurement.from_dict(r) for r in rows]
    split = [p.backward_input for p in parts if p.backward_input is not None]
    return BlockMeasurement(
        parts[0].kind,
        merge_replicas([p.forward for p in parts]),
        merge_replicas([p.backward for p in parts]),
        merge_replicas(split) if split else None,
        parts[0].params,
    )


def run_job(job: BenchJob, devices: LocalDevices, world: int) -> dict[str, Any]:
    """Run on `world` local devices at once (spawned processes) or, for one, in this process."""
    if world <= 1:
        with torch_threads(devices.threads if devices.kind == "cpu" else None):
            return _run(0, 1, job)
    from paraplan.measure.processes import run_processes

    everyone = run_processes(_run, world, (job,), devices.kind, devices.threads)
    results = everyone[: job.replicas]
    merged: dict[str, Any] = {"blocks": {}}
    for kind in job.kinds:
        merged["blocks"][kind] = merge_block_replicas([r["blocks"][kind] for r in results]).to_dict()
    if job.optimizer_shapes is not None:
        merged["optimizer"] = {
            "step": merge_replicas([Stats.from_dict(r["optimizer"]["step"]) for r in results]).to_dict(),
            "params": results[0]["optimizer"]["params"],
        }
    if "collectives" in everyone[0]:
        merged["collectives"] = everyone[0]["collectives"]
    return merged


def measure(
    model: ModelSpec,
    shard: Shard,
    kinds: Sequence[str],
    settings: BenchSettings,
    devices: LocalDevices,
    cache: MeasurementCache,
    replicas: int = 1,
    collective_ranks: int = 0,
) -> Measurements:
    """Blocks and optimizer on `replicas` devices at once, and (with `collective_ranks` >= 2) the collectives
    among max(replicas, collective_ranks) devices: from the cache, else timed."""
    software = {k: v for k, v in devices.software.items() if k in ("torch", "cuda", "cudnn")}
    device = f"{devices.key}/r{replicas}"
    keys = {kind: shape_key(kind, model, shard, settings) for kind in kinds}
    blocks = {kind: cache.get(device, kind, key, software) for kind, key in keys.items()}
    shapes = tuple(sorted(s for kind in kinds for s in block_param_shapes(kind, model, shard)))
    opt_key = {"shapes": list(shapes), "dtype": settings.dtype, "repeats": settings.repeats, "v": BENCH_VERSION}
    optimizer = cache.get(device, "optimizer", opt_key, software)
    sizes = GPU_SIZES_BYTES if devices.kind == "cuda" else CPU_SIZES_BYTES
    world = max(replicas, collective_ranks)
    coll_key = {"world": world, "sizes": list(sizes), "repeats": settings.repeats, "v": BENCH_VERSION}
    collectives = cache.get(devices.key, "collectives", coll_key, software) if collective_ranks >= 2 else {}
    job = BenchJob(
        model,
        shard,
        settings,
        tuple(kind for kind, hit in blocks.items() if hit is None),
        shapes if optimizer is None else None,
        tuple(sizes) if collectives is None else None,
        replicas,
    )
    if job.kinds or job.optimizer_shapes is not None or job.collective_sizes:
        fresh = run_job(job, devices, world)
        for kind, row in fresh["blocks"].items():
            cache.put(device, kind, keys[kind], software, row)
        if "optimizer" in fresh:
            cache.put(device, "optimizer", opt_key, software, fresh["optimizer"])
        if "collectives" in fresh:
            cache.put(devices.key, "collectives", coll_key, software, fresh["collectives"])
    else:
        fresh = {"blocks": {}}
    measured = {
        kind: BlockMeasurement.from_dict(fresh["blocks"][kind])
        if hit is None
        else BlockMeasurement.from_dict(hit, True)
        for kind, hit in blocks.items()
    }
    opt = (
        OptimizerMeasurement.from_dict(fresh["optimizer"])
        if optimizer is None
        else OptimizerMeasurement.from_dict(optimizer, True)
    )
    coll_rows = fresh.get("collectives", {}) if collectives is None else collectives
    return Measurements(
        measured,
        opt,
        collectives_from_rows(coll_rows, world),
        replicas,
    )
