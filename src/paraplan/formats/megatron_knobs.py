"""Megatron's production knobs, between argument values (destination names) and `TrainingSpec` fields: drop-and-pad
MoE, CUDA graphs, activation and optimizer CPU offload, the DDP bucket size (megatron-core 0.16 TransformerConfig,
ModelParallelConfig, OptimizerConfig, DistributedDataParallelConfig; the same names in Primus YAML and in NeMo /
Megatron-Bridge model and optimizer configs, whose `ddp:` names the bucket size `bucket_size`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from paraplan.formats.common import Problems
from paraplan.specs.training import TrainingSpec

Label = Callable[[str], str]
RECOMPUTE_LAYER_IDS_GAP = "recompute by layer ids"
LAYER_GRAPH_SCOPES = frozenset({"", "full"})
"""`--cuda-graph-scope` values that capture the whole layer (megatron-core: "full" or an empty list)."""


def split_names(raw: Sequence[str] | str) -> list[str]:
    """A list argument given as a list, as space-separated flags or as one comma-separated string."""
    items = [raw] if isinstance(raw, str) else list(raw)
    return [name.strip() for item in items for name in str(item).split(",") if name.strip()]


def _graph_scope(v: Mapping[str, Any], problems: Problems, label: Label) -> str | None:
    impl = v.get("cuda_graph_impl", "none")
    if v.get("enable_cuda_graph") or v.get("external_cuda_graph"):
        impl = "local" if v.get("enable_cuda_graph") else "transformer_engine"
    if impl == "none":
        if v.get("cuda_graph_scope") not in (None, [], ["full"]):
            problems.note(f"{label('cuda_graph_scope')} is set without {label('cuda_graph_impl')}: no CUDA graphs")
        return None
    scopes = set(split_names(v.get("cuda_graph_scope") or []))
    if "full_iteration" in scopes:
        return "full_iteration"
    partial = scopes - LAYER_GRAPH_SCOPES
    if partial:
        problems.note(
            f"{label('cuda_graph_scope')} {', '.join(sorted(partial))}: projected as the whole layer captured "
            "(paraplan models layer and full-iteration graphs)"
        )
    return "layer"


def knob_fields(v: Mapping[str, Any], problems: Problems, label: Label) -> dict[str, Any]:
    """TrainingSpec fields of the knobs given in `v` (destination -> typed value, None dropped)."""
    train: dict[str, Any] = {}
    if v.get("moe_pad_expert_input_to_capacity"):
        train["moe_pad_expert_input_to_capacity"] = True
    if v.get("moe_expert_capacity_factor") is not None and v.get("num_experts"):
        train["moe_expert_capacity_factor"] = float(v["moe_expert_capacity_factor"])
    scope = _graph_scope(v, problems, label)
    if scope:
        train["cuda_graph_scope"] = scope
    if v.get("cpu_offloading"):
        if v.get("cpu_offloading_weights"):
            problems.note(f"{label('cpu_offloading_weights')}: weight offloading is not modelled")
        if v.get("cpu_offloading_activations", True):
            train["cpu_offloading_num_layers"] = int(v.get("cpu_offloading_num_layers", 0))
    elif v.get("cpu_offloading_num_layers"):
        problems.note(f"{label('cpu_offloading_num_layers')} without {label('cpu_offloading')}: nothing offloaded")
    if v.get("ddp_bucket_size") is not None:
        train["ddp_bucket_size"] = int(v["ddp_bucket_size"])
    if v.get("DDP_impl"):
        train["ddp_impl"] = str(v["DDP_impl"])
    if v.get("optimizer_cpu_offload"):
        train["optimizer_cpu_offload"] = True
        train["optimizer_offload_fraction"] = float(v.get("optimizer_offload_fraction", 1.0))
        if v.get("overlap_cpu_optimizer_d2h_h2d"):
            problems.note(f"{label('overlap_cpu_optimizer_d2h_h2d')}: the host copies are projected unoverlapped")
    return train


def knob_values(train: TrainingSpec) -> dict[str, Any]:
    """Megatron argument values (destination names) of the knobs the spec turns on."""
    out: dict[str, Any] = {}
    if train.moe_pad_expert_input_to_capacity:
        out["moe_pad_expert_input_to_capacity"] = True
    if train.moe_expert_capacity_factor is not None:
        out["moe_expert_capacity_factor"] = train.moe_expert_capacity_factor
    if train.cuda_graph_scope != "none":
        out["cuda_graph_impl"] = "local"  # full_iteration needs the local implementation (megatron-core rule)
        if train.cuda_graph_scope == "full_iteration":
            out["cuda_graph_scope"] = ["full_iteration"]
    if train.cpu_offloading_num_layers:
        out["cpu_offloading"] = True
        out["cpu_offloading_num_layers"] = train.cpu_offloading_num_layers
    if train.ddp_bucket_size is not None:
        out["ddp_bucket_size"] = train.ddp_bucket_size
    if train.ddp_impl != "megatron-core":
        out["DDP_impl"] = train.ddp_impl  # the Megatron-LM releases that had the flag
    if train.optimizer_cpu_offload:
        out["optimizer_cpu_offload"] = True
        out["optimizer_offload_fraction"] = train.optimizer_offload_fraction
    return out
