"""`paraplan validate`: the error against measured runs, per source, always visible."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Annotated

import typer

from paraplan.cli import reports
from paraplan.cli.common import console, err_console, handle_errors, json_text
from paraplan.cli.progress import progress_to_stderr
from paraplan.cli.tables import Kind, print_whole_table
from paraplan.cost.calibration import fitted_table
from paraplan.specs.frameworks import ERAS, MODEL_RECIPES, parse_version
from paraplan.validate.decompose import CellFit, by_source, cell_fits, depth_by_source, depth_fits
from paraplan.validate.measured import read_rows
from paraplan.validate.ranking import order_agreement, summary_line
from paraplan.validate.report import ValidationReport, check_attribute, profile_projector, validate_rows
from paraplan.validate.savers import SAVER_KEY
from paraplan.validate.sources import REPORT_ONLY_SOURCES


def validate(
    data: Annotated[str, typer.Option("--data", help="CSV with the columns of shared/data/measured/public.csv")],
    source: Annotated[
        str | None, typer.Option("--source", help="only rows of this source (default: every source)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    report: Annotated[bool, typer.Option("--report", help="print the per-source table as Markdown (README)")] = False,
    show_rows: Annotated[bool, typer.Option("--rows", help="print every row's error")] = False,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", help="fitted profile for rows on its GPU (auto: the shipped ones) (default: analytic costs)"
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="error analysis: group by source, gpu, arch, model_family, precision, framework, layout, "
            "recompute, sharding, scale or memory (whether the projected peak fits the GPU) (default: no grouping)",
        ),
    ] = None,
    decompose: Annotated[
        bool,
        typer.Option(
            "--decompose",
            help="split the error into its per-step and per-micro-batch parts, over runs that differ only in the "
            "global batch, and the time per micro-batch into its layers and the rest of the stage, over those cells "
            "that differ only in the model's depth (with --rows: every such cell)",
        ),
    ] = False,
    framework_version: Annotated[
        str | None,
        typer.Option(
            "--framework-version",
            help="the framework release whose defaults rows without a source date take: YYYY-MM, YYYY-MM-DD or "
            "YY.MM (default: today's); dated rows keep their own era's",
        ),
    ] = None,
    html: reports.HtmlOpt = None,
    png: reports.PngOpt = None,
) -> None:
    """Project every complete row and compare with the measured value in the row's own metric."""
    reports.check(html, png)
    if by:
        check_attribute(by)  # before the projections: a typo costs no wait
    rows = read_rows(data)
    projector = profile_projector(profile) if profile else None
    day = parse_version(framework_version) if framework_version else None
    with progress_to_stderr(err_console, "validate", "rows") as progress:
        result = validate_rows(rows, source, projector, day, progress)
    title = f"Validation against {Path(data).name}" + (f", source {source}" if source else "")
    reports.write("validate_report", html, png, result, title=title)
    fits = cell_fits(result.rows) if decompose else []
    if as_json:
        out = result.to_dict()
        out["ranking_resolution"] = [b.to_dict() for b in order_agreement(result.rows)]
        if decompose:
            depths = depth_fits(fits)
            out["decomposition"] = {
                "sources": [split.to_dict() for split in by_source(fits)],
                "cells": [fit.to_dict() for fit in fits],
                "depth": {
                    "sources": [split.to_dict() for split in depth_by_source(depths)],
                    "cells": [fit.to_dict() for fit in depths],
                },
            }
        print(json_text(out))
        return
    if report:  # the held-out column belongs to the shipped calibration, not to a profile's projections
        print(markdown_table(result, None if profile else fitted_table().get("held_out_mape_pct")))
        return
    _print(result, show_rows)
    if by:
        columns: list[tuple[str, Kind]] = [(by, "name"), ("rows", "number"), ("MAPE %", "number")]
        columns.append(("mean error %", "number"))
        by_rows = [
            (key, str(stats["n"]), f"{stats['mape_pct']:.1f}", f"{stats['mean_error_pct']:+.1f}")
            for key, stats in result.mape_by(by).items()
        ]
        print_whole_table(console, f"error by {by}", columns, by_rows)
    if decompose:
        _print_decomposition(fits, show_rows)


