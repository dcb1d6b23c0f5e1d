"""The full tuner search for llama3.1-70b on 1,024 H100 (gbs 1024, seq 8192), against its targets.

Targets (the tuner issue): the whole search under 60 s on a 2-core machine, at least 2,000 candidates per
second projected after the memory filter, and a best configuration at least as fast as NVIDIA's published
recipe for the setting: the NeMo / Megatron-Bridge Llama3 70B H100 performance recipe, TP4 PP4 VPP5 CP2 MBS1
(sequence parallel, distributed optimizer with overlapped grad reduce and param gather, TP comm overlap, no
recompute), projected with the same core, in BF16 and FP8.

With numba installed (the extra `fast`), the simulator's loops run compiled; the benchmark then first runs
itself with PARAPLAN_NO_JIT=1 in a subprocess (the pure-Python loops: the baseline) and prints the ratios.
The compiled loops are loaded (or compiled) before the timed search, and that time is printed on its own.

Run: python benchmarks/bench_tune.py [--workers N] [--bf16-only] [--no-baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from paraplan.projection import project_specs
from paraplan.sim import loops_jit
from paraplan.specs.presets import model_preset, system_preset
from paraplan.tune.candidate import Candidate, TuneProblem, to_training
from paraplan.tune.space import parse_constraints
from paraplan.tune.tuner import TuneOptions, TuneResult, tune

TARGET_SEARCH_S = 60.0
TARGET_RATE_PER_S = 2000.0
GBS, SEQ, GPUS = 1024, 8192, 1024


def nemo_recipe(precision: str) -> Candidate:
    """NeMo 2 / Megatron-Bridge `llama3_70b` H100 performance recipe (scripts/performance, 25.x)."""
    return Candidate.of(
        GPUS,
        precision=precision,
        tp=4,
        cp=2,
        pp=4,
        vpp=5,
        schedule="interleaved",
        ep=1,
        etp=4,
        mbs=1,
        sp=True,
        sharding="dist_opt",
        recompute="none",
        recompute_layers=None,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        tp_comm_overlap=True,
        ep_overlap=False,
    )


def run(precision: str, workers: int | None) -> tuple[TuneResult, float, float]:
    problem = TuneProblem(
        model_preset("llama3.1-70b"),
        (system_preset("h100-sxm5-80gb", GPUS),),
        GBS,
        SEQ,
        model_ref="llama3.1-70b",
        gpu_ref="h100-sxm5-80gb",
    )
    limits = parse_constraints([f"precision={precision}"], {})
    cpu_before = _cpu_s()
    started = time.perf_counter()
    result = tune(problem, limits, TuneOptions(workers=workers, top_k=5))
    wall_s = time.perf_counter() - started
    cpu_s = _cpu_s() - cpu_before
    recipe = project_specs(problem.model, problem.systems[0], to_training(problem, nemo_recipe(precision)))
    best = result.top[0]
    print(f"\n== llama3.1-70b, {GPUS} x H100, gbs {GBS}, seq {SEQ}, {precision} ==")
    print(f"method {result.method}, workers {workers or os.cpu_count()}")
    print(f"search wall time: {wall_s:.1f} s  (target < {TARGET_SEARCH_S:.0f} s, ratio {wall_s / TARGET_SEARCH_S:.3f})")
    rate = result.candidates_per_s
    search_rate = result.search_evaluated / result.search_elapsed_s if result.search_elapsed_s else 0.0
    print(
        f"projected after the memory filter: {result.evaluated:,} in {result.elapsed_s:.1f} s = {rate:,.0f}/s "
        f"(target >= {TARGET_RATE_PER_S:,.0f}/s, ratio {rate / TARGET_RATE_PER_S:.3f}); "
        f"exhaustive phase alone {search_rate:,.0f}/s"
    )
    cores = workers or os.cpu_count() or 1
    print(
        f"CPU time (this process and its workers): {cpu_s:.1f} s = {cpu_s / result.evaluated * 1e3:.2f} ms per "
        f"projection; on {cores} otherwise idle cores: {cpu_s / cores:.1f} s, "
        f"{result.evaluated / (cpu_s / cores):,.0f}/s (other processes on this machine slow the wall-clock figures)"
    )
    screened = result.evaluated + result.illegal + result.memory_rejected + result.dominated
    print(
        f"screened: {screened:,} candidates ({screened / result.elapsed_s:,.0f}/s): {result.illegal:,} illegal, "
        f"{result.memory_rejected:,} rejected by the memory filter, {result.dominated:,} dominated recompute variants"
    )
    print(
        f"best:   {best.candidate.describe()}: {best.step_time_s:.3f} s/step, "
        f"{best.tokens_per_sec_per_gpu:,.0f} tokens/s/GPU, MFU {best.mfu:.1%}, {best.peak_gib:.1f} GiB"
    )
    print(
        f"recipe: {nemo_recipe(precision).describe()}: {recipe.step_time_s:.3f} s/step, "
        f"{recipe.tokens_per_sec_per_gpu:,.0f} tokens/s/GPU, MFU {recipe.mfu:.1%}, {recipe.memory.peak_gib:.1f} GiB, "
        f"fits {recipe.memory.fits}"
    )
    ratio = recipe.step_time_s / best.step_time_s
    print(f"best vs recipe: {ratio:.3f}x the recipe's throughput (target >= 1.000)")
    return result, ratio, wall_s


def baseline(args: argparse.Namespace) -> dict:
    """This benchmark with the pure-Python loops (PARAPLAN_NO_JIT=1), in a subprocess: its figures by precision."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, __file__, "--no-baseline", "--summary", out.name]
        command += ["--bf16-only"] if args.bf16_only else []
        command += ["--workers", str(args.workers)] if args.workers else []
        print("baseline: the pure-Python loops (PARAPLAN_NO_JIT=1), in a subprocess ...", flush=True)
        subprocess.run(command, check=True, env={**os.environ, "PARAPLAN_NO_JIT": "1"}, stdout=subprocess.DEVNULL)
        with open(out.name) as f:
            return json.load(f)


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # pool workers, once they have exited
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="processes (default: CPU count)")
    parser.add_argument("--bf16-only", action="store_true", help="skip the FP8 search")
    parser.add_argument("--no-baseline", action="store_true", help="skip the pure-Python loops' run")
    parser.add_argument("--summary", help=argparse.SUPPRESS)  # JSON figures (the baseline subprocess)
    args = parser.parse_args()
    print(f"CPUs: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    began = time.perf_counter()
    jit = loops_jit.available()  # imports numba
    import_s = time.perf_counter() - began
    base = baseline(args) if jit and not args.no_baseline else {}
    if jit:
        # cold cost of the compiled loops, outside the timed search: numba's import and the cache load (or the
        # compilation, on the very first run); the tuner's pool workers fork after it and inherit the code
        load_s = loops_jit.warm_up()
        print(f"compiled loops: numba import {import_s:.2f} s + cache load (or compile) {load_s:.2f} s, untimed")
    else:
        print("pure-Python loops (numba not installed, or PARAPLAN_NO_JIT=1)")
    summary = {}
    for precision in ("bf16",) if args.bf16_only else ("bf16", "fp8"):
        result, _, wall_s = run(precision, args.workers)
        summary[precision] = {"rate": result.candidates_per_s, "wall_s": wall_s}
        if precision in base:
            b = base[precision]
            print(
                f"vs the pure-Python loops: {b['rate']:,.0f}/s in {b['wall_s']:.1f} s -> "
                f"{result.candidates_per_s:,.0f}/s in {wall_s:.1f} s ({result.candidates_per_s / b['rate']:.2f}x)"
            )
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(summary, f)


if __name__ == "__main__":
    main()
