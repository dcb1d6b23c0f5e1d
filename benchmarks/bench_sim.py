"""simulate() for interleaved 1F1B, pp=16, vpp=8, 128 micro-batches (32,768 F/B tasks): target < 20 ms.

Prints the warm time (the schedule's task graph cached: what the tuner sees for every configuration after
the first with the same pp, vpp and micro-batch count), the cold time (empty caches: the first call for a
shape), and their ratio to the target. With numba installed (the extra `fast`) the loops run compiled: they
are loaded first (numba's import and the cache load, or the compilation: printed on its own, outside the
timings), and the benchmark runs itself with PARAPLAN_NO_JIT=1 in a subprocess for the pure-Python figures.
Run: python benchmarks/bench_sim.py [--no-baseline]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from paraplan.sim import loops_jit
from paraplan.sim.costs import uniform_chunk, uniform_costs
from paraplan.sim.engine import simulate
from paraplan.sim.plan import _build_large, _build_small
from paraplan.sim.schedules import rank_programs

TARGET_MS = 20.0


def costs(p2p_s: float = 2e-5):
    chunk = uniform_chunk(
        1.1e-3,
        2.0e-3,
        1.0e-3,
        activation_bytes=2.1e9,
        comm_total_s={"tp": 4e-4},
        comm_exposed_s={"tp": 1.5e-4},
        dp_grad_reduce_s=6e-3,
        dp_param_gather_s=3e-3,
    )
    return uniform_costs(
        "interleaved",
        16,
        128,
        chunk,
        vpp=8,
        p2p_s=p2p_s,
        optimizer_s=4e-3,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
    )


def timed(fn) -> tuple[float, float]:
    """(wall ms, process CPU ms): CPU time is what counts on a shared machine."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3


def main() -> None:
    # numpy's OpenBLAS worker thread spins for about 0.1 s after import: its CPU time is not the simulator's,
    # but process_time counts it, and the first (cold) runs would carry it
    time.sleep(0.3)
    began = time.perf_counter()
    jit = loops_jit.available()  # imports numba
    load_s = (time.perf_counter() - began) + (loops_jit.warm_up() if jit else 0.0)
    cold = []
    for _ in range(5):
        _build_small.cache_clear()
        _build_large.cache_clear()
        rank_programs.cache_clear()
        c = costs()
        cold.append(timed(lambda c=c: simulate(c)))
    warm = []
    for i in range(30):
        c = costs(p2p_s=2e-5 * (1 + i % 3))  # new durations each call; the shape stays cached
        warm.append(timed(lambda c=c: simulate(c)))
    result = simulate(costs())
    figures = {name: statistics.median(c for _, c in runs) for name, runs in (("warm", warm), ("cold", cold))}
    if "--summary" in sys.argv:  # the baseline subprocess
        print(json.dumps(figures))
        return
    base = {}
    if jit and "--no-baseline" not in sys.argv:
        env = {**os.environ, "PARAPLAN_NO_JIT": "1"}
        out = subprocess.run([sys.executable, __file__, "--summary"], env=env, capture_output=True, text=True)
        base = json.loads(out.stdout)
    print(f"interleaved pp=16 vpp=8 m=128, {16 * 8 * 128 * 2} F/B tasks, step {result.step_time_s * 1e3:.1f} ms")
    print(f"loops: {'compiled (numba)' if jit else 'pure Python'}; load average {os.getloadavg()[0]:.2f}")
    for name, runs in (("warm", warm), ("cold", cold)):
        wall = statistics.median(w for w, _ in runs)
        cpu = figures[name]
        note = "" if name == "warm" else "; first call per shape"
        ratio = cpu / TARGET_MS
        line = f"{name}: {wall:6.1f} ms wall, {cpu:6.1f} ms CPU  ({ratio:.2f} x the {TARGET_MS:.0f} ms target{note})"
        if base:
            line += f"; pure-Python loops {base[name]:.1f} ms CPU ({base[name] / cpu:.2f}x)"
        print(line)
    if jit:
        print(f"compiled loops loaded in {load_s * 1e3:.0f} ms (numba import + cache load or compile), untimed")


if __name__ == "__main__":
    main()
