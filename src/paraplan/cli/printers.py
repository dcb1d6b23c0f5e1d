"""Terminal and file output of a projection, shared by `paraplan project`/`memory` and `paraplan project --hybrid`."""

from __future__ import annotations

import json

from rich.table import Table

from paraplan.cli.common import console, err_console
from paraplan.errors import ConfigError
from paraplan.memory.model import ALLOCATED_PARTS, DEVICE_PARTS, GIB, RESERVED_PARTS
from paraplan.result import Projection
from paraplan.sim.summary import PIPELINE_WIDE_COMM
from paraplan.validate.evidence import evidence_for


def write_trace(result: Projection, path: str, max_mib: float | None = None) -> None:
    """Write the step's Chrome trace, refused over `max_mib` (default `report.trace.DEFAULT_MAX_MIB`); says on
    stderr what it wrote."""
    try:
        from paraplan.report.trace import DEFAULT_MAX_MIB, write_projection_trace
        from paraplan.textfiles import mib_text
    except ImportError:
        raise ConfigError("trace export is not available in this installation") from None
    events, nbytes = write_projection_trace(result, path, DEFAULT_MAX_MIB if max_mib is None else max_mib)
    err_console.print(
        f"wrote {path}: {events:,} events, {mib_text(nbytes)} MiB", markup=False, highlight=False, soft_wrap=True
    )


def fmt_s(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if seconds < 1 else f"{seconds:,.3f} s"


def print_projection(result: Projection, as_json: bool) -> None:
    evidence = evidence_for(result.system.gpu.name)
    if as_json:
        print(json.dumps({**result.to_dict(), "validation": evidence.to_dict()}, default=float))
        return
    t = result.train
    head = Table(title=f"{result.model.name} on {result.system.num_gpus} x {result.system.gpu.name}", show_header=False)
    head.add_row(
        "layout",
        f"tp={t.tp} pp={t.pp} vpp={t.vpp} cp={t.cp} ep={t.ep} dp={t.dp} mbs={t.mbs} gbs={t.gbs} seq={t.seq} "
        f"({t.num_microbatches} micro-batches, {t.pipeline_schedule}, {t.precision}, "
        f"recompute {t.recompute_granularity})",
    )
    head.add_row("step time", fmt_s(result.step_time_s))
    head.add_row("throughput", f"{result.tokens_per_sec_per_gpu:,.0f} tokens/s per GPU")
    head.add_row("model TFLOP/s per GPU", f"{result.tflops_per_gpu:,.1f}")
    peak = f"{result.peak_precision.upper()} dense peak, {result.peak_flops_per_gpu / 1e12:,.0f} TFLOP/s"
    head.add_row("MFU / HFU", f"{result.mfu:.1%} / {result.hfu:.1%} (of the {peak}: the run's math)")
    if result.bf16_peak_flops_per_gpu != result.peak_flops_per_gpu:
        bf16 = f"BF16 dense peak, {result.bf16_peak_flops_per_gpu / 1e12:,.0f} TFLOP/s"
        head.add_row(
            "MFU / HFU (BF16 peak)",
            f"{result.mfu_bf16_peak:.1%} / {result.hfu_bf16_peak:.1%} (of the {bf16}: the published convention)",
        )
    mem = result.memory
    verdict = "[green]FITS[/]" if mem.fits else "[red]OOM[/]"
    head.add_row(
        "memory (peak GPU)",
        f"{mem.peak_gib:,.2f} GiB of {mem.usable_bytes / GIB:,.1f} usable: {verdict} "
        f"(allocated {mem.peak.allocated_bytes / GIB:,.1f}, reserved {mem.peak.reserved_bytes / GIB:,.1f} GiB)",
    )
    head.add_row(f"measured-run error ({evidence.family})", evidence.line())
    console.print(head)
    parts = Table(title="where the step time goes (critical pipeline rank)")
    parts.add_column("part")
    parts.add_column("time", justify="right")
    parts.add_column("share", justify="right")
    for name, seconds in result.breakdown.items():
        if seconds > 0:
            parts.add_row(name.replace("_", " "), fmt_s(seconds), f"{seconds / result.step_time_s:.1%}")
    console.print(parts)
    comm = Table(title="communication: total vs exposed (on the critical path)")
    comm.add_column("kind")
    comm.add_column("total over", justify="left")
    comm.add_column("total", justify="right")
    comm.add_column("exposed", justify="right")
    for kind, total in result.pipeline.comm_total_s.items():
        if total > 0:
            scope = "all pipeline ranks" if kind in PIPELINE_WIDE_COMM else "critical rank"
            comm.add_row(kind, scope, fmt_s(total), fmt_s(result.pipeline.comm_exposed_s.get(kind, 0.0)))
    console.print(comm)
    if result.collectives:
        sources = Table(title="collectives: measured or modelled")
        for column in ("axis", "collective", "source", "why / regressor", "time"):
            sources.add_column(column, justify="right" if column == "time" else "left")
        for c in result.collectives:
            sources.add_row(c.axis, c.collective, "measured" if c.measured else "modelled", c.detail, fmt_s(c.time_s))
        console.print(sources)
    print_memory(result, False)


def print_memory(result: Projection, as_json: bool) -> None:
    mem = result.memory
    if as_json:
        print(json.dumps({"memory": mem.to_dict(), "model": result.model.name, "num_gpus": result.system.num_gpus}))
        return
    peak = mem.peak
    table = Table(title=f"memory per GPU (peak on pipeline rank {peak.rank})")
    table.add_column("part")
    table.add_column("GiB", justify="right")
    # the three nested quantities (`memory.model`): the tensors, then what the caching allocator adds, then what
    # lives outside it
    groups = (
        (ALLOCATED_PARTS, "peak allocated (tensors at the worst moment)", peak.allocated_bytes),
        (RESERVED_PARTS, "peak reserved (+ what the caching allocator holds idle)", peak.reserved_bytes),
        (DEVICE_PARTS, "on the device (+ CUDA context and NCCL)", peak.total_bytes),
    )
    for names, label, subtotal in groups:
        for name in names:
            nbytes = peak.parts.get(name, 0.0)
            if nbytes:
                table.add_row(name.replace("_", " "), f"{nbytes / GIB:,.2f}")
            elif name == "allocator_fragmentation" and mem.expandable_segments:
                table.add_row("allocator fragmentation (none: expandable segments)", f"{nbytes / GIB:,.2f}")
        table.add_row(f"[bold]{label}[/]", f"[bold]{subtotal / GIB:,.2f}[/]")
    verdict = "[green]FITS[/]" if mem.fits else "[red]OOM[/]"
    left = mem.headroom_bytes / GIB
    closeness = f"{left:,.2f} GiB left" if left >= 0 else f"{-left:,.2f} GiB over"
    table.add_row(
        f"capacity {mem.capacity_bytes / GIB:,.0f} GiB, {mem.headroom:.0%} kept free: usable "
        f"{mem.usable_bytes / GIB:,.1f} GiB ({peak.total_bytes / mem.usable_bytes:.0%} used)",
        f"{verdict}, {closeness}",
    )
    console.print(table)
