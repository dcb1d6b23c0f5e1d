"""`paraplan measure`: time operators and collectives on this machine, as samples that `paraplan fit` reads."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from paraplan.cli.common import console, err_console, fail
from paraplan.cli.progress import progress_to_stderr

Opt = typer.Option


def register(app: typer.Typer) -> None:
    app.command("measure", help="Run torch microbenchmarks and write samples for `paraplan fit`.")(measure_command)


def measure_command(
    out: Annotated[Path, Opt("--out", help="Folder for the samples (operator/ and nccl/ are created in it).")],
    device: Annotated[str, Opt("--device", help="cpu or cuda.")] = "cpu",
    quick: Annotated[
        bool,
        Opt(
            "--quick",
            help="Fewer shapes, 5 timed calls each. On a 2-core CPU: 40 s of CPU time, collectives included; "
            "3 min 20 s of wall time while other jobs kept the cores busy (a busy machine is reported).",
        ),
    ] = False,
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
    done = 0
    try:
        with progress_to_stderr(err_console, "measure", "files") as progress:

            def finished(name: str, _path: Path | None) -> None:
                nonlocal done
                done += 1
                progress(done, total, name)

            paths = run_benchmarks(config, out, on_start=lambda name: progress(done, total, name), on_done=finished)
    except OSError as exc:
        raise fail(f"cannot write samples under {out}: {exc}") from None
    elapsed_s = time.perf_counter() - started
    console.print(
        f"wrote {len(paths)} sample files under {out} in {elapsed_s:.0f} s; next: paraplan fit --samples {out}"
    )
    busy = busy_note(out)
    if busy:
        err_console.print(f"[yellow]warning:[/] {escape(busy)}", highlight=False, soft_wrap=True)


def busy_note(out: Path) -> str | None:
    """What `measure.json` under `out` says of a busy machine (`paraplan.measure.device.MachineLoad`), as a warning."""
    from paraplan.measure.samples import busy_reason

    reason = busy_reason(out / "measure.json")
    if reason is None:
        return None
    return (
        f"the machine was busy while measuring: {reason}; its timings carry other jobs' work (measure again when quiet)"
    )
