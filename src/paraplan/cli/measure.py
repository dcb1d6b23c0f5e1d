"""`paraplan measure`: time operators and collectives on this machine, as samples that `paraplan fit` reads."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from paraplan.cli.common import console, fail

Opt = typer.Option


def register(app: typer.Typer) -> None:
    app.command("measure", help="Run torch microbenchmarks and write samples for `paraplan fit`.")(measure_command)


def measure_command(
    out: Annotated[Path, Opt("--out", help="Folder for the samples (operator/ and nccl/ are created in it).")],
    device: Annotated[str, Opt("--device", help="cpu or cuda.")] = "cpu",
    quick: Annotated[bool, Opt("--quick", help="A small set of shapes (well under a minute on a laptop CPU).")] = False,
    dtype: Annotated[
        str | None, Opt("--dtype", help="fp32, bf16 or fp16 (default: fp32 on cpu, bf16 on cuda).")
    ] = None,
    threads: Annotated[
        int | None, Opt("--threads", help="CPU threads per process (default: torch's; 1 is steadier on a busy CPU).")
    ] = None,
) -> None:
    if device not in ("cpu", "cuda"):
        raise fail(f"--device must be cpu or cuda (got '{device}')")
    precision = dtype or ("bf16" if device == "cuda" else "fp32")
    from paraplan.measure.bench import DTYPES, BenchConfig, plan_benchmarks, run_benchmarks
    from paraplan.measure.device import cuda_available
    from paraplan.measure.fit import MissingDependency, require

    if precision not in DTYPES:
        raise fail(f"--dtype must be one of {', '.join(DTYPES)} (got '{precision}')")
    try:
        require("torch", "measure")
    except MissingDependency as exc:
        raise fail(str(exc)) from None
    if device == "cuda" and not cuda_available():
        raise fail("--device cuda: no CUDA device is visible to torch")
    if out.exists() and not out.is_dir():
        raise fail(f"--out must be a folder: {out}")
    if threads is not None and threads < 1:
        raise fail(f"--threads must be >= 1 (got {threads})")
    config = BenchConfig(device=device, quick=quick, dtype=precision, threads=threads)
    total = len(plan_benchmarks(config)) + 1  # + the collectives (metadata is written with them)
    started = time.perf_counter()
    columns = (TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console) as progress:
            task = progress.add_task("starting", total=total)
            paths = run_benchmarks(
                config,
                out,
                on_start=lambda name: progress.update(task, description=name),
                on_done=lambda _name, _path: progress.advance(task),
            )
    except OSError as exc:
        raise fail(f"cannot write samples under {out}: {exc}") from None
    elapsed_s = time.perf_counter() - started
    console.print(
        f"wrote {len(paths)} sample files under {out} in {elapsed_s:.0f} s; next: paraplan fit --samples {out}"
    )
