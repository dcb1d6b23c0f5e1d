"""`paraplan fit`: fit a kernel profile from measured samples (kernel-samples layout, or `paraplan measure`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from paraplan.cli.common import console, err_console, fail

if TYPE_CHECKING:
    from paraplan.measure.analytic import AnalyticError

Opt = typer.Option


def register(app: typer.Typer) -> None:
    app.command("fit", help="Fit a kernel profile (per-operator regressors) from measured samples.")(fit_command)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _analytic(error: AnalyticError | None) -> str:
    return "-" if error is None else f"{_percent(error.mape)} x{error.ratio:.2f}"


def fit_command(
    samples: Annotated[
        Path, Opt("--samples", help="Folder of samples: <System>/operator/*.csv and nccl/*.csv, any depth.")
    ],
    out: Annotated[Path, Opt("--out", help="Profile file to write (JSON).")],
    gpu: Annotated[
        str | None,
        Opt(
            "--gpu",
            help="GPU name in the sample file names (substring), when there are several (default: the only one).",
        ),
    ] = None,
    source: Annotated[
        str | None, Opt("--source", help="Provenance text stored in the profile (default: the samples folder's name).")
    ] = None,
    strict: Annotated[
        bool,
        Opt(
            "--strict",
            help="Exit 2 without writing the profile when it is doubtful: nearly empty (fewer than half the "
            "regressors fitted) or fitted on samples measured on a busy machine.",
        ),
    ] = False,
) -> None:
    try:
        from paraplan.measure.fit import MissingDependency, fit_profile
        from paraplan.measure.samples import SampleError
    except ImportError as exc:  # numpy is a core dependency; anything else missing is an install problem
        raise fail(f"paraplan fit cannot start: {exc}") from None
    if not out.parent.is_dir():
        raise fail(f"output folder does not exist: {out.parent}")
    try:
        with err_console.status("reading samples") as status:
            result = fit_profile(samples, gpu=gpu, source=source, progress=lambda message: status.update(message))
    except (SampleError, MissingDependency) as exc:
        raise fail(str(exc)) from None

    table = Table(title=f"CV MAPE per regressor: {result.profile.gpu} ({result.profile.precision})")
    columns = ("regressor", "chosen", "CV MAPE", "gbm/forest/phys", "analytic", "repeat floor", "n", "dropped")
    for column in columns:
        table.add_column(column, justify="left" if column in ("regressor", "chosen") else "right")
    for report in result.regressors:
        by_family = "/".join(_percent(report.cv_mape_by_family.get(f)) for f in ("gbm", "forest", "physical"))
        chosen = report.family if report.shipped else "[yellow]none[/]"
        table.add_row(
            report.name,
            chosen,
            _percent(report.cv_mape),
            by_family if report.cv_mape_by_family else "-",
            _analytic(report.analytic),
            f"{_percent(report.replicate_mape)} ({report.replicate_rows})" if report.replicate_rows else "-",
            str(report.n_samples),
            str(report.n_dropped),
        )
    console.print(table)
    console.print(
        "repeat floor: over the rows whose features repeat (count in brackets), the error of the median of their "
        "repeats; no regressor of these features can do better on them on average. analytic: the error of "
        "paraplan's analytic cost model (shipped calibration of the GPU's family) on the same samples, and the "
        "median measured/analytic time (above 1: the analytic model is too fast)",
        style="dim",
    )
    for report in result.regressors:
        if not report.shipped:
            console.print(f"not shipped: {report.name}: {report.reason}", style="yellow", highlight=False)

    dropped = Table(title="Outliers dropped, per file and direction")
    for column in ("file", "dir", "rows", "invalid", "B<F", "stat.", "column rejected"):
        dropped.add_column(column, justify="left" if column in ("file", "dir", "column rejected") else "right")
    clean = 0
    for column in result.columns:
        counts = column.counts
        if counts.dropped == 0:
            clean += 1
            continue
        dropped.add_row(
            column.label.split("/")[-1].split("_", 1)[-1].removesuffix(".csv"),
            column.direction,
            str(counts.rows),
            str(counts.invalid),
            str(counts.physics),
            str(counts.statistical),
            counts.reason if counts.rejected else "",
        )
    console.print(dropped)
    total_rows = sum(c.counts.rows for c in result.columns)
    total_dropped = sum(c.counts.dropped for c in result.columns)
    console.print(f"{clean} other columns lost no rows; {total_dropped} of {total_rows} rows dropped in all.")
    for label, reason in result.skipped:
        console.print(f"skipped {label}: {reason}", style="dim")
    if strict and result.warnings:
        raise fail([*result.warnings, f"--strict: {out} not written"])
    try:
        result.profile.save(out)
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc.strerror}") from None
    size_kb = out.stat().st_size / 1024
    shipped = len(result.profile.regressors)
    console.print(f"wrote {out} ({size_kb:,.0f} KiB, {shipped} of {len(result.regressors)} regressors)")
    if shipped == 0:
        err_console.print("[yellow]warning:[/] no regressor passed the fit rule; the profile is empty")
    for warning in result.warnings:  # also in the profile's provenance ("warnings")
        err_console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
