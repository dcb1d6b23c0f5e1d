"""`--html FILE` and `--png FILE` on project, validate, geo and tune: the options and the writing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from paraplan.cli.common import check_outputs, err_console

HtmlOpt = Annotated[
    str | None, typer.Option("--html", help="write a self-contained HTML report (plotly inline: opens offline)")
]
PngOpt = Annotated[str | None, typer.Option("--png", help="write the report's figures as one PNG (matplotlib)")]


def check(html: str | None, png: str | None) -> None:
    """Before any work: an output that cannot be written, or --html/--png without the `report` extra, fail with a
    clear message (exit code 2)."""
    check_outputs({"--html": html, "--png": png})
    if html or png:
        from paraplan.report.extras import require

        require(html, png)


def write(name: str, html: str | None, png: str | None, *args: Any, **kwargs: Any) -> None:
    """Write report `name` ("project_report", ...) with `paraplan.report.html` / `.png`, then say where."""
    if html:
        from paraplan.report import html as html_reports

        builder: Callable[..., Any] = getattr(html_reports, name)
        builder(*args, html, **kwargs)
        err_console.print(f"HTML report written to {html}", highlight=False)
    if png:
        from paraplan.report import png as png_reports

        getattr(png_reports, name)(*args, png, **kwargs)
        err_console.print(f"PNG report written to {png}", highlight=False)


def write_tune(html: str | None, png: str | None, result: Any, top: list[dict[str, Any]]) -> None:
    """The tuning report of a `TuneResult`: every evaluated candidate, and `top` (the JSON top entries)."""
    if not (html or png):
        return
    rows = [
        {
            **e.candidate.to_dict(),
            "step_time_s": e.step_time_s,
            "tokens_per_sec_per_gpu": e.tokens_per_sec_per_gpu,
            "mfu": e.mfu,
            "peak_gib": e.peak_gib,
            "fits": e.fits,
            "source": e.source,
        }
        for e in result.evaluations
    ]
    problem = result.problem
    gpu = problem.systems[0].gpu
    title = (
        f"{problem.model.name} on {'/'.join(map(str, problem.gpu_counts))} x {gpu.name}, "
        f"gbs {problem.gbs}, seq {problem.seq}"
    )
    write(
        "tune_report", html, png, rows, top=top, top_k=max(1, len(top)), title=title,
        capacity_gib=gpu.hbm_gib, elapsed_s=result.elapsed_s,
    )  # fmt: skip
