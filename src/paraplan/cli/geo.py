"""`paraplan geo`: place a training job over several datacenters and fill its bubbles with prefill."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from paraplan.cli import reports
from paraplan.cli.common import check_outputs, console, handle_errors
from paraplan.cli.tables import Kind, print_whole_table
from paraplan.geo.summary import placement_row

Opt = typer.Option


def _fmt_s(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "-"
    return f"{seconds * 1e3:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def _placement_cells(row: tuple[str, ...]) -> tuple[str, ...]:
    """`placement_row` with its flows and sharing in one cell ("64, temporal"): a column fewer for 80 columns."""
    placement, datacenters, gpus, layout, flows, sharing, *rest = row
    wan = flows if sharing in ("-", "") else f"{flows}, {sharing}"
    return (placement, datacenters, gpus, layout, wan, *rest)


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

    placements: list[tuple[str, Kind]] = [("placement", "text"), ("datacenters", "text"), ("GPUs", "number")]
    placements += [("layout", "text"), ("WAN flows", "text"), ("step", "number"), ("tokens/s", "number")]
    placements += [("vs DP", "number")]
    rows = list(d["placements"].values()) + list(d["with_atlas_flows"].values())
    print_whole_table(
        console,
        "placements side by side (WAN flows: TCP flows per link, sharing; vs DP: speed-up over DP across)",
        placements,
        [_placement_cells(placement_row(entry, _fmt_s)) for entry in rows],
        sections=[len(d["placements"])],
    )

    atlas = d["placements"]["atlas"]["plan"]
    if atlas:
        parts = [(name.replace("_", " "), _fmt_s(seconds)) for name, seconds in atlas["breakdown_s"].items()]
        print_whole_table(console, "Atlas step, critical stage", [("part", "text"), ("time", "number")], parts)

    if d["datacenter_selection"]:
        columns: list[tuple[str, Kind]] = [("datacenters", "text"), ("GPUs", "number"), ("step", "number")]
        columns += [("tokens/s", "number"), ("layout", "text")]
        rows_sel = [
            (
                ", ".join(row["datacenters"]),
                str(row["gpus_available"]),
                _fmt_s(row["step_time_s"]),
                f"{row['tokens_per_s']:,.0f}" if row["tokens_per_s"] else "-",
                row["layout"] or "; ".join(row["problems"]),
            )
            for row in d["datacenter_selection"]
        ]
        title = "which datacenters to use (Atlas on each connected subset, fastest first)"
        print_whole_table(console, title, columns, rows_sel)

    if d["flow_sweep"]:
        rows_flow = [
            (
                str(row["flows"]),
                ", ".join(f"{v:,.1f}" for v in row["aggregate_gbps"].values()) or "-",
                _fmt_s(row["step_time_s"]),
                "yes" if row["saturated"] else "no",
            )
            for row in d["flow_sweep"]
        ]
        columns = [("flows", "number"), ("aggregate Gb/s", "text"), ("step", "number"), ("link full", "number")]
        print_whole_table(console, "TCP flows per link (Atlas layout)", columns, rows_flow)

    if d["sharing_sweep"]:
        rows_share = [
            (
                str(row["pipelines"]),
                str(row["gpus"]),
                _fmt_s(row["spatial_step_s"]),
                _fmt_s(row["temporal_step_s"]),
                f"{row['temporal_gain']:.2f}x",
            )
            for row in d["sharing_sweep"]
        ]
        headers = ("pipelines", "GPUs", "spatial step", "temporal step", "temporal gain")
        title = "spatial vs temporal WAN sharing (Atlas layout, same flows)"
        print_whole_table(console, title, [(h, "number") for h in headers], rows_share)

    bt = d["bubbletea"]
    if bt:
        _print_bubbletea(bt)


def _print_bubbletea(bt: dict) -> None:
    check = bt["no_slowdown_check"]
    verdict = "[green]unchanged[/]" if check["unchanged"] else "[red]SLOWED[/]"
    ttft = bt["ttft_s"]
    rows = [
        ("horizon", f"{bt['steps']} steps, {bt['horizon_s']:.1f} s, {bt['prefill_lanes']} prefill lanes"),
        ("requests admitted", f"{bt['admitted']:,} of {bt['requests']:,} ({bt['admitted_fraction']:.1%})"),
        (
            "GPU utilisation",
            f"{bt['gpu_utilisation_training_only']:.1%} training only -> "
            f"{bt['gpu_utilisation_with_prefill']:.1%} with prefill",
        ),
        ("prefill throughput", f"{bt['prefills_per_s']:,.0f} prompts/s, {bt['prefill_tokens_per_s']:,.0f} tokens/s"),
        ("time to first token", f"p50 {_fmt_s(ttft['p50'])}, p90 {_fmt_s(ttft['p90'])}, p99 {_fmt_s(ttft['p99'])}"),
        (
            "training step",
            f"{_fmt_s(check['baseline_step_s'])} -> {_fmt_s(check['worst_step_s'])}: {verdict} (no prefill past the "
            f"next training job on all {check['steps_checked_locally']} steps; {check['steps_resimulated']} "
            "re-simulated with their prefills on the event engine)",
        ),
        *(("not serving", line) for line in bt["excluded_stages"]),
    ]
    title = f"BubbleTea: prefill in the Atlas bubbles ({bt['stream']})"
    print_whole_table(console, title, [("", "name"), ("", "text")], rows, show_header=False)


def register(app: typer.Typer) -> None:
    app.command("geo")(handle_errors(_geo_command))
