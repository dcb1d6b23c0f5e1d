"""Where tasks run: in this process, in a local process pool (the default), or on a Ray cluster.

Every executor takes an iterable of `Task`s and yields their `TaskReport`s as they finish, keeping only a
few tasks in flight so a time limit or Ctrl-C stops the search promptly. Workers build one `Evaluator`
each and keep it (and the core's per-layer caches) for the whole search.

The local pool's workers die with the tuner (a killed tuner must not leave them computing and holding its
terminal), and a worker that dies costs no result: the pool is started again and the tasks it lost are run
again; one that kills its worker even when run alone is reported as failed, and the search goes on.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from paraplan.errors import ConfigError
from paraplan.tune.evaluate import Evaluator, Task, TaskReport

_WORKER_EVALUATOR: Evaluator | None = None
"""The evaluator of a pool worker process (set once by the pool initializer; never used in the parent)."""
PR_SET_PDEATHSIG = 1
"""<linux/prctl.h>: the signal a process receives when the thread that forked it exits (prctl(2))."""
PARENT_POLL_S = 1.0
"""How often a worker checks that the tuner is alive (the fallback where prctl is not available)."""
CLOSE_GRACE_S = 3.0
"""How long closing the pool waits for workers still inside a task before terminating them."""
WORKER_GC_THRESHOLDS = (10_000, 10, 10)
"""A pool worker's `gc.set_threshold` (CPython's default: 700, 10, 10): about 15x fewer collections in a search,
the collector's share of a worker's CPU time from about 7% to 2-3% (bench_tune.py)."""
MAX_POOL_RESTARTS = 8
"""A pool that breaks more often than this is given up: its remaining tasks are reported as failed."""


class Executor(Protocol):
    workers: int

    def run(self, tasks: Iterable[Task]) -> Iterator[TaskReport]: ...

    def close(self) -> None: ...


class SerialExecutor:
    """Everything in this process (small runs, tests, the seed planner)."""

    def __init__(self, evaluator: Evaluator) -> None:
        self.evaluator = evaluator
        self.workers = 1

    def run(self, tasks: Iterable[Task]) -> Iterator[TaskReport]:
        for task in tasks:
            yield self.evaluator.run(task)

    def close(self) -> None:
        return None


def _init_worker(evaluator: Evaluator, parent_pid: int) -> None:
    global _WORKER_EVALUATOR
    # what the worker inherits (the parent's warm caches) is never garbage here: out of the collector's sight, its
    # collections neither walk it nor write to its pages (each write copies a page the fork shared); and a worker
    # allocates many small objects that live long (cached costs) or not at all: fewer, larger young collections
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLDS)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and keeps what was found
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a handler inherited from the parent by fork
    _die_with_parent(parent_pid)
    _WORKER_EVALUATOR = evaluator


def _die_with_parent(parent_pid: int) -> None:
    """End this worker when the tuner dies, however it dies (SIGKILL included): on Linux the kernel sends SIGTERM
    (prctl PR_SET_PDEATHSIG); everywhere a thread also polls the parent's pid, which changes when it dies."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no libc prctl: the polling thread alone
    if os.getppid() != parent_pid:  # the parent died before prctl took effect: no signal will come
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="paraplan-parent-watch", daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _run_in_worker(task: Task) -> TaskReport:
    assert _WORKER_EVALUATOR is not None
    return _WORKER_EVALUATOR.run(task)


def _noop(_: int) -> int:
    return os.getpid()


def _death(exitcode: int | None) -> str:
    if exitcode is None or exitcode >= 0:
        return f"exit code {exitcode}"
    try:
        return f"killed by {signal.Signals(-exitcode).name}"
    except ValueError:
        return f"killed by signal {-exitcode}"


def _failed(task: Task, reason: str) -> TaskReport:
    """The report of a task that could not run: nothing evaluated, its items counted as failed."""
    return TaskReport(tag=task.tag, failures=[reason], failed_items=len(task.items))


