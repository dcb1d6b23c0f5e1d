"""Timing on the benchmark device and the statistics kept of the repeats (mean, median and spread).

A step is a sum of many block runs, so its expected time is the sum of the blocks' means: the projection
uses the mean. The median alone would be biased low on a busy CPU, where a run of a few milliseconds
often fits between two preemptions and the preempted runs look like outliers.

CPU: wall time (perf_counter) around the call. CUDA: events recorded on the current stream around the
call, read after a synchronise, so host overhead that the GPU hides is not counted (as in a real run,
where the host runs ahead of the GPU). Pure Python except where a CUDA device is used.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Stats:
    """Repeats of one measurement, in seconds."""

    median_s: float
    min_s: float
    max_s: float
    spread: float  # interquartile range / median
    repeats: int
    mean_s: float = 0.0
    stdev_s: float = 0.0  # run-to-run variation (population standard deviation)

    @classmethod
    def of(cls, samples_s: Sequence[float]) -> Stats:
        values = sorted(samples_s)
        if not values:
            return cls(0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0)
        median = statistics.median(values)
        if len(values) >= 4:
            q1, _, q3 = statistics.quantiles(values, n=4)
        else:
            q1, q3 = values[0], values[-1]
        spread = (q3 - q1) / median if median > 0 else 0.0
        mean, stdev = statistics.fmean(values), statistics.pstdev(values)
        return cls(median, values[0], values[-1], spread, len(values), mean, stdev)

    @property
    def expected_s(self) -> float:
        """The mean (the median for figures recorded without one)."""
        return self.mean_s if self.mean_s > 0 else self.median_s

    def to_dict(self) -> dict[str, float]:
        return {
            "median_s": self.median_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "spread": self.spread,
            "repeats": self.repeats,
            "mean_s": self.mean_s,
            "stdev_s": self.stdev_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Stats:
        return cls(
            float(data["median_s"]),
            float(data["min_s"]),
            float(data["max_s"]),
            float(data["spread"]),
            int(data["repeats"]),
            float(data.get("mean_s", data["median_s"])),
            float(data.get("stdev_s", 0.0)),
        )


class DeviceTimer:
    """Times one call on "cpu" or "cuda"; `elapsed_s(fn)` returns (seconds, fn's result)."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        if self.cuda:
            import torch

            self._torch = torch

    def sync(self) -> None:
        if self.cuda:
            self._torch.cuda.synchronize()

    def elapsed_s(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        if self.cuda:
            torch = self._torch
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            result = fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3, result
        t0 = time.perf_counter()
        result = fn()
        return time.perf_counter() - t0, result
