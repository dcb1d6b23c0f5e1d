"""The rules of the production knobs: recompute by layer and by module, drop-and-pad MoE, CUDA graphs and CPU
offload (`TrainingSpec` fields of the same names). Each rule is the framework's own assert, cited."""

from __future__ import annotations

from paraplan.specs.model import ModelSpec
from paraplan.specs.schedule import SCHEDULES
from paraplan.specs.training import CUDA_GRAPH_SCOPES, DDP_IMPLS, RECOMPUTE_METHODS, RECOMPUTE_MODULES, TrainingSpec

MOE_MODULES = frozenset({"moe", "moe_act"})


def recompute_problems(model: ModelSpec, train: TrainingSpec) -> list[str]:
    """Megatron's recompute rules (megatron-core 0.16 TransformerConfig.__post_init__) and Primus's layer ids."""
    p: list[str] = []
    granularity = train.recompute_granularity
    if train.recompute_method not in RECOMPUTE_METHODS:
        p.append(f"unknown recompute_method '{train.recompute_method}': choose one of {', '.join(RECOMPUTE_METHODS)}")
    elif train.recompute_method == "uniform" and granularity != "full":
        p.append("recompute_method uniform needs recompute full (selective recompute takes no method)")
    if train.recompute_num_layers is not None and train.recompute_num_layers < 1:
        p.append(f"recompute_num_layers must be >= 1 (got {train.recompute_num_layers})")
    modules = train.recompute_modules
    if modules is not None:
        if granularity != "selective":
            p.append(f"recompute_modules ({', '.join(modules)}) needs recompute selective (got {granularity})")
        unknown = [m for m in modules if m not in RECOMPUTE_MODULES]
        if unknown:
            p.append(f"unknown recompute_modules {', '.join(unknown)}: choose from {', '.join(RECOMPUTE_MODULES)}")
        if MOE_MODULES & set(modules) and not model.is_moe:
            p.append(f"recompute_modules {', '.join(sorted(MOE_MODULES & set(modules)))} needs an MoE model")
        if "shared_experts" in modules and not model.moe_shared_expert_intermediate_size:
            p.append(f"recompute_modules shared_experts needs shared experts ({model.name} has none)")
        if "mla_up_proj" in modules and not model.is_mla:
            p.append("recompute_modules mla_up_proj needs multi-latent attention (Megatron rule)")
    ids = train.recompute_layer_ids
    if ids is not None:
        if granularity != "full":
            p.append(f"recompute_layer_ids needs recompute full (got {granularity})")
        if train.recompute_num_layers is not None:
            p.append("recompute_layer_ids and recompute_num_layers are exclusive: choose one")
        outside = [i for i in ids if not 0 <= i < model.num_layers]
        if outside:
            p.append(f"recompute_layer_ids {outside} outside the model's layers 0..{model.num_layers - 1}")
        if len(set(ids)) != len(ids):
            p.append(f"recompute_layer_ids {list(ids)} repeat a layer")
    return p


def moe_capacity_problems(model: ModelSpec, train: TrainingSpec) -> list[str]:
    """megatron-core 0.16: padding needs a capacity factor (TransformerConfig), and both need experts."""
    p: list[str] = []
    factor = train.moe_expert_capacity_factor
    if factor is not None and factor <= 0:
        p.append(f"moe_expert_capacity_factor must be > 0 (got {factor})")
    if train.moe_pad_expert_input_to_capacity and factor is None:
        p.append("moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor (Megatron rule)")
    if (train.moe_pad_expert_input_to_capacity or factor is not None) and not model.is_moe:
        p.append(f"an expert capacity needs an MoE model ({model.name} has no experts)")
    return p


