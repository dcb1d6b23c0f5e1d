"""One row per placement of a geo plan's JSON, shared by the terminal table and the reports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def placement_row(entry: dict[str, Any], fmt_s: Callable[[float], str]) -> tuple[str, ...]:
    """placement, datacenters, GPUs, layout, flows per link, sharing, step, tokens/s, speed-up vs DP across."""
    plan = entry["plan"]
    if plan is None:
        return (entry["title"], "-", "-", "; ".join(entry["problems"]) or "-", "-", "-", "-", "-", "-")
    speedup = plan["speedup_vs_dp_across"]
    return (
        entry["title"],
        ", ".join(plan["datacenters"]),
        str(plan["gpus"]),
        plan["layout"],
        str(plan["tcp_flows_per_link"]),
        plan["sharing"] or "-",
        fmt_s(plan["step_time_s"]),
        f"{plan['tokens_per_s']:,.0f}",
        f"{speedup:.1f}x" if speedup else "-",
    )