def _print_decomposition(fits: list[CellFit], show_rows: bool) -> None:
    """step = per-step time + micro-batches x time per micro-batch, measured and projected (validate.decompose)."""
    if not fits:
        console.print("No runs differ only in the global batch: nothing to decompose.")
        return
    if show_rows:
        _print_table(
            "per cell: per-step time and time per micro-batch, measured / projected",
            ("cell", "micro-batches", "per step ms", "per micro-batch ms", "error %"),
            [
                (
                    f.cell,
                    ",".join(map(str, f.microbatches)),
                    f"{1e3 * f.measured_per_step_s:.2f} / {1e3 * f.projected_per_step_s:.2f}",
                    f"{1e3 * f.measured_per_microbatch_s:.2f} / {1e3 * f.projected_per_microbatch_s:.2f}",
                    f"{f.per_microbatch_error_pct:+.1f}",
                )
                for f in fits
            ],
        )
    for s in by_source(fits):
        console.print(
            f"{s.source}: {s.cells} cells ({s.runs} runs) of runs that differ only in the global batch. Time per "
            f"micro-batch: MAPE {s.per_microbatch_mape_pct:.1f}%, mean error {s.per_microbatch_mean_error_pct:+.1f}%. "
            f"Per-step time: mean error {1e3 * s.per_step_mean_error_s:+.2f} ms (absolute "
            f"{1e3 * s.per_step_mean_abs_error_s:.2f} ms), the per-step part being "
            f"{s.measured_per_step_share_pct:.1f}% of the measured steps. Measured steps depart from their line "
            f"by at most {s.worst_measured_residual_pct:.2g}%."
        )
    _print_depth(fits, show_rows)


def _print_table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """The first column (a cell, row id or source) whole, the others wrapped at spaces."""
    kinds: list[tuple[str, Kind]] = [(columns[0], "name"), *((c, "text") for c in columns[1:])]
    print_whole_table(console, title, kinds, rows)


def _print_depth(fits: list[CellFit], show_rows: bool) -> None:
    """per micro-batch = rest of the stage + layers x time per layer, measured and projected (validate.decompose)."""
    depths = depth_fits(fits)
    if show_rows and depths:
        _print_table(
            "per depth cell: time per layer and the rest of the stage, measured / projected",
            ("cell", "layers per rank", "per layer ms", "error %", "rest ms", "error ms"),
            [
                (
                    f.cell,
                    ",".join(map(str, f.layers_per_rank)),
                    f"{1e3 * f.measured_per_layer_s:.2f} / {1e3 * f.projected_per_layer_s:.2f}",
                    f"{f.per_layer_error_pct:+.1f}",
                    f"{1e3 * f.measured_rest_s:.2f} / {1e3 * f.projected_rest_s:.2f}",
                    f"{1e3 * f.rest_error_s:+.2f}",
                )
                for f in depths
            ],
        )
    for s in depth_by_source(depths):
        console.print(
            f"{s.source}: {s.cells} groups of those cells that differ only in the model's depth. Time per layer on "
            f"the busiest rank: MAPE {s.per_layer_mape_pct:.1f}%, mean error {s.per_layer_mean_error_pct:+.1f}%. The "
            f"rest of its stage (embedding, head and loss, per-micro-batch work): mean error "
            f"{1e3 * s.rest_mean_error_s:+.2f} ms (absolute {1e3 * s.rest_mean_abs_error_s:.2f} ms), being "
            f"{s.measured_rest_share_pct:.1f}% of the measured time per micro-batch."
        )


def fastest_gap_lines(result: ValidationReport) -> list[str]:
    """The projected-fastest configuration's gap to the measured fastest over the vTrain groups, as the issue
    groups them (model, GPU, GPU count), fastest by step time and by time per sample (throughput: the groups mix
    global batches), and at a fixed global batch as well."""
    lines = []
    views = (
        (False, False, "groups (by step time)"),
        (False, True, "groups (by time per sample)"),
        (True, False, "groups of one global batch"),
    )
    for fixed_batch, per_sample, label in views:
        gaps = result.fastest_gap_pct("vTrain", fixed_batch=fixed_batch, per_sample=per_sample)
        if gaps:
            over = sum(gap > 3.0 for gap in gaps.values())
            lines.append(
                f"Projected-fastest vs measured-fastest in the {len(gaps)} vTrain {label}: mean gap "
                f"{sum(gaps.values()) / len(gaps):.2f}%, worst {max(gaps.values()):.2f}%, {over} over 3%."
            )
    return lines