def graph_and_offload_problems(model: ModelSpec, train: TrainingSpec) -> list[str]:
    """CUDA graph and CPU offload rules (megatron-core 0.16 TransformerConfig.__post_init__, OptimizerConfig)."""
    p: list[str] = []
    if train.cuda_graph_scope not in CUDA_GRAPH_SCOPES:
        p.append(f"unknown cuda_graph_scope '{train.cuda_graph_scope}': choose one of {', '.join(CUDA_GRAPH_SCOPES)}")
    elif train.cuda_graph_scope == "layer" and train.recompute_granularity == "full":
        p.append("full recompute runs under CUDA graphs only with cuda_graph_scope full_iteration (Megatron rule)")
    fraction = train.optimizer_offload_fraction
    if not 0.0 <= fraction <= 1.0:
        p.append(f"optimizer_offload_fraction must be within 0..1 (got {fraction})")
    n = train.cpu_offloading_num_layers
    if n:
        if not 0 < n < model.num_layers:
            p.append(f"cpu_offloading_num_layers {n} must be within 1..{model.num_layers - 1} (Megatron rule)")
        if train.pp > 1:
            p.append(f"activation CPU offloading needs pp 1 (got pp {train.pp}; Megatron rule)")
        if train.recompute_granularity != "none":
            p.append("activation CPU offloading does not work with recompute (Megatron rule)")
        if train.cuda_graph_scope != "none":
            p.append("CUDA graphs are not supported with activation CPU offloading (Megatron rule)")
    elif n < 0:
        p.append(f"cpu_offloading_num_layers must be >= 0 (got {n})")
    return p


def ep_overlap_problems(model: ModelSpec, train: TrainingSpec) -> list[str]:
    """`moe_ep_overlap` (Megatron `--overlap-moe-expert-parallel-comm`): megatron-core 0.15.0
    TransformerConfig.__post_init__ asserts expert parallelism, an alltoall/flex dispatcher (paraplan has no
    other), no full recompute and no recompute layer count, at most one MTP layer, and a virtual pipeline when
    pp > 1 (DualPipe(V) pair every forward with a backward by themselves)."""
    if not train.moe_ep_overlap:
        return []
    p: list[str] = []
    if not model.is_moe:
        p.append(f"moe_ep_overlap needs an MoE model ({model.name} has no experts)")
    elif train.ep < 2:
        p.append(f"moe_ep_overlap needs expert parallelism: ep > 1 (got ep {train.ep}; Megatron rule)")
    spec = SCHEDULES.get(train.pipeline_schedule)
    if spec is not None and not spec.has_ep_overlap_pairs(train.pp):
        p.append(
            f"moe_ep_overlap with pp {train.pp} needs the interleaved schedule (a virtual pipeline) or DualPipe(V): "
            f"{spec.label} has no forward/backward pairs to hide the all-to-all in (Megatron rule)"
        )
    if train.recompute_granularity == "full" or train.recompute_num_layers is not None:
        p.append("moe_ep_overlap does not run with full recompute or recompute_num_layers (Megatron rule)")
    if model.mtp_num_layers > 1:
        p.append(f"moe_ep_overlap takes at most one MTP layer (got {model.mtp_num_layers}; Megatron rule)")
    return p


def bucket_problems(train: TrainingSpec) -> list[str]:
    """megatron-core DistributedDataParallelConfig.bucket_size: a positive parameter count, used by Megatron's own
    DDP (torch FSDP and ZeRO-3 shard per layer instead: they have no such bucket)."""
    p: list[str] = []
    if train.ddp_impl not in DDP_IMPLS:
        p.append(f"unknown ddp_impl '{train.ddp_impl}': choose one of {', '.join(DDP_IMPLS)}")
    size = train.ddp_bucket_size
    if size is None:
        return p
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        p.append(f"ddp_bucket_size must be a positive whole number of parameters (got {size!r})")
    if train.shards_params or train.zero_stage == 2:
        p.append(
            f"ddp_bucket_size applies to Megatron's DDP buckets; FSDP / ZeRO-{max(train.zero_stage, 2)} reduce per "
            "layer unit (unset it)"
        )
    return p


def knob_problems(model: ModelSpec, train: TrainingSpec) -> list[str]:
    return (
        recompute_problems(model, train)
        + moe_capacity_problems(model, train)
        + graph_and_offload_problems(model, train)
        + bucket_problems(train)
        + ep_overlap_problems(model, train)
    )
