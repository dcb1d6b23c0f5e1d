"""`paraplan models` and `paraplan gpus`: the presets and where their numbers come from."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

from paraplan.cli.common import console
from paraplan.cli.tables import Kind, print_whole_table
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
    columns: list[tuple[str, Kind]] = [("name", "name")]
    columns += [(c, "number") for c in ("layers", "hidden", "ffn", "heads", "kv", "head", "experts", "vocab")]
    rows = [
        (
            m.name,
            str(m.num_layers),
            str(m.hidden_size),
            str(m.ffn_hidden_size),
            str(m.num_attention_heads),
            "MLA" if m.is_mla else str(m.kv_groups),
            str(m.qk_head_dim),
            f"{m.num_experts}/{m.moe_router_topk}" if m.is_moe else "-",
            str(m.vocab_size),
        )
        for m in specs
    ]
    print_whole_table(console, "model presets (kv: query groups; head: head dim; experts: count/top-k)", columns, rows)
    _print_sources([(m.name, m.source) for m in specs])


def gpus(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List GPU/system presets."""
    systems = [system_preset(name, 1) for name in gpu_names()]
    if as_json:
        print(json.dumps([{"name": s.gpu.name, **s.gpu.peak_tflops, "hbm_gib": s.gpu.hbm_gib} for s in systems]))
        return
    columns: list[tuple[str, Kind]] = [("name", "name")]
    columns += [(c, "number") for c in ("bf16", "fp8", "fp4", "HBM GiB", "HBM TB/s", "per node", "NVLink", "NIC")]
    rows = [
        (
            s.gpu.name,
            f"{s.gpu.bf16_tflops or s.gpu.fp16_tflops:g}",
            f"{s.gpu.fp8_tflops:g}",
            f"{s.gpu.fp4_tflops:g}",
            f"{s.gpu.hbm_gib:g}",
            f"{s.gpu.hbm_tbps:g}",
            str(s.gpus_per_node),
            f"{s.scale_up_gbps:g}",
            f"{s.nic_gbps:g}",
        )
        for s in systems
    ]
    title = "GPU presets (dense TFLOP/s; per node: GPUs; NVLink: scale-up GB/s per GPU; NIC: Gb/s per GPU)"
    print_whole_table(console, title, columns, rows)
    _print_sources([(s.gpu.name, s.gpu.source) for s in systems])


def _print_sources(sources: list[tuple[str, str]]) -> None:
    """Each preset's source on its own line, below the table: a paragraph in a table column would squeeze the
    names out of an 80-column terminal."""
    console.print("sources:", highlight=False)
    for name, source in sources:
        console.print(f"  {name}: {escape(source)}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("gpus")(gpus)
