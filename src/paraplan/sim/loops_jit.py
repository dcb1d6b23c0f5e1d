"""The loops of `paraplan.sim.loops` compiled with numba (the optional extra `fast`), on int64/float64 arrays.

Same rules, same floating-point operations in the same order (no fast-math), so the same times to the bit;
tests compare the two. `PARAPLAN_NO_JIT=1` keeps the pure-Python loops.

Loading costs about 0.3 s per process with the other kernels (`paraplan.sim.kernels`: the plan builder, the
static order, the critical-path walk, the gradient-reduction tail; numba's import and the compiled code read from
its cache; 10-30 s the very first time, when it compiles: `cache=True` writes the code next to the modules, or in
numba's user cache), more than a few projections take. So the engine loads the compiled loops itself only once the
pure-Python ones have played `LOAD_AFTER_TASKS` tasks in the process (about what loading costs); long runs
(the tuner, benchmarks) call `warm_up()` first: the tuner does before its pool forks, and the workers inherit
the code. numba is imported by `available()`, not with this module.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

import numpy as np

LOAD_AFTER_TASKS = 2_000_000  # tasks of the pure-Python loops (100-250 ns each) before the engine loads numba

_found: list[bool] = []  # [whether numba imports], filled by the first `available()`
_python_tasks = [0]  # tasks the pure-Python loops have played in this process, until the compiled ones load


def disabled() -> bool:
    """PARAPLAN_NO_JIT set (and not "0")."""
    return os.environ.get("PARAPLAN_NO_JIT", "0") not in ("", "0")


def available() -> bool:
    """Whether the compiled loops can run: numba imports (imported here, the first time) and not disabled."""
    if disabled():
        return False
    if not _found:
        try:
            import numba  # noqa: F401
        except Exception:  # not installed, or built for another numpy
            _found.append(False)
        else:
            _found.append(True)
    return _found[0]


def use(n_tasks: int) -> bool:
    """Whether the engine runs a simulation of `n_tasks` compiled: loaded already, or loaded now that the
    pure-Python loops have played enough tasks in this process to pay for it."""
    if _loops:
        return not disabled()
    if disabled():
        return False
    _python_tasks[0] += n_tasks
    if _python_tasks[0] < LOAD_AFTER_TASKS or not available():
        return False
    warm_up()
    return True


class JitRows(NamedTuple):
    """Per task in the loops' order, as contiguous int64 arrays (built once per plan, kept in its memo)."""

    tasks: np.ndarray
    dep0: np.ndarray
    dep1: np.ndarray
    dep2: np.ndarray
    ranks: np.ndarray
    send0: np.ndarray
    send1: np.ndarray
    keys: np.ndarray
    next_keys: np.ndarray


def _compile():
    import numba

    @numba.njit(cache=True, nogil=True)
    def static_loop(tasks, dep0, dep1, ranks, send0, send1, keys, dur, t, start, p2p, pp):  # pragma: no cover
        pp_free = np.zeros(pp)
        free = np.zeros(pp)
        for j in range(tasks.shape[0]):
            i = tasks[j]
            r = ranks[j]
            s = free[r]
            x = t[dep0[j]]
            if x > s:
                s = x
            x = t[dep1[j]]
            if x > s:
                s = x
            start[i] = s
            e = s + dur[keys[j]]
            t[i] = e
            free[r] = e
            k0 = send0[j]
            if k0 != 0:
                f = pp_free[r]
                if f < e:
                    f = e
                f += p2p
                t[k0] = f
                k1 = send1[j]
                if k1 != 0:
                    f += p2p
                    t[k1] = f
                pp_free[r] = f

    @numba.njit(cache=True, nogil=True)
    def full_loop(
        tasks, dep0, dep1, dep2, ranks, send0, send1, keys, next_keys, dur, dur_next, gathers, units, scatters,
        demand, reduce_share, buckets, t, start, dp, gate, free, grads_done, scatters_done, p2p,
    ):  # fmt: skip  # pragma: no cover
        pp_free = np.zeros(dp.shape[0])
        for j in range(tasks.shape[0]):
            i = tasks[j]
            r = ranks[j]
            d = dur[keys[j]]
            s = free[r]
            x = t[dep0[j]]
            if x > s:
                s = x
            x = t[dep1[j]]
            if x > s:
                s = x
            x = t[dep2[j]]
            if x > s:
                s = x
            start[i] = s
            e = s + d
            t[i] = e
            nk = next_keys[j]
            g = gathers[nk]
            sc = scatters[keys[j]]
            held = e
            if demand[keys[j]] != 0.0 and sc > 0:  # on demand: the reduce-scatter holds the rank
                dp[r] = (dp[r] if dp[r] > e else e) + sc
                held = dp[r]
                scatters_done[r] = held
                sc = 0.0
            if g > 0:
                if demand[nk] != 0.0:  # gathered on demand
                    f = dp[r] if dp[r] > e else e
                    f += g
                    dp[r] = f
                    gate[i + 1] = f
                else:  # prefetch; paraplan.sim.timeline.param_lead_s
                    f = dp[r] if dp[r] > s else s
                    dp[r] = f + g
                    un = units[nk]
                    lead = g / un
                    x = g - (un - 1) * dur_next[nk] / un
                    if x > lead:
                        lead = x
                    f += lead
                    gate[i + 1] = f
                free[r] = held if held > f else f
            else:
                free[r] = held
            k0 = send0[j]
            if k0 != 0:
                f = pp_free[r]
                if f < e:
                    f = e
                f += p2p
                t[k0] = f
                k1 = send1[j]
                if k1 != 0:
                    f += p2p
                    t[k1] = f
                pp_free[r] = f
            share = reduce_share[j]
            if share != 0.0:
                for bucket in range(buckets):
                    ready = s + (bucket + 1) * d / buckets
                    dp[r] = (dp[r] if dp[r] > ready else ready) + share
                grads_done[r] = dp[r]
            if sc > 0:  # paraplan.sim.timeline.scatter_done_s
                u = units[keys[j]]
                ready = s + d / u
                at = (dp[r] if dp[r] > ready else ready) + sc
                x = s + d + sc / u
                dp[r] = at if at > x else x
                scatters_done[r] = dp[r]

    return static_loop, full_loop


_loops: list = []


def loops():
    """(static_loop, full_loop), compiled or loaded from numba's cache on the first call."""
    if not _loops:
        _loops.extend(_compile())
    return _loops[0], _loops[1]


def loaded() -> bool:
    """Whether the compiled loops are loaded in this process (and not disabled): what else runs compiled then
    (`paraplan.sim.plan_jit`) never loads numba itself."""
    return bool(_loops) and not disabled()


def warm_up() -> float:
    """Compile (or load from the cache) both loops with the argument types the engine passes, and the plan
    builder (`paraplan.sim.plan_jit`); seconds taken. Call it only where `available()`."""
    from paraplan.sim import plan_jit

    began = time.perf_counter()
    static, full = loops()
    none, f64 = np.zeros(0, dtype=np.int64), np.zeros(1)  # no task: the types only
    static(none, none, none, none, none, none, none, f64, f64, f64, 0.0, 1)
    full(none, none, none, none, none, none, none, none, none, f64, f64, f64, f64, f64, f64, f64, 1, f64, f64, f64, f64,
         f64, f64, f64, 0.0)  # fmt: skip
    plan_jit.warm_up()
    return time.perf_counter() - began
