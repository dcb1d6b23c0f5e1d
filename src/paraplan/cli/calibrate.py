"""`paraplan calibrate`: refit the named constants with leave-one-source-out cross-validation."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml

from paraplan.cli.common import console, err_console, handle_errors
from paraplan.cli.progress import progress_to_stderr
from paraplan.cli.tables import Kind, print_whole_table
from paraplan.errors import ConfigError
from paraplan.specs.frameworks import parse_version
from paraplan.validate.measured import read_rows
from paraplan.validate.sources import GENERALIZATION_SPLITS

if TYPE_CHECKING:
    from paraplan.validate.calibrate import SplitScores


def calibrate(
    data: Annotated[str, typer.Option("--data", help="CSV of measured runs (columns of public.csv)")],
    out: Annotated[
        str | None, typer.Option("--out", help="write the fitted constants (calibration.yaml) (default: print them)")
    ] = None,
    max_evaluations: Annotated[int, typer.Option("--max-evaluations", help="objective evaluations per fit")] = 400,
    no_cv: Annotated[bool, typer.Option("--no-cv", help="fit once on all sources; skip the held-out fits")] = False,
    splits_only: Annotated[
        bool,
        typer.Option(
            "--splits-only",
            help="score the generalization splits only: no leave-one-source-out and no fit on every source, so "
            "nothing to write (the quick check of how a change generalizes: --splits forward takes one fit)",
        ),
    ] = False,
    workers: Annotated[int, typer.Option("--workers", help="processes for the held-out fits")] = 1,
    splits: Annotated[
        str,
        typer.Option(
            "--splits",
            help="generalization splits beside leave-one-source-out, comma-separated: gpu_generation, framework, "
            "forward (fit on releases before --forward-from, score the later ones); 'none' for none",
        ),
    ] = "gpu_generation,framework,forward",
    forward_from: Annotated[
        str | None,
        typer.Option("--forward-from", help="the forward split's first release (YYYY-MM or YY.MM) (default: 2026-01)"),
    ] = None,
) -> None:
    """Fit GEMM/attention efficiency per GPU family and host/step overheads per framework; print the
    fitted and the leave-one-source-out (held-out) error per source, and the error of each generalization split
    (a GPU generation, a framework, the later releases held out of the fit)."""
    problems = []  # checked before a fit that takes minutes, not after
    if max_evaluations < 1:
        problems.append(f"--max-evaluations must be >= 1 (got {max_evaluations})")
    if workers < 1:
        problems.append(f"--workers must be >= 1 (got {workers})")
    if out and not Path(out).resolve().parent.is_dir():
        problems.append(f"--out {out}: its folder does not exist")
    chosen = [] if splits.strip() == "none" else [s.strip() for s in splits.split(",") if s.strip()]
    problems += [f"--splits: unknown split '{s}' (choose from {', '.join(GENERALIZATION_SPLITS)})" for s in chosen
                 if s not in GENERALIZATION_SPLITS]  # fmt: skip
    if splits_only:
        conflicts = {
            "--no-cv": (no_cv, "--no-cv skips the held-out fits that --splits-only runs"),
            "--out": (bool(out), "--splits-only fits no table on every source to write"),
            "--splits none": (not chosen, "no split to score"),
        }
        problems += [f"--splits-only with {flag}: {why}" for flag, (given, why) in conflicts.items() if given]
    day = None
    if forward_from:
        try:
            day = parse_version(forward_from)
        except ConfigError as exc:
            problems.extend(f"--forward-from: {p}" for p in exc.problems)
    if problems:
        raise ConfigError(problems)
    try:
        from paraplan.validate.calibrate import (
            FORWARD_FROM,
            calibration_counter,
            fit,
            fitted_constants,
            generalization_splits,
            leave_one_source_out,
            provenance_table,
            subsample,
        )
    except ImportError as exc:  # scipy comes with the [fit] extra
        raise ConfigError(f"calibrate needs scipy (pip install 'paraplan[fit]'): {exc}") from None
    rows = read_rows(data)
    if splits_only:
        with progress_to_stderr(err_console, "calibrate", "fits") as progress:
            scores = generalization_splits(rows, chosen, max_evaluations, workers, day or FORWARD_FROM, progress)
        _print_splits(scores)
        return
    if no_cv:
        with progress_to_stderr(err_console, "calibrate", "block searches") as progress:
            result = fit(subsample(rows), max_evaluations, progress)
        table = dict(result.table, source=f"fitted by `paraplan calibrate --no-cv` on {Path(data).name}")
        console.print(f"fitted source-balanced MAPE (subsample): {result.train_mape_pct:.2f}%")
    else:
        with progress_to_stderr(err_console, "calibrate", "fits") as progress:
            counter = calibration_counter(rows, chosen, max_evaluations, day or FORWARD_FROM, progress)
            cv = leave_one_source_out(rows, max_evaluations, workers, counter=counter)
            scores = generalization_splits(rows, chosen, max_evaluations, workers, day or FORWARD_FROM, counter=counter)
        table = provenance_table(cv, Path(data).name, scores)
        per_source = [
            (source, f"{cv.fitted.get(source, float('nan')):.1f}", f"{cv.held_out[source]:.1f}")
            for source in sorted(cv.held_out)
        ]
        per_source.append(("[bold]source-balanced[/]", f"{cv.fitted_mape_pct:.1f}", f"{cv.held_out_mape_pct:.1f}"))
        columns: list[tuple[str, Kind]] = [("source", "name"), ("fitted MAPE %", "number")]
        columns.append(("held-out MAPE %", "number"))
        print_whole_table(console, "calibration: error per source", columns, per_source)
        for source, mape in sorted(cv.report_only.items()):
            console.print(f"not fitted (report-only), {source}: step-time MAPE {mape:.1f}%")
        for source, mape in sorted(cv.memory.items()):
            console.print(f"not fitted (memory_gib), {source}: memory MAPE {mape:.1f}%")
        _print_splits(scores)
    counts = fitted_constants(table)
    console.print(
        f"constants fitted: {counts['total']} ({counts['family']} per GPU family, {counts['framework']} per framework; "
        "every other constant keeps its documented default)"
    )
    text = yaml.safe_dump(table, sort_keys=True)
    if out:
        Path(out).write_text(text)
        console.print(f"wrote {out}")
    else:
        print(text)


def _print_splits(scores: dict[str, SplitScores]) -> None:
    """One table per generalization split: each held-out group's source-balanced MAPE and its sources'."""
    for split, result in scores.items():
        groups = [
            (
                group,
                f"{result.group_mape_pct(group):.1f}",
                ", ".join(f"{s} {v['mape_pct']:.1f}" for s, v in sorted(result.held_out[group].items())),
            )
            for group in sorted(result.held_out)
        ]
        title = f"held out by {split}: source-balanced MAPE {result.mape_pct:.1f}%"
        kinds: list[tuple[str, Kind]] = [("held-out group", "name"), ("MAPE %", "number")]
        print_whole_table(console, title, [*kinds, ("per source (MAPE %)", "text")], groups)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(handle_errors(calibrate))
