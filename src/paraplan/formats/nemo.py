"""NeMo recipes exported as YAML, in both shapes in use:

- Megatron-Bridge `ConfigContainer` (NeMo Framework from 25.09; `ConfigContainer.to_yaml()` and the override
  files its recipe scripts take): sections `model` (a GPT provider: shape, parallelism, recompute, fp8),
  `train`, `optimizer`, `ddp`, `mixed_precision`, `comm_overlap`, `dataset`, `tokenizer`.
- NeMo 2.0 `nemo_run` recipe (`llm.pretrain`): `trainer` (`devices`, `num_nodes`, `strategy` with the
  parallel sizes, `plugins` with the precision), `model.config`, `data`, `optim`.

Keys are Megatron-core `TransformerConfig` / `DistributedDataParallelConfig` names. The same setting in two
places with different values (`ddp` vs `optimizer` distributed optimizer, `dataset` vs `model` sequence
length) is an error. Dumps list every field, so only unknown keys that look like plan settings are errors.
The writer emits the Megatron-Bridge shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from paraplan.formats.common import (
    PRECISION_TO_FP8_RECIPE,
    Problems,
    ReadConfig,
    finish_gaps,
    header_lines,
    load_text,
    load_yaml_mapping,
    suggest,
)
from paraplan.formats.megatron_args import BF16_LAYER_DESTS, BY_DEST, FP8_DETAIL_DESTS, MOE_DETAIL_DESTS
from paraplan.formats.megatron_knobs import knob_values
from paraplan.formats.megatron_layout import format_layer_pattern, format_pipeline_layout
from paraplan.formats.megatron_map import (
    DSA_DESTS,
    GDN_DESTS,
    MAMBA_DESTS,
    local_attention_values,
    pattern_with_stages,
    position_embedding_type,
    specs_from_megatron,
    typed_value,
)
from paraplan.graph.partition import chunks_per_rank
from paraplan.specs.frameworks import NEMO_QUANTIZED_PARAM_PRECISIONS
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import LOW_PRECISIONS, TrainingSpec
from paraplan.specs.validate import resolve_dp

# Megatron-core name -> Megatron-LM argument destination (where they differ).
MCORE_TO_ARG: Mapping[str, str] = {
    "num_moe_experts": "num_experts",
    "num_layers_in_first_pipeline_stage": "decoder_first_pipeline_num_layers",
    "num_layers_in_last_pipeline_stage": "decoder_last_pipeline_num_layers",
    "virtual_pipeline_model_parallel_size": "num_virtual_stages_per_pipeline_rank",
    "use_custom_fsdp": "use_megatron_fsdp",
    "bucket_size": "ddp_bucket_size",  # DistributedDataParallelConfig.bucket_size (Megatron-Bridge `ddp:`)
    # quantised primary weights: megatron-core TransformerConfig.fp8_param / fp4_param (Megatron-Bridge keeps them in
    # sync with `fp8_param_gather` / `fp4_param_gather`), NeMo 2 MegatronMixedPrecision's `fp8_params`
    "fp8_param": "fp8_param_gather",
    "fp8_params": "fp8_param_gather",
    "fp4_param": "fp4_param_gather",
}
SAME_NAME = frozenset(
    (
        "num_layers hidden_size ffn_hidden_size num_attention_heads kv_channels vocab_size seq_length normalization "
        "position_embedding_type add_bias_linear add_qkv_bias hidden_dropout attention_dropout moe_ffn_hidden_size "
        "yarn_rotary_scaling_factor activation_func_clamp_value "
        "moe_router_topk moe_shared_expert_intermediate_size moe_expert_capacity_factor multi_latent_attention "
        "q_lora_rank kv_lora_rank qk_head_dim qk_pos_emb_head_dim v_head_dim mtp_num_layers "
        "make_vocab_size_divisible_by tensor_model_parallel_size pipeline_model_parallel_size context_parallel_size "
        "expert_model_parallel_size expert_tensor_parallel_size sequence_parallel "
        "account_for_embedding_in_pipeline_split account_for_loss_in_pipeline_split pipeline_model_parallel_layout "
        "recompute_granularity recompute_method recompute_num_layers recompute_modules fp8 fp8_recipe fp8_margin "
        "fp8_interval fp8_amax_history_len "
        "fp8_amax_compute_algo fp8_wgrad fp8_param_gather first_last_layers_bf16 num_layers_at_start_in_bf16 "
        "num_layers_at_end_in_bf16 fp4 fp4_recipe fp4_param_gather bf16 fp16 tp_comm_overlap "
        "overlap_moe_expert_parallel_comm "
        "attention_backend cp_comm_type global_batch_size micro_batch_size use_distributed_optimizer "
        "overlap_grad_reduce overlap_param_gather use_megatron_fsdp data_parallel_sharding_strategy "
        "cross_entropy_loss_fusion moe_token_dispatcher_type moe_flex_dispatcher_backend "
        # hybrid and linear/sparse-attention models (megatron-core 0.19.2 TransformerConfig names)
        "hybrid_layer_pattern hybrid_override_pattern mamba_state_dim mamba_head_dim mamba_num_groups mamba_num_heads "
        "experimental_attention_variant linear_attention_freq linear_conv_kernel_dim linear_key_head_dim "
        "linear_value_head_dim linear_num_key_heads linear_num_value_heads attention_output_gate "
        "dsa_indexer_n_heads dsa_indexer_head_dim dsa_indexer_topk "
        # sliding window, NoPE layers, attention sinks (megatron-core 0.16.1 TransformerConfig names)
        "window_size window_attn_skip_freq no_rope_freq softmax_type "
        # production knobs (megatron-core 0.16 TransformerConfig / ModelParallelConfig / OptimizerConfig names)
        "moe_pad_expert_input_to_capacity cuda_graph_impl cuda_graph_scope enable_cuda_graph external_cuda_graph "
        "cpu_offloading cpu_offloading_num_layers cpu_offloading_activations cpu_offloading_weights "
        "optimizer_cpu_offload optimizer_offload_fraction overlap_cpu_optimizer_d2h_h2d "
        "use_precision_aware_optimizer main_params_dtype main_grads_dtype exp_avg_dtype exp_avg_sq_dtype"
    ).split()
)
# Megatron-Bridge's Llama 4 provider fields (Llama4ModelProvider at dc805f5c, llama_provider.py): chunked attention
# has no Megatron-core field, and the provider names its NoPE interval `nope_layer_interval`.
LLAMA4_KEYS = frozenset({"attention_chunk_size", "nope_layer_interval"})
OPTIMIZER_OFFLOAD_KEYS = frozenset(
    (
        "optimizer_cpu_offload optimizer_offload_fraction overlap_cpu_optimizer_d2h_h2d "
        "use_precision_aware_optimizer main_params_dtype main_grads_dtype exp_avg_dtype exp_avg_sq_dtype"
    ).split()
)
"""Megatron-core OptimizerConfig's CPU offload and precision-aware fields (Megatron-Bridge `optimizer:`, NeMo 2
`optim.config`)."""
OPTIMIZER_KEYS = frozenset({"use_distributed_optimizer", "optimizer"}) | OPTIMIZER_OFFLOAD_KEYS
# Handled apart from the table above.
SPECIAL = frozenset(
    {
        "activation_func",
        "gated_linear_unit",
        "share_embeddings_and_output_weights",
        "num_query_groups",
        "moe_layer_freq",
        "grad_reduce_in_fp32",
    }
)
# Set at run time from `mixed_precision` / the precision plugin and `comm_overlap`, so a model section's own
# copies are not read when those are present.
PRECISION_KEYS = frozenset({"bf16", "fp16", "fp8", "fp8_recipe", "fp4", "fp4_recipe"})
QUANTIZED_PARAM_KEYS = frozenset({"fp8_param_gather", "fp4_param_gather", "fp8_param", "fp8_params", "fp4_param"})
"""Megatron-Bridge MixedPrecisionConfig / NeMo 2 MegatronMixedPrecision fields for quantised primary weights
(`TrainingSpec.fp8_param_gather`), also DistributedDataParallelConfig's (`ddp.fp8_param_gather`), which the
mixed-precision config overwrites (megatron-bridge 0.3.0 training/mixed_precision.py
`update_config_with_precision_overrides`)."""

ALL_KEYS = SAME_NAME | SPECIAL | LLAMA4_KEYS | frozenset(MCORE_TO_ARG)
_LOOKS_RELEVANT = re.compile(
    r"paral+el_size|batch_size|recompute|^fp8|^fp4|^moe_(ffn|router_topk|shared|layer)|num_moe|num_layers|"
    r"hidden_size|attention_heads|seq_length|vocab_size|lora|overlap|fsdp|sharding"
)
# Megatron-Bridge mixed-precision recipe names (megatron.bridge.training.mixed_precision) -> precision.
BRIDGE_PRECISION: Mapping[str, str] = {
    "bf16_mixed": "bf16",
    "fp16_mixed": "fp16",
    "bf16_with_fp8_delayed_scaling_mixed": "fp8",
    "bf16_with_fp8_current_scaling_mixed": "fp8_cs",
    "bf16_with_fp8_subchannel_scaling_mixed": "fp8_blockwise",
    "bf16_with_mxfp8_mixed": "mxfp8",
    "bf16_with_nvfp4_mixed": "nvfp4",
}
PRECISION_BRIDGE = {v: k for k, v in BRIDGE_PRECISION.items()}
ACTIVATIONS: Mapping[str, str] = {
    "silu": "silu",
    "gelu": "gelu",
    "fast_gelu": "gelu",
    "openai_gelu": "gelu",
    "squared_relu": "squared_relu",
    "relu": "relu",
}
ACTIVATION_TARGET = {
    "swiglu": "torch.nn.functional.silu",
    "geglu": "torch.nn.functional.gelu",
    "gelu": "torch.nn.functional.gelu",
    "relu": "torch.nn.functional.relu",
    "squared_relu": "megatron.core.activations.squared_relu",
}


class _Settings:
    """Megatron-core settings gathered from several places, with where each came from."""

    def __init__(self, problems: Problems) -> None:
        self.problems = problems
        self.values: dict[str, Any] = {}
        self.where: dict[str, str] = {}

    def put(self, key: str, value: Any, where: str) -> None:
        if value is None:
            return
        if key in self.values and self.values[key] != value:
            self.problems.add(
                f"{self.where[key]} is {self.values[key]!r} but {where} is {value!r}: the same setting twice"
            )
            return
        self.values.setdefault(key, value)
        self.where.setdefault(key, where)

    def section(
        self, body: Any, where: str, keys: frozenset[str] | None = None, skip: frozenset[str] = frozenset()
    ) -> None:
        """The given keys of a mapping, or (keys None) every known key, reporting unknown keys that look
        like plan settings."""
        if not isinstance(body, Mapping):
            return
        for key, value in body.items():
            if key.startswith("_") or key in skip:
                continue
            if key in (ALL_KEYS if keys is None else keys):
                self.put(key, value, f"{where}.{key}")
            elif keys is None and _LOOKS_RELEVANT.search(key):
                self.problems.add(f"{where}: unknown key '{key}'{suggest(key, ALL_KEYS)}")


def _target_name(value: Any) -> str:
    if isinstance(value, Mapping):
        value = value.get("_target_", "")
    return str(value).rsplit(".", 1)[-1]


def _precision_from(value: Any, settings: _Settings, where: str) -> None:
    """A Bridge recipe name / NeMo 2 plugin string, or a mapping of precision fields."""
    if isinstance(value, Mapping):
        settings.section(value, where, PRECISION_KEYS | frozenset(BF16_LAYER_DESTS) | QUANTIZED_PARAM_KEYS)
        precision = value.get("precision")
        if precision is not None:
            _precision_from(precision, settings, f"{where}.precision")
        return
    if value is None:
        return
    name = str(value)
    if name in BRIDGE_PRECISION:
        precision = BRIDGE_PRECISION[name]
        settings.put("fp16" if precision == "fp16" else "bf16", True, where)
        if precision in PRECISION_TO_FP8_RECIPE:
            settings.put("fp8", "hybrid", where)
            settings.put("fp8_recipe", PRECISION_TO_FP8_RECIPE[precision], where)
        if precision in NEMO_QUANTIZED_PARAM_PRECISIONS and not QUANTIZED_PARAM_KEYS & settings.values.keys():
            settings.put("fp8_param_gather", True, where)  # the recipe's, unless the config states it
        elif precision == "nvfp4":
            settings.put("fp4", "e2m1", where)
    elif name in ("bf16-mixed", "bf16", "bf16-true"):
        settings.put("bf16", True, where)
    elif name in ("16-mixed", "fp16", "16"):
        settings.put("fp16", True, where)
    else:
        settings.problems.add(f"{where}: precision '{name}' is not one paraplan models (bf16, fp16, fp8, fp4)")


def _from_bridge(doc: Mapping[str, Any], s: _Settings) -> None:
    skip = (PRECISION_KEYS if doc.get("mixed_precision") is not None else frozenset()) | (
        {"tp_comm_overlap"} if doc.get("comm_overlap") else frozenset()
    )
    s.section(doc.get("model"), "model", skip=skip)
    s.section(doc.get("train"), "train", frozenset({"global_batch_size", "micro_batch_size"}))
    s.section(doc.get("optimizer"), "optimizer", OPTIMIZER_KEYS)
    s.section(doc.get("ddp"), "ddp")
    s.section(doc.get("comm_overlap"), "comm_overlap", frozenset({"tp_comm_overlap"}))
    _precision_from(doc.get("mixed_precision"), s, "mixed_precision")
    dataset = doc.get("dataset") or {}
    if isinstance(dataset, Mapping):
        s.put("seq_length", dataset.get("sequence_length", dataset.get("seq_length")), "dataset.sequence_length")
    tokenizer = doc.get("tokenizer") or {}
    if isinstance(tokenizer, Mapping):
        s.put("tokenizer_model", tokenizer.get("tokenizer_model"), "tokenizer.tokenizer_model")


def _from_nemo2(doc: Mapping[str, Any], s: _Settings) -> tuple[int | None, int | None]:
    trainer = doc.get("trainer") or {}
    strategy = trainer.get("strategy") or {}
    parallel = frozenset(k for k in SAME_NAME | frozenset(MCORE_TO_ARG) if "parallel" in k or "pipeline" in k) | {
        "sequence_parallel",
        "use_distributed_optimizer",
    }
    s.section(strategy, "trainer.strategy", parallel)
    ddp = strategy.get("ddp") if isinstance(strategy, Mapping) else None
    if isinstance(ddp, Mapping):
        s.section(ddp, "trainer.strategy.ddp")
    fsdp = strategy.get("fsdp") if isinstance(strategy, Mapping) else None
    if fsdp == "megatron":
        s.put("use_megatron_fsdp", True, "trainer.strategy.fsdp")
        s.put("data_parallel_sharding_strategy", "optim_grads_params", "trainer.strategy.fsdp")
    elif fsdp == "pytorch":
        s.put("use_torch_fsdp2", True, "trainer.strategy.fsdp")
    plugins = trainer.get("plugins")
    for i, plugin in enumerate(plugins if isinstance(plugins, list) else [plugins]):
        _precision_from(plugin, s, f"trainer.plugins[{i}]" if isinstance(plugins, list) else "trainer.plugins")
    for i, callback in enumerate(trainer.get("callbacks") or []):
        if isinstance(callback, Mapping) and _target_name(callback).endswith("CommOverlapCallback"):
            s.section(callback, f"trainer.callbacks[{i}]", frozenset({"tp_comm_overlap"}))
    config = (doc.get("model") or {}).get("config") if isinstance(doc.get("model"), Mapping) else None
    model_keys = ALL_KEYS - parallel - PRECISION_KEYS - OPTIMIZER_OFFLOAD_KEYS - {"tp_comm_overlap"}
    s.section(config, "model.config", model_keys)
    s.section(doc.get("data"), "data", frozenset({"global_batch_size", "micro_batch_size", "seq_length"}))
    data = doc.get("data") or {}
    tokenizer = data.get("tokenizer") if isinstance(data, Mapping) else None
    if isinstance(tokenizer, Mapping):
        s.put("tokenizer_model", tokenizer.get("pretrained_model_name"), "data.tokenizer.pretrained_model_name")
    optim = doc.get("optim") or {}
    if isinstance(optim, Mapping):
        s.section(optim.get("config"), "optim.config", OPTIMIZER_KEYS)
    devices, nodes = trainer.get("devices"), trainer.get("num_nodes", 1)
    if isinstance(devices, int) and isinstance(nodes, int):
        return devices * nodes, devices
    return None, None


def _to_arguments(s: _Settings) -> tuple[dict[str, Any], str | None]:
    """Megatron-core settings -> Megatron-LM argument values (typed), and the activation if not expressible."""
    v, where = dict(s.values), s.where
    # A dump lists every field at its default: details of a feature that is off are not settings.
    off: list[str] = []
    if v.get("fp8") is None:
        off += [d for d in FP8_DETAIL_DESTS if v.get("fp4") is None or d not in BF16_LAYER_DESTS]
        off += ["fp8_param", "fp8_params"]
    if v.get("fp4") is None:
        off += ["fp4_recipe", "fp4_param_gather", "fp4_param"]
    if v.get("num_moe_experts") is None:
        off += [*MOE_DETAIL_DESTS, "moe_layer_freq", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend"]
        off.append("moe_pad_expert_input_to_capacity")
    if v.get("recompute_granularity") != "selective":
        off.append("recompute_modules")
    if not v.get("use_megatron_fsdp") and not v.get("use_custom_fsdp"):
        off.append("data_parallel_sharding_strategy")
    for key in off:
        v.pop(key, None)
    args: dict[str, Any] = {}
    labels: dict[str, str] = {}

    def put(dest: str, raw: Any, origin: str) -> None:
        arg = BY_DEST[dest]
        value = typed_value(arg, raw, origin, s.problems)
        if value is not None:
            args[dest] = value
            labels[dest] = origin

    for key, raw in v.items():
        if key in SPECIAL or key in LLAMA4_KEYS or key in ("optimizer",):
            continue
        dest = MCORE_TO_ARG.get(key, key)
        if dest == "attention_backend":
            raw = str(raw).removeprefix("AttnBackend.")
        if dest == "cp_comm_type" and not isinstance(raw, list):
            raw = [raw]
        if dest in BY_DEST:
            put(dest, raw, where[key])
    if v.get("optimizer", "adam") != "adam":
        s.problems.note(f"optimizer {v['optimizer']}: paraplan counts Adam optimizer states")
    if "grad_reduce_in_fp32" in v and not v["grad_reduce_in_fp32"]:
        args["grad_reduce_in_bf16"] = True
    if v.get("num_query_groups") is not None:
        args["group_query_attention"] = True
        put("num_query_groups", v["num_query_groups"], where["num_query_groups"])
    if "share_embeddings_and_output_weights" in v:
        args["untie_embeddings_and_output_weights"] = not v["share_embeddings_and_output_weights"]
    if "moe_layer_freq" in v:
        raw = v["moe_layer_freq"]
        args["moe_layer_freq"] = str(raw) if isinstance(raw, list) else raw
    if "nope_layer_interval" in v and "no_rope_freq" not in v:
        put("no_rope_freq", v["nope_layer_interval"], where["nope_layer_interval"])
    if "kv_lora_rank" in v and v.get("multi_latent_attention") is None:
        args["multi_latent_attention"] = True
    activation: str | None = None
    if "activation_func" in v or "gated_linear_unit" in v:
        func = ACTIVATIONS.get(_target_name(v.get("activation_func", "gelu")))
        gated = bool(v.get("gated_linear_unit", False))
        if func is None:
            s.problems.add(f"{where['activation_func']}: activation {_target_name(v['activation_func'])} is unknown")
        elif gated and func == "silu":
            args["swiglu"] = True
        elif gated and func == "gelu":
            activation = "geglu"
        elif gated:
            s.problems.add(f"gated {func} is not an activation paraplan models (swiglu, geglu)")
        elif func == "squared_relu":
            args["squared_relu"] = True
        elif func == "relu":
            activation = "relu"
        elif func == "silu":
            s.problems.add("silu without gated_linear_unit is not an activation paraplan models (swiglu is gated)")
        else:
            activation = "gelu"
    s.where.update({d: o for d, o in labels.items() if d not in s.where})
    return args, activation


def read_nemo(path_or_text: str | Path, *, num_gpus: int | None = None, model: ModelSpec | None = None) -> ReadConfig:
    """A NeMo 2.0 or Megatron-Bridge recipe YAML (file or text) -> (model or None, training, hints)."""
    text, source, path = load_text(path_or_text)
    problems = Problems(source or "nemo config")
    doc = load_yaml_mapping(text, source)
    settings = _Settings(problems)
    gpus = per_node = None
    if "trainer" in doc:
        gpus, per_node = _from_nemo2(doc, settings)
    else:
        _from_bridge(doc, settings)
    if gpus and num_gpus and gpus != num_gpus:
        problems.add(f"trainer.devices x trainer.num_nodes = {gpus} GPUs, not the {num_gpus} given")
    args, activation = _to_arguments(settings)
    reverse = {MCORE_TO_ARG.get(k, k): w for k, w in settings.where.items()}

    def label(dest: str) -> str:
        return reverse.get(dest, dest)

    model_block = doc.get("model") if isinstance(doc.get("model"), Mapping) else {}
    target = _target_name(model_block.get("config", model_block))
    name = target or (path.stem if path else "nemo")
    result = specs_from_megatron(
        args,
        problems,
        label,
        name=name,
        source=source,
        num_gpus=num_gpus or gpus,
        gpus_per_node=per_node,
        framework="nemo-megatron",
        model=model,
    )
    changes: dict[str, Any] = {}
    if activation and activation != "gelu":
        changes["activation"] = activation
    chunk = settings.values.get("attention_chunk_size")
    if chunk:  # the Llama 4 provider's chunked attention
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
            problems.add(f"{settings.where['attention_chunk_size']} must be a positive integer (got {chunk!r})")
            problems.raise_if_any()
        changes["attention_chunk_size"] = chunk
    if changes:
        fields = {**result.hints.model_fields, **changes}
        model = replace(result.model, **changes) if result.model else None
        result = ReadConfig(model, result.train, replace(result.hints, model_fields=fields))
    return result


# ----------------------------------------------------------------------------- writing
def _mixer_fields(model: ModelSpec, train: TrainingSpec, gaps: list[str]) -> dict[str, Any]:
    """Megatron-core's fields for the mixers other than full attention (the same values the Megatron writer uses)."""
    out: dict[str, Any] = {}
    if model.is_hybrid:
        out["hybrid_layer_pattern"] = pattern_with_stages(model.hybrid_layer_pattern or "", train.pipeline_layout)
        out.update({dest: getattr(model, dest) for dest in MAMBA_DESTS})
        out["mamba_num_heads"] = model.mamba_heads
    if model.attention_output_gate:
        out["attention_output_gate"] = True
    if model.linear_attention_freq:
        out["experimental_attention_variant"] = "gated_delta_net"
        out.update({dest: getattr(model, dest) for dest in GDN_DESTS})
    if model.dsa_indexer_n_heads:
        out["experimental_attention_variant"] = "dsa"
        out.update({dest: getattr(model, dest) for dest in DSA_DESTS})
    local = local_attention_values(model)
    if "window_size" in local:
        local["window_size"] = [model.window_size, 0]
    if model.attention_chunk_size:  # Megatron-Bridge's Llama4ModelProvider fields (see LLAMA4_KEYS)
        local.pop("no_rope_freq", None)
        local.update(attention_chunk_size=model.attention_chunk_size, nope_layer_interval=model.nope_layer_interval)
    out.update(local)
    return out


