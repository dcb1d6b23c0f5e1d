"""End to end on this CPU: train a tiny Llama with PyTorch, measure this CPU, fit, project, compare.

1. Train `paraplan.measure.e2e`'s reference model (fp32, one thread per process) for a few steps in one
   process and data-parallel over gloo in two; measure the step times (medians after warm-up).
2. `paraplan measure --device cpu --quick` (its functions) with the training's dtype and thread count, then
   `paraplan fit` (its function) -> a profile file.
3. This CPU as a SystemSpec: matmul peak and streaming bandwidth measured here (with two processes at once
   for the data-parallel run); the scale-up link from a line fitted to the measured 2-process gloo all-reduce
   samples of 1 MiB and up (the projection does not read the profile's collective regressors, so they enter
   through the SystemSpec fields).
4. A Calibration measured here, not the GPU frameworks' fitted overheads: host launch per op and kernel
   floor = one trivial op's dispatch, the backward factor from its autograd backward, per-micro-batch and
   per-step framework time = an empty step (the same model code at negligible widths) plus the trainer's
   own bookkeeping, Adam's bytes per parameter from the profile's fused-AdamW regressor (or a direct timing
   when the model lies outside its samples).
5. Project with `--profile` semantics (`ProjectionOptions(profile=path_ref(path))`), eager kernels.

Checks. The parts the projection takes from the measured profile (GEMMs, attention, the optimizer) within 15%
of the same parts measured inside the real step (per-op CPU times); the gradient all-reduce within 35% of the
one inside the data-parallel step; the whole step within 15% (the issue's target) for both runs. The run is
eager PyTorch, so the projection runs with `kernel_fusion=False` (RMSNorm, SwiGLU and rotary as separate
kernels, split gradients concatenated: `paraplan.graph.kernels`); the two data-parallel processes share this
CPU, so their kernels run slower than the one-process samples by factors measured with two processes at once
(`e2e.measure_cpu_shared`).

The measured step time is the wall clock when this machine is quiet (the single-process run's wall time
within 10% of its CPU time); when other jobs keep the CPUs busy, wall times carry their share of the CPU
and the comparison uses the step's process CPU time instead (both are printed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")
pytest.importorskip("sklearn", reason="scikit-learn is not installed (the 'fit' extra)")
pytestmark = pytest.mark.slow  # trains a small Llama, measures its kernels and fits a profile (~1 min)

TARGET = 0.15  # the target for the whole step
PARTS_TOLERANCE = 0.15  # the profiled parts (GEMMs + attention + optimizer) vs the same parts in the step
ALL_REDUCE_TOLERANCE = 0.35  # the gradient all-reduce (gloo over loopback TCP, a cold 27 MB buffer: noisy)
LINK_SELF_CONSISTENCY = 0.30  # a link line missing its own samples by more measured noise, not the link
QUIET_WALL_OVER_CPU = 1.10
SPEED_DRIFT = 1.10  # the reference kernels slower by more than this between check points: the CPU changed
ATTEMPTS = 3  # measurements taken again while a check misses on a busy machine (each ~1-3 min)


@dataclass
class Outcome:
    ratios: dict[int, float] = field(default_factory=dict)  # world -> projected / measured step
    all_reduce: tuple[float, float] = (0.0, 0.0)  # (projected, measured) seconds, data-parallel run
    link_error: float = 0.0  # the largest relative miss of the fitted all-reduce line over its own samples
    busy: list[str] = field(default_factory=list)  # why the machine was busy at some point of the measurements
    parts: dict[str, tuple[float, float]] = field(default_factory=dict)  # category -> (projected, measured) s
    seconds: float = 0.0
    probes: list[tuple[float, float]] = field(default_factory=list)  # reference (matmul, streaming) seconds
    attempts: list[str] = field(default_factory=list)  # what each measurement attempt missed (the fixture's retries)

    def check_busy(self) -> list[str]:
        """Record (and return) why the machine is busy now, if it is (PSI or load average), or was: the CPU's
        own speed drifted between the check points (a virtual machine's neighbours take caches and memory
        bandwidth without showing in its load; the profile and the step are then measured on different CPUs)."""
        from paraplan.measure.device import machine_busy

        self.busy.extend(filter(None, [machine_busy(2)]))
        self.probes.append(_reference_times())
        self.busy = [note for note in self.busy if not note.startswith("CPU speed drifted")]
        for i, name in enumerate(("matmul", "streaming add")):
            times = [p[i] for p in self.probes]
            if max(times) > SPEED_DRIFT * min(times):
                self.busy.append(f"CPU speed drifted: reference {name} {_ms(min(times))}-{_ms(max(times))} ms")
        return self.busy


def _reference_times() -> tuple[float, float]:
    """Median seconds of a fixed matmul and a fixed streaming add on one thread (the runs' thread count)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(384, 384), torch.randn(384, 384)
        x, y = torch.randn(2**22), torch.randn(2**22)  # 16 MiB each: past the last-level cache
        out = []
        for work in (lambda: a @ b, lambda: x + y):
            work()  # warm: allocator and kernel selection
            samples = []
            for _ in range(9):
                t0 = time.perf_counter()
                work()
                samples.append(time.perf_counter() - t0)
            out.append(sorted(samples)[len(samples) // 2])
        return out[0], out[1]
    finally:
        torch.set_num_threads(threads)


def _ms(value: float) -> str:
    return f"{value * 1e3:.1f}"


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """The measurements and projections, taken again (up to ATTEMPTS times, after waiting for the machine to quiet
    down: `paraplan.measure.device.wait_until_quiet`) while a check misses and the machine was busy."""
    from paraplan.measure.device import wait_until_quiet

    attempts: list[str] = []
    for attempt in range(1, ATTEMPTS + 1):
        result = _measure(tmp_path_factory.mktemp(f"e2e-{attempt}"))
        misses = _misses(result)
        busy = f" (busy: {'; '.join(result.busy)})" if result.busy else ""
        attempts.append(f"attempt {attempt}: {'; '.join(misses) or 'within the tolerances'}{busy}")
        print(attempts[-1])
        if not misses or not result.busy or attempt == ATTEMPTS:
            break
        wait_until_quiet()
    result.attempts = attempts
    return result


def _misses(result: Outcome) -> list[str]:
    """The checks below that the outcome misses, or cannot judge (all-reduce samples that miss their own line)."""
    misses = []
    projected = sum(result.parts[c][0] for c in ("gemm", "attention", "optimizer"))
    measured = sum(result.parts[c][1] for c in ("gemm", "attention", "optimizer"))
    if abs(projected / measured - 1) > PARTS_TOLERANCE:
        misses.append(f"profiled parts {projected / measured - 1:+.1%}")
    all_reduce_projected, all_reduce_measured = result.all_reduce
    if result.link_error > LINK_SELF_CONSISTENCY:  # the all-reduce check cannot judge: measure again too
        misses.append(f"all-reduce samples {result.link_error:.0%} off their own line")
    elif abs(all_reduce_projected / all_reduce_measured - 1) > ALL_REDUCE_TOLERANCE:
        misses.append(f"all-reduce {all_reduce_projected / all_reduce_measured - 1:+.1%}")
    misses += [f"world {w} step {r - 1:+.1%}" for w, r in result.ratios.items() if abs(r - 1) > TARGET]
    return misses


def _measure(tmp: Path) -> Outcome:
    from paraplan.measure import e2e
    from paraplan.measure.bench import BenchConfig, run_benchmarks
    from paraplan.measure.fit import fit_profile

    started = time.perf_counter()
    config, run = e2e.TinyLlama(), e2e.RunConfig()

    # 1. and 2., measurements first and close together (a shared machine's speed drifts by several percent
    # within a minute), then the fit: the microbenchmarks, the real step op by op, the two trainings
    samples = tmp / "samples"
    result = Outcome()
    result.check_busy()
    run_benchmarks(BenchConfig(device="cpu", quick=True, dtype=run.dtype, threads=run.threads), samples)
    result.check_busy()
    breakdown = e2e.step_breakdown(config, run)
    single = e2e.run_single(config, run)
    result.check_busy()
    data_parallel = e2e.run_data_parallel(config, run, world=2)
    result.check_busy()
    sums = data_parallel.extra["replica_sums"]
    assert max(sums) - min(sums) < 1e-6 * max(1.0, abs(sums[0])), "data-parallel replicas diverged"
    fitted = fit_profile(samples)
    profile_path = tmp / "cpu-profile.json"
    fitted.profile.save(profile_path)

    # 3. and 4. this CPU as a system, its calibration
    figures = e2e.measure_cpu(run.dtype, run.threads)
    shared_figures = e2e.measure_cpu_shared(run.dtype, run.threads, world=2)
    shared = e2e.shared_cpu(figures, shared_figures)
    overhead = e2e.framework_overhead(config, run)
    link = e2e.fit_allreduce(samples)
    result.link_error = link.max_error
    params = single.params

    optimizer_s = fitted.profile.optimizer_time_s(params)
    optimizer_source = "profile:optimizer"
    if optimizer_s is None:
        optimizer_s = e2e.optimizer_s_per_param(run.dtype, run.threads, params) * params
        optimizer_source = "direct fused-AdamW timing"

    quiet = single.median_s <= QUIET_WALL_OVER_CPU * single.median_cpu_s
    for measured in (single, data_parallel):  # a process that waited for a core ran on a busy machine
        if measured.median_s > QUIET_WALL_OVER_CPU * measured.median_cpu_s:
            result.busy.append(
                f"{measured.world}-process run: wall {_ms(measured.median_s)} ms vs CPU {_ms(measured.median_cpu_s)} ms"
            )
    print(f"\nmodel {e2e.describe(config, run)}; {params / 1e6:.2f} M parameters")
    print(
        f"CPU: matmul {figures.matmul_flops / 1e9:.0f} GFLOP/s, stream {figures.stream_bytes_per_s / 1e9:.1f} GB/s, "
        f"dispatch {figures.dispatch_s * 1e6:.1f} us (backward {figures.backward_dispatch_s * 1e6:.1f} us), "
        f"empty step {_ms(overhead.microbatch_s)} + {_ms(overhead.step_s)} ms; all-reduce "
        f"{link.bytes_per_s / 1e9:.2f} GB/s + {link.latency_s * 1e6:.0f} us (least squares over {link.samples} sizes "
        f"up to {link.largest_bytes / 2**20:.0f} MiB, max error {link.max_error:.0%}); "
        f"optimizer {_ms(optimizer_s)} ms ({optimizer_source}); "
        f"profile: {len(fitted.profile.regressors)} regressors"
    )
    print(f"machine {'quiet' if quiet else 'oversubscribed'}: steps compared by {'wall' if quiet else 'CPU'} time")

    # 5. project and compare
    projections: dict[int, Any] = {}
    print(
        f"2 processes at once: matmul x{shared.compute_factor:.2f} slower, streaming x{shared.memory_factor:.2f} "
        f"slower than one alone"
    )
    for measured in (single, data_parallel):
        together = shared if measured.world > 1 else None
        system = e2e.cpu_system(shared_figures if together else figures, link, measured.world)
        calibration = e2e.cpu_calibration(figures, optimizer_s / params, overhead, measured.extra["empty_step_s"])
        projection = e2e.project_cpu(config, run, measured.world, system, calibration, profile_path, together)
        projections[measured.world] = (projection, system, calibration)
        reference = measured.median_s if quiet else measured.median_cpu_s
        result.ratios[measured.world] = projection.step_time_s / reference
        ops = e2e.projected_ops(config, run, system, calibration, profile_path)
        total = sum(r.seconds * r.count for r in ops)
        covered = sum(r.seconds * r.count for r in ops if r.source != "analytic") / total
        print(
            f"world {measured.world}: measured {_ms(measured.median_s)} ms wall (min {_ms(measured.min_s)}), "
            f"{_ms(measured.median_cpu_s)} ms CPU; projected {_ms(projection.step_time_s)} ms "
            f"-> {result.ratios[measured.world] - 1:+.1%} ({covered:.0%} of compute time from the profile)"
        )
        parts = e2e.projected_categories(projection, ops)
        print("  projected ms: " + ", ".join(f"{k} {_ms(v)}" for k, v in parts.items() if v > 0))
        if measured.world > 1:
            result.all_reduce = (parts["all_reduce"], measured.extra["all_reduce_s"])
            print(f"  all-reduce measured in the step: {_ms(measured.extra['all_reduce_s'])} ms")

    # where the real single-process step spends its time, against the projection's parts
    projection, system, calibration = projections[1]
    ops = e2e.projected_ops(config, run, system, calibration, profile_path)
    projected = e2e.projected_categories(projection, ops)
    print(
        f"measured per-op CPU ms in the step ({breakdown.ops} aten ops, step {_ms(breakdown.step_s)} ms): "
        + ", ".join(f"{k} {_ms(v)}" for k, v in breakdown.categories.items())
    )
    profiled = e2e.measured_categories(config, run)
    print("torch profiler ms (self CPU): " + ", ".join(f"{k} {_ms(v)}" for k, v in profiled.items()))
    for category in ("gemm", "attention", "optimizer", "elementwise", "framework"):
        result.parts[category] = (projected.get(category, 0.0), breakdown.categories.get(category, 0.0))
    print("projected / measured per part: " + ", ".join(f"{k} {_ms(p)}/{_ms(m)}" for k, (p, m) in result.parts.items()))
    for row in ops:
        print(f"  {row.block:9} {row.name:14} {row.phase:16} {row.seconds * 1e6:9.1f} us x{row.count} {row.source}")
    result.seconds = time.perf_counter() - started
    print(f"end to end: {result.seconds:.0f} s")
    return result


def _assert_unless_busy(ok: bool, message: str, outcome: Outcome) -> None:
    """Timing checks against a real 2-process run only mean something on a quiet machine: when one fails
    while the CPU was measurably busy during the measurements or is now (Linux CPU pressure or load average,
    as the hybrid validation test judges it), skip with the figures instead of failing."""
    if ok:
        return
    busy = outcome.check_busy()
    if busy:
        tries = f" in {len(outcome.attempts)} attempts ({' | '.join(outcome.attempts)})" if outcome.attempts else ""
        pytest.skip(f"machine busy ({'; '.join(busy)}){tries}; {message}")
    raise AssertionError(message)


def test_profiled_parts_match_the_step(outcome: Outcome) -> None:
    """What the projection takes from the measured profile is what the real step spends on the same work: the
    GEMMs, attention and optimizer together (each is printed; attention alone is 5% of the step, fitted from
    a dozen quick samples)."""
    projected = sum(outcome.parts[c][0] for c in ("gemm", "attention", "optimizer"))
    measured = sum(outcome.parts[c][1] for c in ("gemm", "attention", "optimizer"))
    _assert_unless_busy(
        abs(projected / measured - 1) <= PARTS_TOLERANCE,
        f"gemm + attention + optimizer {projected} vs {measured}",
        outcome,
    )


def test_all_reduce_matches_the_step(outcome: Outcome) -> None:
    """The gradient all-reduce projected from the measured link is what the data-parallel step spends on it."""
    projected, measured = outcome.all_reduce
    if outcome.link_error > LINK_SELF_CONSISTENCY:
        pytest.skip(
            f"the all-reduce samples miss their own fitted line by up to {outcome.link_error:.0%}: gloo over "
            f"loopback was unstable during the measurement, so it cannot judge the projection "
            f"(all-reduce {projected} vs {measured} s; {' | '.join(outcome.attempts)})"
        )
    _assert_unless_busy(
        abs(projected / measured - 1) <= ALL_REDUCE_TOLERANCE, f"all-reduce {projected} vs {measured}", outcome
    )


def test_step_within_target(outcome: Outcome) -> None:
    """The issue's target: the whole step, single process and data-parallel, within 15% of the measured one."""
    for world, ratio in outcome.ratios.items():
        _assert_unless_busy(
            abs(ratio - 1) <= TARGET, f"world {world}: projected / measured - 1 = {ratio - 1:+.1%}", outcome
        )
