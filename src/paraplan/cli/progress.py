"""Progress of a long command on stderr, never on stdout (where `--json` goes): a rich bar on a terminal, and in a
log or a pipe one plain line every `interval_s` (the first after 5 s at most, once a unit has finished) and one at
the end (none at all for a run done within those first seconds):

    calibrate: 3/21 fits (without NeMo_perf_summary_24.07), 2m10s elapsed, about 13m left

The estimate of the time left assumes the units left take as long as the units done took on average."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from paraplan.progress import StepCallback

INTERVAL_ENV = "PARAPLAN_PROGRESS_INTERVAL_S"
DEFAULT_INTERVAL_S = 15.0
"""Seconds between two progress lines in a log (`$PARAPLAN_PROGRESS_INTERVAL_S` overrides)."""
FIRST_LINE_S = 5.0
"""The first line waits no longer than this, so that a slow start is seen and a quick run prints only its end."""


def duration(seconds: float) -> str:
    """`42s`, `2m10s`, `1h05m`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def progress_line(task: str, unit: str, done: int, total: int, elapsed_s: float, label: str = "") -> str:
    """One line of progress: done/total, the last unit, the time spent and the estimate of the time left."""
    what = f" ({label})" if label else ""
    line = f"{task}: {done}/{total} {unit}{what}, {duration(elapsed_s)} elapsed"
    if 0 < done < total:
        line += f", about {duration(elapsed_s * (total - done) / done)} left"
    return line


def progress_interval_s() -> float:
    try:
        return max(0.0, float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL_S)))
    except ValueError:
        return DEFAULT_INTERVAL_S


class LineProgress:
    """The plain-line reporter (a log, a pipe, `CliRunner`)."""

    def __init__(self, console: Console, task: str, unit: str, interval_s: float) -> None:
        self.console, self.task, self.unit, self.interval_s = console, task, unit, interval_s
        self.started = time.monotonic()
        self.last_line: float | None = None
        self.last_done = 0

    def __call__(self, done: int, total: int, label: str) -> None:
        if done < self.last_done:  # a new phase counts from 0 again (the tuner's seed, then its search)
            self.last_done = 0
        now = time.monotonic()
        wait_s = self.interval_s if self.last_line is not None else min(self.interval_s, FIRST_LINE_S)
        since = now - (self.last_line if self.last_line is not None else self.started)
        finished = done >= total and (self.last_line is not None or now - self.started >= wait_s)
        if done > self.last_done and (since >= wait_s or finished):  # a run quicker than the first line: silent
            text = progress_line(self.task, self.unit, done, total, now - self.started, label)
            self.console.print(escape(text), highlight=False, soft_wrap=True)
            self.last_line, self.last_done = now, done


@contextmanager
def progress_to_stderr(console: Console, task: str, unit: str, enabled: bool = True) -> Iterator[StepCallback]:
    """A `StepCallback` that shows the progress of `task` (counted in `unit`s) on `console` (stderr) while the block
    runs: a bar on a terminal, periodic lines otherwise; nothing when not `enabled`."""
    if not enabled:
        yield lambda done, total, label: None
        return
    if not console.is_terminal:
        yield LineProgress(console, task, unit, progress_interval_s())
        return
    columns = (
        TextColumn(f"{escape(task)} [dim]{{task.description}}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(escape(unit)),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task_id = bar.add_task("", total=None)

        def update(done: int, total: int, label: str) -> None:
            bar.update(task_id, completed=done, total=total, description=escape(label))

        yield update