def write_nemo(model: ModelSpec, system: SystemSpec, train: TrainingSpec, *, strict: bool = False) -> str:
    """A Megatron-Bridge ConfigContainer override YAML for this plan."""
    train = resolve_dp(train, system)
    gaps: list[str] = []
    m: dict[str, Any] = {
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "ffn_hidden_size": model.ffn_hidden_size,
        "num_attention_heads": model.num_attention_heads,
        "num_query_groups": None if model.is_mla else model.num_query_groups,
        "kv_channels": model.kv_channels,
        "vocab_size": model.vocab_size,
        "make_vocab_size_divisible_by": 128,
        "seq_length": train.seq,
        "normalization": "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm",
        "activation_func": {
            "_target_": ACTIVATION_TARGET.get(model.activation, "torch.nn.functional.gelu"),
            "_call_": False,
        },
        "gated_linear_unit": model.gated_mlp,
        "position_embedding_type": position_embedding_type(model),
        "share_embeddings_and_output_weights": model.tied_embeddings,
        "add_bias_linear": model.moe_expert_linear_bias
        or (model.attention_bias and model.activation == "gelu" and model.norm == "layernorm"),
        "add_qkv_bias": model.attention_bias,
        "hidden_dropout": 0.1 if model.dropout else 0.0,
        "attention_dropout": 0.1 if model.dropout else 0.0,
    }
    if model.position == "alibi":
        gaps.append("ALiBi positions: rope used")
    if model.is_moe:
        m.update(
            num_moe_experts=model.num_experts,
            moe_ffn_hidden_size=model.moe_ffn_hidden_size,
            moe_router_topk=model.moe_router_topk,
            moe_shared_expert_intermediate_size=model.moe_shared_expert_intermediate_size or None,
            moe_layer_freq=format_layer_pattern(model.moe_first_k_dense, model.moe_layer_freq, model.num_layers),
            moe_grouped_gemm=True,
            moe_token_dispatcher_type=train.moe_token_dispatcher_type,
        )
        if train.moe_token_dispatcher_type == "flex":
            m["moe_flex_dispatcher_backend"] = "deepep"
    if model.is_mla:
        m.update(
            multi_latent_attention=True,
            q_lora_rank=model.q_lora_rank,
            kv_lora_rank=model.kv_lora_rank,
            qk_head_dim=model.qk_nope_head_dim,
            qk_pos_emb_head_dim=model.qk_rope_head_dim,
            v_head_dim=model.v_head_dim,
        )
    if model.mtp_num_layers:
        m["mtp_num_layers"] = model.mtp_num_layers
    m.update(_mixer_fields(model, train, gaps))
    chunks = chunks_per_rank(train)
    if "megatron" not in train.schedule.framework_names and train.pp > 1:  # NeMo runs Megatron-core's
        gaps.append(f"pipeline schedule {train.pipeline_schedule} (Megatron-core runs 1F1B or interleaved 1F1B)")
        chunks = 1
    m.update(
        tensor_model_parallel_size=train.tp,
        pipeline_model_parallel_size=train.pp,
        virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None,
        context_parallel_size=train.cp,
        expert_model_parallel_size=train.ep,
        expert_tensor_parallel_size=train.expert_tensor_parallel_size,
        sequence_parallel=train.sequence_parallel,
        num_layers_in_first_pipeline_stage=train.decoder_first_pipeline_num_layers,
        num_layers_in_last_pipeline_stage=train.decoder_last_pipeline_num_layers,
        account_for_embedding_in_pipeline_split=train.account_for_embedding_in_pipeline_split,
        account_for_loss_in_pipeline_split=train.account_for_loss_in_pipeline_split,
    )
    if train.pipeline_layout is not None and not model.is_hybrid:  # a hybrid pattern carries its stages as '|'
        m["pipeline_model_parallel_layout"] = format_pipeline_layout(train.pipeline_layout, model.mtp_num_layers)
    if train.recompute_granularity != "none":
        m["recompute_granularity"] = train.recompute_granularity
    if train.recompute_granularity == "full":
        n = train.recompute_num_layers
        if train.recompute_layer_ids is not None:
            gaps.append("recompute by layer ids (Primus only): every layer recomputed")
        m["recompute_method"], m["recompute_num_layers"] = ("uniform", 1) if n is None else (train.recompute_method, n)
    if train.recompute_granularity == "selective" and train.recompute_modules is not None:
        m["recompute_modules"] = list(train.recompute_modules)
    knobs = knob_values(train)
    optimizer_knobs = {k: knobs.pop(k) for k in list(knobs) if k in OPTIMIZER_OFFLOAD_KEYS}
    if train.use_precision_aware_optimizer:
        optimizer_knobs["use_precision_aware_optimizer"] = True
        for dest in ("main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            optimizer_knobs[dest] = getattr(train, dest)
    bucket_size = knobs.pop("ddp_bucket_size", None)
    m.update(knobs)
    if train.bf16_edge_layers != (0, 0):  # megatron-core TransformerConfig fields (`--first-last-layers-bf16`)
        m["first_last_layers_bf16"] = True
        m["num_layers_at_start_in_bf16"], m["num_layers_at_end_in_bf16"] = train.bf16_edge_layers
    m["tp_comm_overlap"] = train.tp_comm_overlap
    m["cross_entropy_loss_fusion"] = train.cross_entropy_fusion
    if train.moe_ep_overlap:
        m["overlap_moe_expert_parallel_comm"] = True
    if train.attention_backend == "unfused":
        m["attention_backend"] = "unfused"
    sharded_params = train.fsdp or train.zero_stage >= 3
    dist_opt = train.use_distributed_optimizer or train.zero_stage == 1
    ddp: dict[str, Any] = {
        "use_distributed_optimizer": dist_opt,
        "overlap_grad_reduce": train.overlap_grad_reduce,
        "overlap_param_gather": train.overlap_param_gather,
        "grad_reduce_in_fp32": train.grad_reduce_in_fp32,
    }
    if bucket_size is not None:
        ddp["bucket_size"] = bucket_size
    recipe_note = ""
    if train.precision in LOW_PRECISIONS:  # quantised primary weights (`TrainingSpec.fp8_param_gather`)
        key = "fp4_param_gather" if train.precision == "nvfp4" else "fp8_param_gather"
        ddp[key] = train.fp8_param_gather
        # the recipe's own value overwrites the ddp one
        if train.fp8_param_gather != (train.precision in NEMO_QUANTIZED_PARAM_PRECISIONS):
            recipe_note = (
                f"ddp.{key} {train.fp8_param_gather}: Megatron-Bridge's {PRECISION_BRIDGE[train.precision]} sets "
                f"{not train.fp8_param_gather} and overwrites it; set the recipe's `{key}` to run it as projected"
            )
    if sharded_params or train.zero_stage == 2:
        ddp["use_megatron_fsdp"] = True
        ddp["data_parallel_sharding_strategy"] = "optim_grads_params" if sharded_params else "optim_grads"
    if train.precision not in PRECISION_BRIDGE:
        gaps.append(f"precision {train.precision}: bf16_mixed used")
    doc = {
        "model": {k: val for k, val in m.items() if val is not None},
        "train": {"global_batch_size": train.gbs, "micro_batch_size": train.mbs, "train_iters": 100},
        "optimizer": {"optimizer": "adam", "lr": 1.0e-4, "use_distributed_optimizer": dist_opt, **optimizer_knobs},
        "ddp": ddp,
        "mixed_precision": PRECISION_BRIDGE.get(train.precision, "bf16_mixed"),
        "comm_overlap": {"tp_comm_overlap": train.tp_comm_overlap},
        "dataset": {"sequence_length": train.seq},
    }
    comments = header_lines(model, system, train, "Megatron-Bridge (NeMo) recipe overrides")
    comments += finish_gaps(gaps, strict, "NeMo/Megatron-Bridge")
    if recipe_note:
        comments.append(recipe_note)
    comments.append(
        f"run: torchrun --nproc-per-node {min(system.gpus_per_node, system.num_gpus)} --nnodes {system.num_nodes} "
        "<recipe script> --config-file this.yaml"
    )
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)
    return "".join(f"# {c}\n" for c in comments) + body
