"""Where tasks run: in this process, in a local process pool (the default), or on a Ray cluster.

Every executor takes an iterable of `Task`s and yields their `TaskReport`s as they finish, keeping only a
few tasks in flight so a time limit or Ctrl-C stops the search promptly. Workers build one `Evaluator`
each and keep it (and the core's per-layer caches) for the whole search.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol

from paraplan.errors import ConfigError
from paraplan.tune.evaluate import Evaluator, Task, TaskReport

_WORKER_EVALUATOR: Evaluator | None = None
"""The evaluator of a pool worker process (set once by the pool initializer; never used in the parent)."""


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


def _init_worker(evaluator: Evaluator) -> None:
    global _WORKER_EVALUATOR
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and keeps what was found
    _WORKER_EVALUATOR = evaluator


def _run_in_worker(task: Task) -> TaskReport:
    assert _WORKER_EVALUATOR is not None
    return _WORKER_EVALUATOR.run(task)


def _noop(_: int) -> int:
    return os.getpid()


def _bounded(submit: Any, tasks: Iterable[Task], in_flight: int) -> Iterator[Future]:
    """Yield finished futures while keeping at most `in_flight` submitted."""
    pending: set[Future] = set()
    iterator = iter(tasks)
    exhausted = False
    while True:
        while not exhausted and len(pending) < in_flight:
            task = next(iterator, None)
            if task is None:
                exhausted = True
                break
            pending.add(submit(task))
        if not pending:
            return
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        yield from done


class LocalPoolExecutor:
    """A process pool on this machine (fork: workers inherit the parent's warm caches)."""

    def __init__(self, evaluator: Evaluator, workers: int | None = None) -> None:
        import multiprocessing

        self.workers = max(1, workers or os.cpu_count() or 1)
        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        self._pool = ProcessPoolExecutor(
            max_workers=self.workers, mp_context=context, initializer=_init_worker, initargs=(evaluator,)
        )
        # start every worker now, before any progress-bar thread exists in the parent
        list(self._pool.map(_noop, range(self.workers)))

    def run(self, tasks: Iterable[Task]) -> Iterator[TaskReport]:
        for future in _bounded(lambda t: self._pool.submit(_run_in_worker, t), tasks, 3 * self.workers):
            yield future.result()

    def close(self) -> None:
        """Cancel what has not started; wait for the workers (idle by now, or finishing one task) to exit."""
        self._pool.shutdown(wait=True, cancel_futures=True)


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