class LocalPoolExecutor:
    """A process pool on this machine (fork: workers inherit the parent's warm caches)."""

    def __init__(self, evaluator: Evaluator, workers: int | None = None) -> None:
        import multiprocessing

        self.workers = max(1, workers or os.cpu_count() or 1)
        self._evaluator = evaluator
        self._context = multiprocessing.get_context(
            "fork" if "fork" in multiprocessing.get_all_start_methods() else None
        )
        self.restarts = 0
        """How many times a dead worker broke the pool (each time it was started again)."""
        self.deaths: list[str] = []
        """How the workers that broke the pool died ("killed by SIGKILL")."""
        self._pool, self._processes = self._start()

    def _start(self) -> tuple[ProcessPoolExecutor, list[Any]]:
        pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=self._context,
            initializer=_init_worker,
            initargs=(self._evaluator, os.getpid()),
        )
        # start every worker now, before any progress-bar thread exists in the parent
        list(pool.map(_noop, range(self.workers)))
        return pool, list((getattr(pool, "_processes", None) or {}).values())

    def _restart(self) -> None:
        """A worker died: note how, drop the broken pool and start a new one."""
        self.restarts += 1
        self._close_pool()  # the broken pool's workers are dead or terminated: reaped here, exit codes known
        codes = {p.exitcode for p in self._processes if p.exitcode not in (None, -signal.SIGTERM)}
        self.deaths += [_death(code) for code in sorted(codes, key=str)] or ["a worker process died"]
        self._pool, self._processes = self._start()

    def run(self, tasks: Iterable[Task]) -> Iterator[TaskReport]:
        """Reports as tasks finish, at most 3 tasks per worker in flight. A task lost with a dead worker is run
        again once with the others; lost again, it is run alone, and if it dies alone it is reported failed."""
        iterator = iter(tasks)
        pending: dict[Future, tuple[Task, int]] = {}
        retry: deque[tuple[Task, int]] = deque()  # (task, attempts so far)
        alone: deque[tuple[Task, int]] = deque()
        exhausted = False
        while True:
            if alone:
                if not pending:
                    task, attempts = alone.popleft()
                    pending[self._pool.submit(_run_in_worker, task)] = (task, attempts)
            else:
                while len(pending) < 3 * self.workers and (retry or not exhausted):
                    if retry:
                        task, attempts = retry.popleft()
                    else:
                        next_task = next(iterator, None)
                        if next_task is None:
                            exhausted = True
                            break
                        task, attempts = next_task, 0
                    pending[self._pool.submit(_run_in_worker, task)] = (task, attempts)
            if not pending:
                return
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            lost: list[tuple[Task, int]] = []
            for future in done:
                task, attempts = pending.pop(future)
                try:
                    report = future.result()
                except BrokenProcessPool:
                    lost.append((task, attempts))
                    continue
                yield report
            if not lost:
                continue
            wait(pending, timeout=60)  # a broken pool fails every future it holds; some may have finished first
            for future, (task, attempts) in pending.items():
                if future.done() and not future.cancelled() and future.exception() is None:
                    yield future.result()
                else:
                    lost.append((task, attempts))
            pending.clear()
            self._restart()
            for task, attempts in lost:
                if self.restarts > MAX_POOL_RESTARTS:
                    yield _failed(task, f"the worker pool broke {self.restarts} times ({self._deaths_line()})")
                elif attempts == 0:
                    retry.append((task, 1))
                elif attempts == 1:  # lost twice with others: run it alone, to know whether it is the one that kills
                    alone.append((task, 2))
                else:
                    yield _failed(task, f"its worker process died when it ran alone ({self._deaths_line()})")
            if self.restarts > MAX_POOL_RESTARTS:
                for task, _attempts in [*retry, *alone]:
                    yield _failed(task, f"the worker pool broke {self.restarts} times ({self._deaths_line()})")
                return

    def _deaths_line(self) -> str:
        return self.deaths[-1] if self.deaths else "a worker process died"

    def _close_pool(self) -> None:
        """Cancel what has not started and let the workers exit; a worker still inside a task after the grace
        period (a long projection when a time limit or Ctrl-C ends the search) is terminated."""
        closer = threading.Thread(target=self._pool.shutdown, kwargs={"wait": True, "cancel_futures": True})
        closer.daemon = True
        closer.start()
        closer.join(CLOSE_GRACE_S)
        for stop in ("terminate", "kill"):
            if not closer.is_alive():
                return
            for process in self._processes:
                if process.is_alive():
                    getattr(process, stop)()
            closer.join(CLOSE_GRACE_S)

    def close(self) -> None:
        self._close_pool()


class RayExecutor:
    """Tasks as Ray remote calls; the evaluator is put in the object store once."""

    def __init__(self, evaluator: Evaluator, address: str | None = None, num_cpus: int | None = None) -> None:
        ray = import_ray()
        if not ray.is_initialized():
            if address:
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
            else:
                ray.init(num_cpus=num_cpus, ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
        self._ray = ray
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._evaluator_ref = ray.put(evaluator)
        self._remote = ray.remote(_ray_run)

    def run(self, tasks: Iterable[Task]) -> Iterator[TaskReport]:
        ray = self._ray
        pending: list = []
        iterator = iter(tasks)
        exhausted = False
        while True:
            while not exhausted and len(pending) < 3 * self.workers:
                task = next(iterator, None)
                if task is None:
                    exhausted = True
                    break
                pending.append(self._remote.remote(self._evaluator_ref, task))
            if not pending:
                return
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield ray.get(ref)

    def close(self) -> None:
        return None  # the cluster (and a local instance the caller started) outlives the search


_RAY_EVALUATORS: dict[str, Evaluator] = {}


def _ray_run(evaluator: Evaluator, task: Task) -> TaskReport:
    """Runs on a Ray worker; the worker keeps one evaluator (and its caches) per problem."""
    kept = _RAY_EVALUATORS.setdefault(evaluator.problem.key(), evaluator)
    return kept.run(task)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--executor ray needs Ray, which is not installed: install paraplan's 'distributed' extra "
            "(pip install ray) or use --executor local"
        ) from None
    return ray


def make_executor(kind: str, evaluator: Evaluator, workers: int | None = None, address: str | None = None) -> Executor:
    if kind == "serial" or (kind == "local" and workers == 1):
        return SerialExecutor(evaluator)
    if kind == "local":
        return LocalPoolExecutor(evaluator, workers)
    if kind == "ray":
        return RayExecutor(evaluator, address, workers)
    raise ConfigError(f"unknown executor '{kind}': choose local, ray or serial")
