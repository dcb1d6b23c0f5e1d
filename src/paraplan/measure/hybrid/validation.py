"""CPU validation of the hybrid projection: a small Llama-style model trained for real as a 2-process gloo job
(one run with PP=2, one with DP=2), against downscale (one rank's blocks), measure, upscale.

A shared machine's load comes and goes within seconds, so the real steps and the benchmark are interleaved
step by step inside one 2-process job: each iteration runs one real step of every layout, then one repeat
of every downscaled block (on both processes at once, as in `paraplan.measure.hybrid.job`) and of the optimizer.
Both sides thus see the same conditions. The collectives are timed at the end, the network fitted to
them, and the core projection upscales the blocks' medians to each layout.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from paraplan.measure.reference import TinyLlama
from paraplan.specs.model import ModelSpec
from paraplan.specs.training import TrainingSpec

# a Llama-3-shaped toy: GQA, SwiGLU, RMSNorm, rotary, untied embeddings
TINY_LLAMA = TinyLlama(vocab=2048, hidden=256, layers=4, heads=4, kv_heads=2, ffn=704).model_spec()


def layouts(seq: int = 128, global_batch: int = 4) -> dict[str, TrainingSpec]:
    """The two 2-process layouts: 1F1B over two pipeline stages, and two data-parallel replicas. The real
    run trains in fp32; so does the target where the core knows plain fp32 training (4-byte activations
    and gradients on the wire), else the default mixed precision's 2-byte activations are modelled."""
    from paraplan.specs import training

    precision = "fp32" if "fp32" in getattr(training, "TRAINING_PRECISIONS", ()) else "bf16"
    base = TrainingSpec(micro_batch_size=1, global_batch_size=global_batch, seq_length=seq, precision=precision)
    return {"pp2": base.with_values(pp=2, dp=1), "dp2": base.with_values(pp=1, dp=2)}


@dataclass(frozen=True, slots=True)
class LayoutReport:
    name: str
    real_step_s: float  # mean of the real steps (the projection is an expectation too)
    projected_step_s: float
    real_steps_s: tuple[float, ...]
    real_parts_s: dict[str, float]  # per step, the slowest rank: compute, gradient all-reduce, optimizer
    projected_breakdown_s: dict[str, float]
    sources: dict[str, str]  # breakdown part -> measured | simulated

    @property
    def error(self) -> float:
        return self.projected_step_s / self.real_step_s - 1

    @property
    def real_variation(self) -> float:
        """Coefficient of variation of the real steps: how steady the machine was."""
        return statistics.pstdev(self.real_steps_s) / statistics.fmean(self.real_steps_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.name,
            "real_step_ms": self.real_step_s * 1e3,
            "projected_step_ms": self.projected_step_s * 1e3,
            "error": self.error,
            "real_variation": self.real_variation,
            "real_steps_ms": [t * 1e3 for t in self.real_steps_s],
            "real_parts_ms": {k: v * 1e3 for k, v in self.real_parts_s.items()},
            "projected_breakdown_ms": {k: float(v) * 1e3 for k, v in self.projected_breakdown_s.items() if v},
            "sources": self.sources,
        }


@dataclass(frozen=True, slots=True)
class ValidationReport:
    layouts: tuple[LayoutReport, ...]
    blocks: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind -> measured times (ms)
    comm_fit: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"layouts": [r.to_dict() for r in self.layouts], "blocks": self.blocks, "comm_fit": self.comm_fit}


def _worker(
    rank: int,
    world: int,
    model: ModelSpec,
    targets: dict[str, TrainingSpec],
    job: Any,
    optimizer_shapes: list[tuple[int, ...]],
    iterations: int,
) -> dict[str, Any]:
    """Real steps and benchmark repeats, interleaved; then the collectives."""
    from paraplan.measure.hybrid.bench import BlockTimer, OptimizerTimer
    from paraplan.measure.hybrid.collectives import time_collectives
    from paraplan.measure.hybrid.realrun import Trainer

    trainers = {name: Trainer(rank, model, train) for name, train in targets.items()}
    blocks = [BlockTimer(kind, job.model, job.shard, job.settings) for kind in job.kinds]
    optimizer = OptimizerTimer(optimizer_shapes, job.settings)
    warmup = job.settings.warmup
    real: dict[str, list[float]] = {name: [] for name in targets}
    names = list(targets)
    for i in range(warmup + iterations):
        if i == warmup:
            for trainer in trainers.values():
                trainer.parts = dict.fromkeys(trainer.parts, 0.0)
        for name in names if i % 2 == 0 else names[::-1]:
            step_s = trainers[name].step()
            if i >= warmup:
                real[name].append(step_s)
        for block in blocks:
            block.once()
        optimizer.once()
    sizes, settings = job.collective_sizes, job.settings
    return {
        "real": real,
        "parts": {name: {k: v / iterations for k, v in t.parts.items()} for name, t in trainers.items()},
        "blocks": {block.kind: block.result().to_dict() for block in blocks},
        "optimizer": optimizer.result().to_dict(),
        "collectives": time_collectives(rank, world, "cpu", sizes, settings.warmup, settings.repeats),
    }


