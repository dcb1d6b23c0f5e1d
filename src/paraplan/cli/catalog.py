"""`paraplan models` and `paraplan gpus`: the presets and where their numbers come from."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from paraplan.cli.common import console
from paraplan.specs.presets import gpu_names, model_names, model_preset, system_preset


def models(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List model presets."""
    specs = [model_preset(name) for name in model_names()]
    if as_json:
        print(
            json.dumps(
                [{"name": m.name, "layers": m.num_layers, "hidden": m.hidden_size, "source": m.source} for m in specs]
            )
        )
        return
    table = Table(title="model presets")
    for col in ("name", "layers", "hidden", "ffn", "heads", "kv", "head dim", "experts/top-k", "vocab", "source"):
        table.add_column(col)
    for m in specs:
        moe = f"{m.num_experts}/{m.moe_router_topk}" if m.is_moe else "-"
        kv = "MLA" if m.is_mla else str(m.kv_groups)
        table.add_row(
            m.name,
            str(m.num_layers),
            str(m.hidden_size),
            str(m.ffn_hidden_size),
            str(m.num_attention_heads),
            kv,
            str(m.qk_head_dim),
            moe,
            str(m.vocab_size),
            m.source,
        )
    console.print(table)


def gpus(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List GPU/system presets."""
    systems = [system_preset(name, 1) for name in gpu_names()]
    if as_json:
        print(json.dumps([{"name": s.gpu.name, **s.gpu.peak_tflops, "hbm_gib": s.gpu.hbm_gib} for s in systems]))
        return
    table = Table(title="GPU presets (dense TFLOP/s)")
    for col in (
        "name",
        "bf16",
        "fp8",
        "fp4",
        "HBM GiB",
        "HBM TB/s",
        "GPUs/node",
        "scale-up GB/s",
        "NIC Gb/s",
        "source",
    ):
        table.add_column(col)
    for s in systems:
        g = s.gpu
        table.add_row(
            g.name,
            f"{g.bf16_tflops or g.fp16_tflops:g}",
            f"{g.fp8_tflops:g}",
            f"{g.fp4_tflops:g}",
            f"{g.hbm_gib:g}",
            f"{g.hbm_tbps:g}",
            str(s.gpus_per_node),
            f"{s.scale_up_gbps:g}",
            f"{s.nic_gbps:g}",
            g.source,
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("gpus")(gpus)
