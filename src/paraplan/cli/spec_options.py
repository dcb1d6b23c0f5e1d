"""Which command-line option sets which spec field: one table per spec, read by every command that builds specs,
so an option cannot be packed under the wrong name (a test checks that every target is a field and that every
option of `paraplan project` is either in a table or declared as not a spec setting)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from typer.models import OptionInfo

from paraplan.specs.training import ALIASES, TrainingSpec

TRAINING_OPTIONS: Mapping[str, str] = MappingProxyType(
    {
        # the short names are the spec's own aliases (`specs.training.ALIASES`), one home for each
        **{name: ALIASES[name] for name in ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "mbs", "gbs", "seq")},
        "recompute": ALIASES["recompute"],
        "recompute_num_layers": "recompute_num_layers",
        "recompute_method": "recompute_method",
        "recompute_modules": "recompute_modules",
        "recompute_layer_ids": "recompute_layer_ids",
        "cuda_graph_scope": "cuda_graph_scope",
        "cpu_offloading_num_layers": "cpu_offloading_num_layers",
        "optimizer_cpu_offload": "optimizer_cpu_offload",
        "expandable_segments": "expandable_segments",
        "optimizer_offload_fraction": "optimizer_offload_fraction",
        "fsdp_float8_all_gather": "fsdp_float8_all_gather",
        "moe_pad_to_capacity": "moe_pad_expert_input_to_capacity",
        "moe_capacity_factor": "moe_expert_capacity_factor",
        "sequence_parallel": "sequence_parallel",
        "distributed_optimizer": "use_distributed_optimizer",
        "zero": "zero_stage",
        "fsdp": "fsdp",
        "overlap_grad_reduce": "overlap_grad_reduce",
        "overlap_param_gather": "overlap_param_gather",
        "ddp_bucket_size": "ddp_bucket_size",
        "tp_comm_overlap": "tp_comm_overlap",
        "tp_async_backward": "tp_async_backward",
        "ep_overlap": "moe_ep_overlap",
        "moe_dispatcher": "moe_token_dispatcher_type",
        "precision": "precision",
        "first_last_layers_bf16": "first_last_layers_bf16",
        "num_layers_at_start_in_bf16": "num_layers_at_start_in_bf16",
        "num_layers_at_end_in_bf16": "num_layers_at_end_in_bf16",
        "fp8_param_gather": "fp8_param_gather",
        "schedule": "pipeline_schedule",
        "attention_backend": "attention_backend",
        "kernel_fusion": "kernel_fusion",
        "cross_entropy_fusion": "cross_entropy_fusion",
        "first_stage_layers": "decoder_first_pipeline_num_layers",
        "last_stage_layers": "decoder_last_pipeline_num_layers",
        "pipeline_layout": "pipeline_layout",
        "account_embedding": "account_for_embedding_in_pipeline_split",
        "account_loss": "account_for_loss_in_pipeline_split",
        "framework": "framework",
    }
)
"""Command parameter -> `TrainingSpec` field."""

MODEL_OPTIONS: Mapping[str, str] = MappingProxyType(
    {
        name: name
        for name in (
            "num_layers",
            "hidden_size",
            "ffn_hidden_size",
            "num_attention_heads",
            "num_query_groups",
            "kv_channels",
            "vocab_size",
            "num_experts",
            "moe_ffn_hidden_size",
            "moe_router_topk",
            "activation",
            "norm",
        )  # fmt: skip
    }
)
"""Command parameter -> `ModelSpec` field."""

SYSTEM_OPTIONS: Mapping[str, str] = MappingProxyType(
    {name: name for name in ("gpus_per_node", "nic_gbps", "scale_up_gbps", "hbm_gib", "hbm_tbps", "bf16_tflops")}
)
"""Command parameter -> `SystemSpec` or `GpuSpec` field."""


def spec_values(
    params: Mapping[str, object], table: Mapping[str, str], only: tuple[str, ...] | None = None
) -> dict[str, object]:
    """The spec fields that a command's parameters set, by `table` (restricted to the parameters in `only`)."""
    names = table if only is None else only
    return {table[name]: params[name] for name in names if name in params}


def show_spec_defaults(fn: Callable[..., Any]) -> None:
    """Append `(default: X)` to the help of each spec option of `fn` left unset (None) on the command line, where
    the help does not say it already: X is the `TrainingSpec` default that then applies, or the preset's value for
    a model or system field (`--help` would otherwise show no default for them)."""
    training = TrainingSpec()
    hints = typing.get_type_hints(fn, include_extras=True)  # the annotations are strings (PEP 563)
    for name, param in inspect.signature(fn).parameters.items():
        infos = [m for m in getattr(hints.get(name), "__metadata__", ()) if isinstance(m, OptionInfo)]
        if not infos or param.default is not None or "default" in (infos[0].help or ""):
            continue
        if name in TRAINING_OPTIONS:
            value = getattr(training, TRAINING_OPTIONS[name])
            if value is None:
                continue
            shown: object = str(value).lower() if isinstance(value, bool) else value
        elif name in SYSTEM_OPTIONS:
            shown = "the GPU preset's"
        elif name in MODEL_OPTIONS:
            shown = "the model preset's"
        else:
            continue
        infos[0].help = f"{infos[0].help or ''} (default: {shown})".strip()
        fn.__annotations__[name] = hints[name]  # evaluated once, so typer reads this OptionInfo