def validate_cpu(
    model: ModelSpec = TINY_LLAMA, iterations: int = 20, warmup: int = 2, seq: int = 128, global_batch: int = 4
) -> ValidationReport:
    """Real 2-process runs (PP=2 and DP=2) and the hybrid projection of each, from one interleaved job."""
    from paraplan.cost.calibration import calibration_for
    from paraplan.measure.device import detect
    from paraplan.measure.hybrid.api import fit_weight
    from paraplan.measure.hybrid.bench import BenchSettings, OptimizerMeasurement, block_param_shapes
    from paraplan.measure.hybrid.collectives import CPU_SIZES_BYTES, collectives_from_rows
    from paraplan.measure.hybrid.commfit import fit_comm
    from paraplan.measure.hybrid.job import BenchJob, merge_block_replicas, merge_replicas
    from paraplan.measure.hybrid.local import local_cpu_system
    from paraplan.measure.hybrid.plan import plan_benchmark
    from paraplan.measure.hybrid.timing import Stats
    from paraplan.measure.hybrid.upscale import BlockTimes, upscale
    from paraplan.measure.processes import run_processes

    devices = detect("cpu")
    system = local_cpu_system(2)
    targets = layouts(seq, global_batch)
    plans = {name: plan_benchmark(model, system, train, devices) for name, train in targets.items()}
    plan = next(iter(plans.values()))  # every layout has tp = cp = 1: the same blocks and shapes
    settings = BenchSettings("cpu", plan.dtype, warmup=warmup, repeats=iterations)
    job = BenchJob(model, plan.shard, settings, plan.kinds, None, tuple(CPU_SIZES_BYTES), replicas=2)
    shapes = [s for kind in plan.kinds for s in block_param_shapes(kind, model, plan.shard)]
    results = run_processes(_worker, 2, (model, targets, job, shapes, iterations), "cpu", 1)
    blocks = {kind: merge_block_replicas([r["blocks"][kind] for r in results]) for kind in plan.kinds}
    optimizer = OptimizerMeasurement(
        merge_replicas([Stats.from_dict(r["optimizer"]["step"]) for r in results]), results[0]["optimizer"]["params"]
    )
    samples = collectives_from_rows(results[0]["collectives"], 2)
    times = {k: BlockTimes(m.forward_s, m.backward_s, jitter_s=m.jitter_s) for k, m in blocks.items()}
    reports, fits = [], {}
    for name, train in targets.items():
        comm = fit_comm(samples, "gloo among 2 local processes", weight=fit_weight(plans[name]))
        projection, sources, _ = upscale(
            plans[name],
            system,
            times,
            calibration_for(system.gpu.name, train.framework),
            optimizer_s_per_param=optimizer.seconds_per_param,
            comm=comm,
            comm_scale_out=True,
            harness_overheads=True,
            device="cpu",
        )
        fits[name] = comm.to_dict() if comm else {}
        real = [t for r in results[:1] for t in r["real"][name]]
        parts = max((r["parts"][name] for r in results), key=lambda p: sum(p.values()))
        reports.append(
            LayoutReport(
                name=name,
                real_step_s=statistics.fmean(real),
                projected_step_s=projection.step_time_s,
                real_steps_s=tuple(real),
                real_parts_s=parts,
                projected_breakdown_s=dict(projection.breakdown),
                sources={part: s.origin for part, s in sources.items()},
            )
        )
    measured = {k: {"forward_ms": m.forward_s * 1e3, "backward_ms": m.backward_s * 1e3} for k, m in blocks.items()}
    measured["optimizer"] = {"step_ms": optimizer.step.mean_s * 1e3, "params": optimizer.params}
    return ValidationReport(tuple(reports), measured, fits)
