"""A small discrete-event engine, hand-written on heapq (no simulation framework).

Jobs run on resources (one stream of one rank: compute, pp, dp) in a static FIFO order per resource, and
wait for other jobs: for their end, or for their start plus a delay. A job starts at the first instant it
is at the head of its resource's queue, the resource is free and all its waits are met. Resource -1 means
no stream (the job only waits). Events pop in time order; ties do not change any start time, because a
start is always max(waits met, resource free), whichever event is seen first.
"""

from __future__ import annotations

import heapq

_READY, _END = 0, 1


class EventEngine:
    def __init__(self, n_resources: int) -> None:
        self.duration: list[float] = []
        self.resource: list[int] = []
        self.queues: list[list[int]] = [[] for _ in range(n_resources)]
        self._on_end: list[list[tuple[int, float]]] = []
        self._on_start: list[list[tuple[int, float]]] = []
        self._waits: list[int] = []

    def add(self, resource: int, duration_s: float) -> int:
        """A job queued behind every job added to `resource` before it; returns its id."""
        job = len(self.duration)
        self.duration.append(duration_s)
        self.resource.append(resource)
        self._on_end.append([])
        self._on_start.append([])
        self._waits.append(0)
        if resource >= 0:
            self.queues[resource].append(job)
        return job

    def after(self, job: int, on: int, *, at_start: bool = False, delay_s: float = 0.0) -> None:
        """`job` cannot start before `on` ends (or starts, with at_start) plus `delay_s`."""
        (self._on_start if at_start else self._on_end)[on].append((job, delay_s))
        self._waits[job] += 1

    def run(self) -> tuple[list[float], list[float]]:
        """(start, end) per job; raises RuntimeError if some job can never start (a cycle)."""
        n = len(self.duration)
        waits = list(self._waits)
        earliest = [0.0] * n
        ready = [False] * n
        start = [0.0] * n
        end = [0.0] * n
        head = [0] * len(self.queues)
        busy = [False] * len(self.queues)
        heap: list[tuple[float, int, int, int]] = []
        seq = 0
        for job in range(n):
            if not waits[job]:
                heap.append((0.0, job, _READY, job))
        seq = n
        heapq.heapify(heap)
        done = 0

        def release(deps: list[tuple[int, float]], now: float) -> None:
            nonlocal seq
            for dep, delay in deps:
                t = now + delay
                if t > earliest[dep]:
                    earliest[dep] = t
                waits[dep] -= 1
                if not waits[dep]:
                    seq += 1
                    heapq.heappush(heap, (earliest[dep], seq, _READY, dep))

        def begin(job: int, now: float) -> None:
            nonlocal seq
            res = self.resource[job]
            if res >= 0:
                busy[res] = True
                head[res] += 1
            start[job] = now
            seq += 1
            heapq.heappush(heap, (now + self.duration[job], seq, _END, job))
            release(self._on_start[job], now)

        while heap:
            now, _, kind, job = heapq.heappop(heap)
            res = self.resource[job]
            if kind == _READY:
                ready[job] = True
                if res < 0 or (not busy[res] and self.queues[res][head[res]] == job):
                    begin(job, now)
                continue
            end[job] = now
            done += 1
            if res >= 0:
                busy[res] = False
                queue = self.queues[res]
                if head[res] < len(queue) and ready[queue[head[res]]]:
                    begin(queue[head[res]], now)
            release(self._on_end[job], now)
        if done != n:
            raise RuntimeError(f"event engine stalled: {n - done} of {n} jobs never ran (dependency cycle)")
        return start, end
