"""`paraplan project ... --hybrid [--device cpu|cuda]`: the projection from a real run of the target's layers.

Prints the usual projection, then each breakdown part marked measured or simulated, and what the
downscaling planner cut. Without PyTorch or the device it says why and returns False: the command then
carries on with the operator profiles or the analytic model.
"""

from __future__ import annotations

import json

from rich.markup import escape
from rich.table import Table

from paraplan.cli.common import console, err_console
from paraplan.cli.printers import print_projection, write_trace
from paraplan.measure import device as local_devices
from paraplan.measure.device import HybridUnavailable, detect, is_local_cpu
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec


def default_device(system: SystemSpec) -> str:
    return "cpu" if is_local_cpu(system) else "cuda"


def hybrid_command(
    model: ModelSpec,
    system: SystemSpec,
    train: TrainingSpec,
    *,
    device: str | None,
    cache_path: str | None,
    as_json: bool,
    trace: str | None,
    has_profile: bool,
    trace_max_mib: float | None = None,
) -> bool:
    """Run and print the hybrid projection; False (after a message on stderr) when it cannot run here."""
    fallback = "the fitted operator profiles" if has_profile else "the analytic model"
    if not local_devices.torch_available():
        err_console.print(
            f"[yellow]hybrid:[/] PyTorch is not installed (pip install 'paraplan[measure]'); "
            f"projecting with {fallback} instead",
            highlight=False,
        )
        return False
    from paraplan.measure.hybrid.api import HybridOptions, hybrid_project

    options = HybridOptions(device=device or default_device(system), cache_path=cache_path, record_events=bool(trace))
    try:
        devices = detect(options.device)
        if not as_json:
            console.print(f"[dim]hybrid: measuring on {devices.name} (cached runs are reused)...[/]")
        result = hybrid_project(model, system, train, options)
    except HybridUnavailable as exc:
        err_console.print(f"[yellow]hybrid:[/] {escape(str(exc))}; projecting with {fallback} instead", highlight=False)
        return False
    except RuntimeError as exc:  # the device ran out of memory despite the planner's estimate
        if "out of memory" not in str(exc).lower():
            raise
        first = str(exc).splitlines()[0]
        err_console.print(f"[yellow]hybrid:[/] {escape(first)}; projecting with {fallback} instead", highlight=False)
        return False
    if trace:
        write_trace(result.projection, trace, trace_max_mib)
    if as_json:
        print(json.dumps(result.to_dict(), default=float))
        return True
    print_projection(result.projection, False)
    step = result.projection.step_time_s
    parts = Table(title=f"hybrid: where each part of the step comes from (device: {result.devices.name})")
    for column, justify in (("part", "left"), ("time", "right"), ("share", "right"), ("origin", "left")):
        parts.add_column(column, justify=justify)
    parts.add_column("how", overflow="fold")
    for name, seconds in result.projection.breakdown.items():
        if seconds <= 0:
            continue
        source = result.sources[name]
        colour = "green" if source.origin == "measured" else "cyan"
        parts.add_row(
            name.replace("_", " "),
            f"{seconds * 1e3:,.2f} ms",
            f"{seconds / step:.1%}",
            f"[{colour}]{source.origin}[/]",
            escape(source.detail),
        )
    console.print(parts)
    measured = result.projection.pipeline.measured_fraction
    console.print(f"measured fraction of the compute: {measured:.0%}", highlight=False)
    for line in (*result.plan.explain(), *result.notes):
        console.print(f"  - {escape(line)}", highlight=False, soft_wrap=True)
    if result.comm:
        fit = result.comm
        console.print(
            f"  - network fitted to {fit.source}: {fit.bytes_per_s / 1e9:.2f} GB/s, {fit.latency_s * 1e6:.0f} us",
            highlight=False,
        )
    return True
