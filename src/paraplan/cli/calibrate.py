"""`paraplan calibrate`: refit the named constants with leave-one-source-out cross-validation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.table import Table

from paraplan.cli.common import console, handle_errors
from paraplan.errors import ConfigError
from paraplan.validate.measured import read_rows


def calibrate(
    data: Annotated[str, typer.Option("--data", help="CSV of measured runs (columns of public.csv)")],
    out: Annotated[str | None, typer.Option("--out", help="write the fitted constants (calibration.yaml)")] = None,
    max_evaluations: Annotated[int, typer.Option("--max-evaluations", help="objective evaluations per fit")] = 400,
    no_cv: Annotated[bool, typer.Option("--no-cv", help="fit once on all sources; skip the held-out fits")] = False,
    workers: Annotated[int, typer.Option("--workers", help="processes for the held-out fits")] = 1,
) -> None:
    """Fit GEMM/attention efficiency per GPU family and host/step overheads per framework; print the
    fitted and the leave-one-source-out (held-out) error per source."""
    problems = []  # checked before a fit that takes minutes, not after
    if max_evaluations < 1:
        problems.append(f"--max-evaluations must be >= 1 (got {max_evaluations})")
    if workers < 1:
        problems.append(f"--workers must be >= 1 (got {workers})")
    if out and not Path(out).resolve().parent.is_dir():
        problems.append(f"--out {out}: its folder does not exist")
    if problems:
        raise ConfigError(problems)
    try:
        from paraplan.validate.calibrate import fit, leave_one_source_out, provenance_table, subsample
    except ImportError as exc:  # scipy comes with the [fit] extra
        raise ConfigError(f"calibrate needs scipy (pip install 'paraplan[fit]'): {exc}") from None
    rows = read_rows(data)
    if no_cv:
        result = fit(subsample(rows), max_evaluations)
        table = dict(result.table, source=f"fitted by `paraplan calibrate --no-cv` on {Path(data).name}")
        console.print(f"fitted source-balanced MAPE (subsample): {result.train_mape_pct:.2f}%")
    else:
        cv = leave_one_source_out(rows, max_evaluations, workers)
        table = provenance_table(cv, Path(data).name)
        grid = Table(title="calibration: error per source")
        grid.add_column("source")
        grid.add_column("fitted MAPE %", justify="right")
        grid.add_column("held-out MAPE %", justify="right")
        for source in sorted(cv.held_out):
            grid.add_row(source, f"{cv.fitted.get(source, float('nan')):.1f}", f"{cv.held_out[source]:.1f}")
        grid.add_row("[bold]source-balanced[/]", f"{cv.fitted_mape_pct:.1f}", f"{cv.held_out_mape_pct:.1f}")
        console.print(grid)
        for source, mape in sorted(cv.report_only.items()):
            console.print(f"not fitted (report-only), {source}: step-time MAPE {mape:.1f}%")
        for source, mape in sorted(cv.memory.items()):
            console.print(f"not fitted (memory_gib), {source}: memory MAPE {mape:.1f}%")
    text = yaml.safe_dump(table, sort_keys=True)
    if out:
        Path(out).write_text(text)
        console.print(f"wrote {out}")
    else:
        print(text)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(handle_errors(calibrate))