def ranking_lines(result: ValidationReport) -> list[str]:
    """Where the projected-fastest lands, and how far apart two projections must be to be ordered right."""
    line = summary_line(order_agreement(result.rows))
    return fastest_gap_lines(result) + ([line] if line else [])


def markdown_table(result: ValidationReport, held_out: dict[str, float] | None = None) -> str:
    """The per-source table of the README; `held_out`: each source's leave-one-source-out MAPE from the
    calibration's cross-validation (calibration.yaml), a column of its own when given. The source-balanced row is
    over the sources the calibration fits; the report-only sources (not fitted) follow it, and the measured memory
    has a table of its own."""
    fitted = result.fitted_per_source()
    held = held_out if held_out and fitted and set(fitted) <= set(held_out) else {}
    lines = [
        "| source | rows | MAPE % |" + (" held-out MAPE % |" if held else ""),
        "|---|---:|---:|" + ("---:|" if held else ""),
    ]
    for name, stats in fitted.items():
        lines.append(f"| {name} | {stats['n']} | {stats['mape_pct']:.1f} |" + (f" {held[name]:.1f} |" if held else ""))
    mean_held = f" **{sum(held[n] for n in fitted) / len(fitted):.2f}** |" if held else ""
    rows = sum(int(v["n"]) for v in fitted.values())
    lines.append(f"| **source-balanced** | {rows} | **{result.fitted_mape_pct:.2f}** |" + mean_held)
    for name, stats in result.report_only_per_source().items():
        lines.append(f"| {name} (not fitted) | {stats['n']} | {stats['mape_pct']:.1f} |" + (" - |" if held else ""))
    lines.append("")
    lines.append(
        f"Kendall tau within (model, GPU, GPU count) groups: {result.kendall_tau():.3f} (all), "
        f"{result.kendall_tau('vTrain'):.3f} (vTrain); at one global batch: "
        f"{result.kendall_tau(fixed_batch=True):.3f} (all), "
        f"{result.kendall_tau('vTrain', fixed_batch=True):.3f} (vTrain)."
    )
    lines += ranking_lines(result)
    lines += report_only_lines(result)
    if result.memory_rows:
        lines += ["", "| memory source (peak per GPU) | rows | MAPE % | mean error % |", "|---|---:|---:|---:|"]
        for name, stats in result.memory_per_source().items():
            lines.append(f"| {name} | {stats['n']} | {stats['mape_pct']:.1f} | {stats['mean_error_pct']:+.1f} |")
    if result.skipped:
        lines.append(f"Rows not projected: {len(result.skipped)} (listed by `paraplan validate --rows`).")
    lines += flagged_lines(result)
    return "\n".join(lines)


def report_only_lines(result: ValidationReport) -> list[str]:
    """The sources scored but never fitted, with why (`paraplan.validate.sources.REPORT_ONLY_SOURCES`)."""
    return [
        f"Not fitted, {name} ({REPORT_ONLY_SOURCES[name]}): MAPE {stats['mape_pct']:.1f}% over {stats['n']} rows."
        for name, stats in result.report_only_per_source().items()
    ]


def _print_memory(result: ValidationReport, show_rows: bool) -> None:
    """Measured peak memory per GPU against the projection's, apart from step time (`paraplan.validate.memory`)."""
    if show_rows and result.memory_rows:
        _print_table(
            "memory per row (GiB): measured / projected",
            ("id", "source", "measured is", "compared with", "measured", "projected", "error %"),
            [
                (
                    r.id,
                    r.source,
                    f"peak {r.reading.quantity}, {r.reading.gpu}",
                    f"projected {r.compared_quantity}, {r.compared}",
                    f"{r.measured_gib:.1f}",
                    f"{r.predicted_gib:.1f}",
                    f"{r.error_pct:+.1f}",
                )
                for r in result.memory_rows
            ],
        )
    if result.memory_rows:
        _print_table(
            "memory error per source (peak per GPU, scored apart from step time)",
            ("source", "rows", "MAPE %", "mean error %"),
            [
                (name, str(stats["n"]), f"{stats['mape_pct']:.1f}", f"{stats['mean_error_pct']:+.1f}")
                for name, stats in result.memory_per_source().items()
            ],
        )


