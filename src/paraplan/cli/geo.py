"""`paraplan geo`: place a training job over several datacenters and fill its bubbles with prefill."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from paraplan.cli import reports
from paraplan.cli.common import check_outputs, console, handle_errors
from paraplan.geo.summary import placement_row

Opt = typer.Option


def _fmt_s(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "-"
    return f"{seconds * 1e3:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def _geo_command(
    config: Annotated[str, Opt("--config", "-c", help="multi-datacenter YAML (see examples/geo/)")],
    as_json: Annotated[bool, Opt("--json", help="print one JSON object")] = False,
    trace: Annotated[str | None, Opt("--trace", help="write a Chrome/Perfetto trace of the Atlas step")] = None,
    html: reports.HtmlOpt = None,
    png: reports.PngOpt = None,
) -> None:
    """Compare DP across, PP across and Atlas placements over datacenters; what-if tables; BubbleTea."""
    check_outputs({"--trace": trace})
    reports.check(html, png)
    from paraplan.geo.config import load_geo_config
    from paraplan.geo.planner import plan_geo

    report = plan_geo(load_geo_config(config), config)
    if trace:
        from paraplan.geo.trace import write_trace

        write_trace(trace, report.atlas.sim, report.geo, report.bubbletea)
    reports.write("geo_report", html, png, report)
    if as_json:
        print(json.dumps(report.to_dict(), default=float))
        return
    _print(report.to_dict())
    if trace:
        console.print(f"trace written to {trace} (open in https://ui.perfetto.dev)")


def _print(d: dict) -> None:
    t = d["training"]
    title = f"{d['model']}: seq {t['seq']}, mbs {t['mbs']}, gbs {t['gbs']}, {t['schedule']}"
    dcs = ", ".join(f"{x['name']} ({x['gpus']} x {x['gpu']})" for x in d["datacenters"])
    links = "; ".join(
        f"{'-'.join(w['between'])}: {w['bandwidth_gbps']:g} Gb/s, RTT {w['rtt_ms']:g} ms, "
        f"{w['per_flow_gbps']:.2f} Gb/s per flow, <= {w['max_flows']} flows (full at {w['saturating_flows']})"
        for w in d["wan"]
    )
    console.print(f"[bold]{title}[/]\ndatacenters: {dcs}\nWAN: {links or 'none'}")

    table = Table(title="placements side by side")
    for col in ("placement", "datacenters", "GPUs", "layout", "flows", "sharing", "step", "tokens/s", "vs DP across"):
        table.add_column(
            col, justify="right" if col in ("GPUs", "flows", "step", "tokens/s", "vs DP across") else "left"
        )
    rows = list(d["placements"].values()) + list(d["with_atlas_flows"].values())
    for i, entry in enumerate(rows):
        if i == len(d["placements"]):
            table.add_section()
        table.add_row(*placement_row(entry, _fmt_s))
    console.print(table)

    atlas = d["placements"]["atlas"]["plan"]
    if atlas:
        parts = Table(title="Atlas step, critical stage")
        parts.add_column("part")
        parts.add_column("time", justify="right")
        for name, seconds in atlas["breakdown_s"].items():
            parts.add_row(name.replace("_", " "), _fmt_s(seconds))
        console.print(parts)

    if d["datacenter_selection"]:
        sel = Table(title="which datacenters to use (Atlas on each connected subset, fastest first)")
        for col in ("datacenters", "GPUs", "step", "tokens/s", "layout"):
            sel.add_column(col)
        for row in d["datacenter_selection"]:
            sel.add_row(
                ", ".join(row["datacenters"]),
                str(row["gpus_available"]),
                _fmt_s(row["step_time_s"]),
                f"{row['tokens_per_s']:,.0f}" if row["tokens_per_s"] else "-",
                row["layout"] or "; ".join(row["problems"]),
            )
        console.print(sel)

    if d["flow_sweep"]:
        flows = Table(title="TCP flows per link (Atlas layout)")
        for col in ("flows", "aggregate Gb/s", "step", "link full"):
            flows.add_column(col, justify="right")
        for row in d["flow_sweep"]:
            agg = ", ".join(f"{v:,.1f}" for v in row["aggregate_gbps"].values()) or "-"
            flows.add_row(str(row["flows"]), agg, _fmt_s(row["step_time_s"]), "yes" if row["saturated"] else "no")
        console.print(flows)

    if d["sharing_sweep"]:
        share = Table(title="spatial vs temporal WAN sharing (Atlas layout, same flows)")
        for col in ("pipelines", "GPUs", "spatial step", "temporal step", "temporal gain"):
            share.add_column(col, justify="right")
        for row in d["sharing_sweep"]:
            share.add_row(
                str(row["pipelines"]),
                str(row["gpus"]),
                _fmt_s(row["spatial_step_s"]),
                _fmt_s(row["temporal_step_s"]),
                f"{row['temporal_gain']:.2f}x",
            )
        console.print(share)

    bt = d["bubbletea"]
    if bt:
        check = bt["no_slowdown_check"]
        verdict = "[green]unchanged[/]" if check["unchanged"] else "[red]SLOWED[/]"
        b = Table(title=f"BubbleTea: prefill in the Atlas bubbles ({bt['stream']})", show_header=False)
        b.add_row("horizon", f"{bt['steps']} steps, {bt['horizon_s']:.1f} s, {bt['prefill_lanes']} prefill lanes")
        b.add_row("requests admitted", f"{bt['admitted']:,} of {bt['requests']:,} ({bt['admitted_fraction']:.1%})")
        b.add_row(
            "GPU utilisation",
            f"{bt['gpu_utilisation_training_only']:.1%} training only -> "
            f"{bt['gpu_utilisation_with_prefill']:.1%} with prefill",
        )
        b.add_row(
            "prefill throughput", f"{bt['prefills_per_s']:,.0f} prompts/s, {bt['prefill_tokens_per_s']:,.0f} tokens/s"
        )
        ttft = bt["ttft_s"]
        b.add_row(
            "time to first token", f"p50 {_fmt_s(ttft['p50'])}, p90 {_fmt_s(ttft['p90'])}, p99 {_fmt_s(ttft['p99'])}"
        )
        b.add_row(
            "training step",
            f"{_fmt_s(check['baseline_step_s'])} -> {_fmt_s(check['worst_step_s'])}: {verdict} (no prefill past the "
            f"next training job on all {check['steps_checked_locally']} steps; {check['steps_resimulated']} "
            "re-simulated with their prefills on the event engine)",
        )
        for line in bt["excluded_stages"]:
            b.add_row("not serving", line)
        console.print(b)


def register(app: typer.Typer) -> None:
    app.command("geo")(handle_errors(_geo_command))