def _print(result: ValidationReport, show_rows: bool) -> None:
    time_rows = bool(result.rows) or not result.memory_rows  # a memory-only selection has no step-time table
    if show_rows:
        if time_rows:
            columns: list[tuple[str, Kind]] = [("id", "name"), ("source", "name"), ("metric", "name")]
            columns += [("measured", "number"), ("predicted", "number"), ("error %", "number")]
            per_row = [
                (r.id, r.source, r.metric, f"{r.measured:.4g}", f"{r.predicted:.4g}", f"{r.error_pct:+.1f}")
                for r in result.rows
            ]
            print_whole_table(console, "per row", columns, per_row)
        print_whole_table(
            console,
            "settings the sources leave out: their framework's defaults (validate/measured.py)",
            [("source", "name"), ("assumed", "text")],
            [(name, "; ".join(items)) for name, items in result.assumed_by_source().items()],
        )
    if time_rows:
        per_source = [
            (name, str(stats["n"]), f"{stats['mape_pct']:.1f}") for name, stats in result.per_source().items()
        ]
        per_source.append(("[bold]source-balanced[/]", str(len(result.rows)), f"[bold]{result.mape_pct:.1f}[/]"))
        if result.report_only_per_source() and result.fitted_per_source():
            rows = sum(int(v["n"]) for v in result.fitted_per_source().values())
            per_source.append(
                ("[bold]source-balanced, fitted sources[/]", str(rows), f"[bold]{result.fitted_mape_pct:.1f}[/]")
            )
        columns = [("source", "name"), ("rows", "number"), ("MAPE %", "number")]
        print_whole_table(console, "error per source", columns, per_source)
        console.print(f"Kendall tau within (model, GPU, GPU count) groups: {result.kendall_tau():.3f}")
        for line in ranking_lines(result) + report_only_lines(result):
            console.print(line)
    _print_memory(result, show_rows)
    for line in era_lines(result) + saver_lines(result):
        console.print(line, highlight=False, markup=False)
    if result.skipped:
        title = f"rows not projected ({len(result.skipped)})"
        print_whole_table(console, title, [("id", "name"), ("reason", "text")], list(result.skipped))
    for line in flagged_lines(result):
        console.print(line, highlight=False, markup=False)


def flagged_lines(result: ValidationReport) -> list[str]:
    """The rows whose notes flag the measurement (`validate.report.SOURCE_FLAG`): their error, outside every MAPE."""
    return [
        f"Flagged by its notes, scored apart (not in any MAPE): {row.id} ({row.source}) error {row.error_pct:+.1f}%: "
        f"{flag}"
        for row, flag in result.flagged
    ]


def saver_lines(result: ValidationReport) -> list[str]:
    """The rows projected with a memory saver their source leaves unstated (`validate.savers`), each with the saver
    and why."""
    return [
        f"Memory saver assumed, {r.id} ({r.source}): {item.why}; assumed {item.value}."
        for r in [*result.rows, *result.memory_rows, *(row for row, _ in result.flagged)]
        for item in r.assumed
        if item.key == SAVER_KEY
    ]


def era_lines(result: ValidationReport) -> list[str]:
    """Per source, the framework release whose defaults filled what it leaves out (`paraplan.specs.frameworks`), and
    every framework name projected as its family: what validate assumed (`--rows` lists each setting)."""
    labels = {era.label for era in ERAS} | {recipe.label for recipe in MODEL_RECIPES}
    eras: dict[str, set[str]] = defaultdict(set)
    mapped: dict[str, set[str]] = defaultdict(set)
    for r in [*result.rows, *result.memory_rows]:
        for item in r.assumed:
            if item.why.split(":")[0] in labels:
                eras[r.source].add(item.why)
            if item.key == "framework" and "not one paraplan knows" in item.why:
                mapped[r.source].add(item.why)
    lines = [f"Framework defaults assumed, {source}: {'; '.join(sorted(eras[source]))}." for source in sorted(eras)]
    lines += [f"Warning, {source}: {'; '.join(sorted(mapped[source]))}." for source in sorted(mapped)]
    return lines


def register(app: typer.Typer) -> None:
    app.command("validate")(handle_errors(validate))
