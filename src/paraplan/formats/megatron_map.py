"""Megatron-LM argument values (by destination name) <-> paraplan specs. Shared by the Megatron command
line and Primus YAML, whose keys are the same destination names.

Defaults are Megatron-LM's (`megatron/training/arguments.py`): GELU, LayerNorm, learned absolute positions,
tied embeddings, biases on, dropout 0.1, FFN 4h (or 8h/3 rounded down to 64 with SwiGLU).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from paraplan.formats.common import (
    FP8_RECIPE_TO_PRECISION,
    PRECISION_TO_FP8_RECIPE,
    Problems,
    ReadConfig,
    SystemHints,
    as_bool,
    as_float,
    as_int,
    model_from_fields,
    vocab_from_tokenizer,
)
from paraplan.formats.megatron_args import BF16_LAYER_DESTS, FP8_DETAIL_DESTS, MLA_DETAIL_DESTS, MOE_DETAIL_DESTS, Arg
from paraplan.formats.megatron_knobs import RECOMPUTE_LAYER_IDS_GAP, knob_fields, knob_values, split_names
from paraplan.formats.megatron_layout import (
    format_layer_pattern,
    format_pipeline_layout,
    parse_layer_pattern,
    parse_pipeline_layout,
)
from paraplan.graph.partition import chunks_per_rank
from paraplan.specs.model import ModelSpec
from paraplan.specs.schedule import megatron_schedule
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import LOW_PRECISIONS, TrainingSpec

Label = Callable[[str], str]

MEGATRON_MODEL_DEFAULTS: Mapping[str, Any] = {
    "activation": "gelu",
    "norm": "layernorm",
    "position": "learned",
    "tied_embeddings": True,
    "attention_bias": True,
    "dropout": True,
}


def typed_value(arg: Arg, raw: Any, where: str, problems: Problems) -> Any:
    """A command-line string or a YAML value, converted to the argument's kind; None when invalid."""
    if arg.kind == "switch":
        return as_bool(raw, where, problems)
    if arg.kind == "int":
        return as_int(raw, where, problems)
    if arg.kind == "float":
        return as_float(raw, where, problems)
    if arg.kind == "list":
        return [str(x) for x in raw] if isinstance(raw, list) else [str(raw)]
    value = str(raw) if not isinstance(raw, bool) else None
    if value is None:
        problems.add(f"{where} must be a value, not {raw!r}")
    elif arg.choices and value not in arg.choices:
        problems.add(f"{where} must be one of {', '.join(arg.choices)} (got '{value}')")
        return None
    return value


# ----------------------------------------------------------------------------- values -> specs
def specs_from_megatron(
    values: Mapping[str, Any],
    problems: Problems,
    label: Label,
    *,
    name: str,
    source: str,
    num_gpus: int | None = None,
    gpus_per_node: int | None = None,
    framework: str = "megatron-lm",
    schedule: str | None = None,
    model: ModelSpec | None = None,
) -> ReadConfig:
    """Megatron argument values (destination name -> typed value; absent or None = not given) to specs.

    Reports contradictions between flags; layout rules (heads % tp, ...) are the validator's job. `model`
    (the --model preset, when the arguments do not give the shape) supplies the layer count."""
    v = {k: x for k, x in values.items() if x is not None}

    def has(dest: str) -> bool:
        return dest in v

    train: dict[str, Any] = {"framework": framework}
    # ---- precision
    fp8, fp4 = v.get("fp8"), v.get("fp4")
    if v.get("fp16") and v.get("bf16"):
        problems.add(f"{label('fp16')} and {label('bf16')} are both set: choose one")
    for dest in FP8_DETAIL_DESTS:
        if has(dest) and not fp8 and not (fp4 and dest in BF16_LAYER_DESTS):
            problems.add(f"{label(dest)} is set but FP8 is off: add {label('fp8')} (e4m3 or hybrid) or remove it")
    for dest in ("fp4_recipe", "fp4_param_gather"):
        if has(dest) and not fp4:
            problems.add(f"{label(dest)} is set but FP4 is off: add {label('fp4')} e2m1 or remove it")
    if fp8 and fp4:
        problems.add(f"{label('fp8')} and {label('fp4')} are both set: choose one low precision")
    if fp4:
        if v.get("fp4_recipe", "nvfp4") != "nvfp4":
            problems.add(f"{label('fp4_recipe')} {v['fp4_recipe']}: paraplan models the nvfp4 recipe only")
        train["precision"] = "nvfp4"
    elif fp8:
        train["precision"] = FP8_RECIPE_TO_PRECISION[v.get("fp8_recipe", "delayed")]
    elif v.get("fp16"):
        train["precision"] = "fp16"
    elif v.get("bf16"):
        train["precision"] = "bf16"
    else:
        problems.note(f"neither {label('bf16')} nor {label('fp16')}: Megatron would train in fp32; projected as bf16")
    if fp8 or fp4:
        train.update(_bf16_layer_fields(v, problems, label))
    if (fp8 and v.get("fp8_param_gather")) or (fp4 and v.get("fp4_param_gather")):
        train["fp8_param_gather"] = True  # quantised primary weights (`TrainingSpec.fp8_param_gather`)
    if v.get("optimizer", "adam") != "adam":
        problems.note(f"{label('optimizer')} {v['optimizer']}: paraplan counts Adam optimizer states")
    # ---- recompute
    granularity, method, n_layers = (
        v.get("recompute_granularity"),
        v.get("recompute_method"),
        v.get("recompute_num_layers"),
    )
    if v.get("recompute_activations"):
        if granularity == "full":
            problems.add(
                f"{label('recompute_activations')} (selective) contradicts {label('recompute_granularity')} full"
            )
        granularity = "selective"
    if granularity == "selective":
        for dest in ("recompute_method", "recompute_num_layers"):
            if has(dest):
                problems.add(
                    f"{label('recompute_granularity')} selective does not take {label(dest)} (full recompute only)"
                )
        modules = split_names(v.get("recompute_modules") or [])
        if modules and modules != ["core_attn"]:
            train["recompute_modules"] = tuple(modules)
    elif granularity == "full":
        if v.get("recompute_layer_ids") is not None:  # Primus: recompute by layer index
            train["recompute_layer_ids"] = tuple(int(i) for i in v["recompute_layer_ids"])
        else:
            if method is None:
                problems.add(
                    f"{label('recompute_granularity')} full needs {label('recompute_method')} uniform or block"
                )
            if n_layers is None:
                problems.add(f"{label('recompute_granularity')} full needs {label('recompute_num_layers')}")
            if method == "block":
                train["recompute_num_layers"] = n_layers
            elif method == "uniform" and n_layers is not None and n_layers > 1:
                train["recompute_method"], train["recompute_num_layers"] = "uniform", n_layers
    else:
        for dest in ("recompute_method", "recompute_num_layers", "recompute_modules", "recompute_layer_ids"):
            if has(dest):
                problems.add(f"{label(dest)} is set without {label('recompute_granularity')}")
    if granularity:
        train["recompute_granularity"] = granularity
    train.update(knob_fields(v, problems, label))
    # ---- parallel layout
    for dest in (
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "context_parallel_size",
        "expert_model_parallel_size",
        "expert_tensor_parallel_size",
        "micro_batch_size",
        "global_batch_size",
        "seq_length",
        "decoder_first_pipeline_num_layers",
        "decoder_last_pipeline_num_layers",
    ):
        if has(dest):
            train[dest] = v[dest]
    for dest in (
        "sequence_parallel",
        "use_distributed_optimizer",
        "overlap_grad_reduce",
        "overlap_param_gather",
        "tp_comm_overlap",
        "account_for_embedding_in_pipeline_split",
        "account_for_loss_in_pipeline_split",
    ):
        if has(dest):
            train[dest] = bool(v[dest])
    if has("overlap_moe_expert_parallel_comm"):
        train["moe_ep_overlap"] = bool(v["overlap_moe_expert_parallel_comm"])
    # DeepEP / HybridEP run under the flex dispatcher (`--moe-enable-deepep` is the older switch for it)
    if v.get("moe_token_dispatcher_type") == "flex" or v.get("moe_enable_deepep"):
        train["moe_token_dispatcher_type"] = "flex"
    elif v.get("moe_token_dispatcher_type") == "allgather" and v.get("num_experts"):
        problems.note(f"{label('moe_token_dispatcher_type')} allgather: projected as the alltoall dispatcher")
    if v.get("grad_reduce_in_bf16"):
        train["grad_reduce_in_fp32"] = False
    if v.get("use_precision_aware_optimizer"):
        train["use_precision_aware_optimizer"] = True
    for dest in ("main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
        if has(dest):
            train[dest] = v[dest]
    if v.get("cp_comm_type") and set(v["cp_comm_type"]) - {"p2p"}:
        problems.note(f"{label('cp_comm_type')} {' '.join(v['cp_comm_type'])}: projected as the p2p ring exchange")
    if v.get("rampup_batch_size"):
        problems.note(f"{label('rampup_batch_size')} is ignored: paraplan projects the full global batch")
    # eager kernels: the MLP's and the attention's elementwise fusions both off (one switch in paraplan)
    unfused = [dest for dest in ("bias_swiglu_fusion", "apply_rope_fusion") if has(dest) and not v[dest]]
    if len(unfused) == 2:
        train["kernel_fusion"] = False
    elif unfused:
        problems.note(
            f"{label(unfused[0])} alone is projected with fused kernels: paraplan turns the norm, SwiGLU and "
            f"rotary fusions off together (give {label('bias_swiglu_fusion')} and {label('apply_rope_fusion')})"
        )
    if has("cross_entropy_loss_fusion"):
        train["cross_entropy_fusion"] = bool(v["cross_entropy_loss_fusion"])
    if v.get("attention_backend") in ("unfused", "local"):
        train["attention_backend"] = "unfused"
    elif has("attention_backend") or v.get("use_flash_attn"):
        train["attention_backend"] = "flash"
    # sharded data parallelism
    if v.get("use_torch_fsdp2") and v.get("use_megatron_fsdp"):
        problems.add(f"{label('use_torch_fsdp2')} and {label('use_megatron_fsdp')} are both set: choose one")
    strategy = v.get("data_parallel_sharding_strategy")
    if strategy and not v.get("use_megatron_fsdp"):
        problems.add(f"{label('data_parallel_sharding_strategy')} applies to {label('use_megatron_fsdp')} only")
    if v.get("use_torch_fsdp2"):
        train["fsdp"] = True
    elif v.get("use_megatron_fsdp"):
        strategy = strategy or "no_shard"
        if strategy == "optim_grads_params":
            train["fsdp"] = True
        elif strategy == "optim_grads":
            train["zero_stage"] = 2
        elif strategy == "optim":
            train["zero_stage"] = 1
        else:
            problems.note(f"{label('use_megatron_fsdp')} with sharding strategy no_shard is projected as plain DDP")
    # virtual pipeline stages, uneven stages, explicit layout
    pp = int(v.get("pipeline_model_parallel_size", 1))
    num_layers = v.get("num_layers", model.num_layers if model else None)
    per_virtual, virtual = v.get("num_layers_per_virtual_pipeline_stage"), v.get("num_virtual_stages_per_pipeline_rank")
    vpp = 1
    if per_virtual is not None and virtual is not None:
        problems.add(
            f"{label('num_layers_per_virtual_pipeline_stage')} and {label('num_virtual_stages_per_pipeline_rank')} "
            "both set the virtual pipeline size: choose one"
        )
    elif per_virtual is not None:
        if num_layers is None:
            problems.add(f"{label('num_layers_per_virtual_pipeline_stage')} needs {label('num_layers')}")
        elif per_virtual < 1 or num_layers % pp or (num_layers // pp) % per_virtual:
            problems.add(
                f"{label('num_layers_per_virtual_pipeline_stage')} {per_virtual}: layers {num_layers} / pp {pp} "
                f"must be a multiple of it"
            )
        else:
            vpp = num_layers // pp // per_virtual
    elif virtual is not None:
        vpp = virtual
    layout_text = v.get("pipeline_model_parallel_layout")
    if layout_text:
        for dest in (
            "decoder_first_pipeline_num_layers",
            "decoder_last_pipeline_num_layers",
            "num_layers_per_virtual_pipeline_stage",
            "account_for_embedding_in_pipeline_split",
            "account_for_loss_in_pipeline_split",
        ):
            if v.get(dest):
                problems.add(f"{label('pipeline_model_parallel_layout')} and {label(dest)} both set the stage split")
        parsed = parse_pipeline_layout(str(layout_text), label("pipeline_model_parallel_layout"), problems)
        if parsed is not None:
            counts, mtp_in_layout = parsed
            if len(counts) % pp:
                problems.add(
                    f"{label('pipeline_model_parallel_layout')} has {len(counts)} stages, not a multiple of pp {pp}"
                )
            else:
                vpp = len(counts) // pp
                train["pipeline_layout"] = counts
            if mtp_in_layout != v.get("mtp_num_layers", 0):
                problems.add(
                    f"{label('pipeline_model_parallel_layout')} places {mtp_in_layout} MTP layers (m) but "
                    f"{label('mtp_num_layers')} is {v.get('mtp_num_layers', 0)}"
                )
    hybrid = _hybrid_pattern(v, problems, label)
    if hybrid is not None and "|" in hybrid:
        if layout_text:
            problems.add(f"{label('pipeline_model_parallel_layout')} and '|' in the hybrid pattern both set the stages")
        counts = tuple(len(segment) for segment in hybrid.split("|"))
        if len(counts) % pp:
            problems.add(f"the hybrid pattern's '|' make {len(counts)} stages, not a multiple of pp {pp}")
        else:
            vpp = len(counts) // pp
            train["pipeline_layout"] = counts
    if vpp > 1 and pp < 2:
        problems.add(f"virtual pipeline stages ({vpp} per rank) need {label('pipeline_model_parallel_size')} > 1")
    if vpp > 1:
        train["virtual_pipeline_model_parallel_size"] = vpp
        train["pipeline_schedule"] = megatron_schedule(vpp).name
    if schedule:
        train["pipeline_schedule"] = schedule
    # ---- model
    model_fields, model_defaults = _model_fields(v, problems, label, num_layers)
    if hybrid is not None:
        model_fields.update(_hybrid_fields(v, hybrid.replace("|", ""), problems, label))
    model_fields.update(_linear_attention_fields(v, problems, label))
    model_fields.update(_local_attention_fields(v, problems, label))
    spec_model = model_from_fields(model_fields, model_defaults, name, source, problems)
    # ---- batch defaults that need the GPU count
    if "global_batch_size" not in train:
        mp = int(v.get("tensor_model_parallel_size", 1)) * pp * int(v.get("context_parallel_size", 1))
        if num_gpus and mp and num_gpus % mp == 0:
            train["global_batch_size"] = int(train.get("micro_batch_size", 1)) * (num_gpus // mp)
            problems.note("no global batch size: Megatron's default micro_batch_size x data-parallel size used")
        else:
            problems.note(f"no {label('global_batch_size')}: give --gbs (Megatron's default is mbs x dp)")
    if "seq_length" not in train:
        problems.note(f"no {label('seq_length')}: paraplan's default {TrainingSpec().seq_length} used")
    problems.raise_if_any()
    spec = TrainingSpec().with_values(**train)
    hints = SystemHints(
        num_gpus=num_gpus,
        gpus_per_node=gpus_per_node,
        source=source,
        notes=tuple(problems.notes),
        model_fields=model_fields,
        train_fields=frozenset(train) - {"framework"},
    )
    return ReadConfig(spec_model, spec, hints)


HYBRID_PATTERN_DESTS = ("hybrid_layer_pattern", "hybrid_override_pattern")
MAMBA_DESTS = ("mamba_state_dim", "mamba_head_dim", "mamba_num_groups", "mamba_num_heads")


def _bf16_layer_fields(v: Mapping[str, Any], problems: Problems, label: Label) -> dict[str, Any]:
    """`--first-last-layers-bf16` and its counts (megatron-core reads the counts only under the switch: fp8_utils
    `is_first_last_bf16_layer`, used by the FP8 and the FP4 context of each layer)."""
    out: dict[str, Any] = {}
    counts = {dest: int(v[dest]) for dest in BF16_LAYER_DESTS[1:] if v.get(dest) is not None}
    if v.get("first_last_layers_bf16"):
        out["first_last_layers_bf16"] = True
        out.update(counts)
    elif counts:
        problems.note(
            f"{label('num_layers_at_start_in_bf16')} / {label('num_layers_at_end_in_bf16')} without "
            f"{label('first_last_layers_bf16')}: every layer in the low precision"
        )
    return out


def _hybrid_pattern(v: Mapping[str, Any], problems: Problems, label: Label) -> str | None:
    """The hybrid layer pattern (`--hybrid-layer-pattern`, or the older `--hybrid-override-pattern`), '|' kept."""
    given = [dest for dest in HYBRID_PATTERN_DESTS if v.get(dest)]
    if len(given) > 1 and v[given[0]] != v[given[1]]:
        problems.add(f"{label(given[0])} and {label(given[1])} differ: give one")
    if not given:
        for dest in MAMBA_DESTS:
            if dest in v:
                problems.add(
                    f"{label(dest)} is set without a hybrid layer pattern ({label('hybrid_override_pattern')})"
                )
        return None
    pattern = str(v[given[0]])
    if "/" in pattern:
        problems.add(f"{label(given[0])}: MTP patterns after '/' are not modelled (got '{pattern}')")
        pattern = pattern.split("/")[0]
    return pattern


def _hybrid_fields(v: Mapping[str, Any], pattern: str, problems: Problems, label: Label) -> dict[str, Any]:
    """A hybrid model's fields: its pattern, layer count, Mamba sizes; no positional embedding (pretrain_mamba.py's
    default position_embedding_type none) unless given."""
    if "num_layers" in v and v["num_layers"] != len(pattern):
        problems.add(f"{label('num_layers')} {v['num_layers']} but the hybrid pattern has {len(pattern)} layers")
    out: dict[str, Any] = {"hybrid_layer_pattern": pattern, "num_layers": len(pattern)}
    for dest in MAMBA_DESTS:
        if dest in v:
            out[dest] = v[dest]
    if "position_embedding_type" not in v and not v.get("use_rotary_position_embeddings"):
        out["position"] = "none"
    return out


GDN_DESTS = (
    "linear_attention_freq",
    "linear_conv_kernel_dim",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
)


DSA_DESTS = ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk")


def _linear_attention_fields(v: Mapping[str, Any], problems: Problems, label: Label) -> dict[str, Any]:
    """Gated DeltaNet layers (`--experimental-attention-variant gated_delta_net`) and the attention output gate."""
    out: dict[str, Any] = {}
    if v.get("attention_output_gate"):
        out["attention_output_gate"] = True
    variant = v.get("experimental_attention_variant")
    if variant == "dsa":  # megatron-core 0.19.2: dsa_indexer_n_heads, _head_dim, _topk have no defaults
        for dest in DSA_DESTS:
            if dest in v:
                out[dest] = v[dest]
            else:
                problems.add(f"{label('experimental_attention_variant')} dsa needs {label(dest)}")
    elif variant == "gated_delta_net":
        if not v.get("linear_attention_freq"):
            problems.add(
                f"{label('experimental_attention_variant')} gated_delta_net needs {label('linear_attention_freq')}"
            )
        for dest in GDN_DESTS:
            if dest in v:
                out[dest] = v[dest]
    else:
        for dest in GDN_DESTS:
            if dest in v:
                problems.add(f"{label(dest)} is set without {label('experimental_attention_variant')} gated_delta_net")
    return out


GPT_OSS_NUMERICS_DESTS = ("yarn_rotary_scaling_factor", "activation_func_clamp_value")
"""megatron-core 0.16 TransformerConfig fields of gpt-oss's YaRN RoPE and GLU clamp (ModelSpec's own names)."""


def parse_window(raw: Any, where: str, problems: Problems) -> int | None:
    """megatron-core's `window_size` (left, right) -> paraplan's left window; None for -1 / no window. The right
    window of a causal decoder is 0 (gpt-oss: (127, 0))."""
    parts = [p.strip() for p in (raw if isinstance(raw, list | tuple) else str(raw).strip("()[] ").split(","))]
    try:
        left, right = (int(p) for p in parts)
    except ValueError:
        problems.add(f"{where} must be two integers 'left,right' (got {raw!r})")
        return None
    if right not in (0, -1):
        problems.add(f"{where} right window {right}: a causal decoder attends to no later key (0)")
    return None if left < 0 else left


def _local_attention_fields(v: Mapping[str, Any], problems: Problems, label: Label) -> dict[str, Any]:
    """Sliding-window attention (`window_size`, `window_attn_skip_freq`), NoPE layers (`no_rope_freq`) and the
    attention softmax (`softmax_type`): megatron-core 0.16.1 TransformerConfig."""
    out: dict[str, Any] = {}
    if "window_size" in v:
        left = parse_window(v["window_size"], label("window_size"), problems)
        if left is not None:
            out["window_size"] = left
            if "window_attn_skip_freq" in v:
                out["window_attn_skip_freq"] = v["window_attn_skip_freq"]
    elif "window_attn_skip_freq" in v:
        problems.add(f"{label('window_attn_skip_freq')} is set without {label('window_size')}")
    if "no_rope_freq" in v:
        out["nope_layer_interval"] = v["no_rope_freq"]
    if "softmax_type" in v:
        out["softmax_type"] = v["softmax_type"]
    for dest in GPT_OSS_NUMERICS_DESTS:  # None: megatron-core's default, off
        if v.get(dest) is not None:
            out[dest] = v[dest]
    return out


def _model_fields(
    v: Mapping[str, Any], problems: Problems, label: Label, num_layers: int | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(fields the arguments set explicitly, Megatron's defaults for the rest)."""
    f: dict[str, Any] = {}
    for dest in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "kv_channels", "vocab_size"):
        if dest in v:
            f[dest] = v[dest]
    if "vocab_size" not in f:
        vocab = vocab_from_tokenizer(v.get("tokenizer_model"), v.get("tokenizer_type"))
        if vocab:
            f["vocab_size"] = vocab
            problems.note(
                f"vocabulary {vocab} taken from the tokenizer ({v.get('tokenizer_model') or v.get('tokenizer_type')})"
            )
    if v.get("make_vocab_size_divisible_by", 128) != 128:
        problems.note(
            f"{label('make_vocab_size_divisible_by')} {v['make_vocab_size_divisible_by']}: paraplan pads to 128 x tp"
        )
    if "num_query_groups" in v and not v.get("group_query_attention"):
        problems.add(f"{label('num_query_groups')} has no effect without {label('group_query_attention')}")
    if v.get("group_query_attention"):
        f["num_query_groups"] = v.get("num_query_groups", 1)
    if v.get("swiglu") and v.get("squared_relu"):
        problems.add(f"{label('swiglu')} and {label('squared_relu')} are both set: choose one activation")
    elif v.get("swiglu"):
        f["activation"] = "swiglu"
    elif v.get("squared_relu"):
        f["activation"] = "squared_relu"
    if "normalization" in v:
        f["norm"] = "rmsnorm" if v["normalization"] == "RMSNorm" else "layernorm"
    position = v.get("position_embedding_type")
    if v.get("use_rotary_position_embeddings"):
        if position not in (None, "rope"):
            problems.add(
                f"{label('use_rotary_position_embeddings')} contradicts {label('position_embedding_type')} {position}"
            )
        position = "rope"
    if position == "relative":
        problems.add(f"{label('position_embedding_type')} relative (T5) is not a decoder-only setting paraplan models")
    elif position in ("rope", "mrope", "yarn"):
        f["position"] = "rope"
    elif position == "none":
        f["position"] = "none"
    elif position == "learned_absolute" or v.get("add_position_embedding") is False:
        f["position"] = "none" if v.get("add_position_embedding") is False else "learned"
    if "untie_embeddings_and_output_weights" in v:
        f["tied_embeddings"] = not v["untie_embeddings_and_output_weights"]
    if "add_bias_linear" in v or "add_qkv_bias" in v:
        f["attention_bias"] = bool(v.get("add_qkv_bias")) or bool(v.get("add_bias_linear", True))
    if "hidden_dropout" in v or "attention_dropout" in v:
        f["dropout"] = v.get("hidden_dropout", 0.1) > 0 or v.get("attention_dropout", 0.1) > 0
    # mixture of experts
    if "num_experts" in v:
        f["num_experts"] = v["num_experts"]
        # megatron-core's experts take the linear layers' biases (TEGroupedMLP `bias=config.add_bias_linear`), on by
        # Megatron's default (`--disable-bias-linear` turns it off)
        f["moe_expert_linear_bias"] = bool(v.get("add_bias_linear", True))
        f["moe_router_topk"] = v.get("moe_router_topk", 2)  # Megatron's default top-k
        for dest in ("moe_ffn_hidden_size", "moe_shared_expert_intermediate_size"):
            if dest in v:
                f[dest] = v[dest]
        if "moe_layer_freq" in v:
            parsed = parse_layer_pattern(v["moe_layer_freq"], num_layers, label("moe_layer_freq"), problems)
            if parsed:
                f["moe_first_k_dense"], f["moe_layer_freq"] = parsed
        if v.get("moe_expert_capacity_factor") is not None and not v.get("moe_pad_expert_input_to_capacity"):
            problems.note(f"{label('moe_expert_capacity_factor')}: paraplan projects dropless, balanced routing")
    else:
        for dest in MOE_DETAIL_DESTS:
            if dest in v:
                problems.add(f"{label(dest)} is set but the model has no experts ({label('num_experts')} missing)")
    # multi-head latent attention and multi-token prediction
    if v.get("multi_latent_attention"):
        # Megatron-LM argument defaults: no q compression, kv_lora_rank 32, qk 128 + 64 rope, v 128
        f["q_lora_rank"] = v.get("q_lora_rank")
        f["kv_lora_rank"] = v.get("kv_lora_rank", 32)
        f["qk_nope_head_dim"] = v.get("qk_head_dim", 128)
        f["qk_rope_head_dim"] = v.get("qk_pos_emb_head_dim", 64)
        f["v_head_dim"] = v.get("v_head_dim", 128)
        f.pop("num_query_groups", None)
    else:
        for dest in MLA_DETAIL_DESTS:
            if dest in v:
                problems.add(f"{label(dest)} is set without {label('multi_latent_attention')}")
    if "mtp_num_layers" in v:
        f["mtp_num_layers"] = v["mtp_num_layers"]
    defaults = dict(MEGATRON_MODEL_DEFAULTS)
    hidden = f.get("hidden_size")
    if hidden and "ffn_hidden_size" not in f:
        # Megatron: 4h, or int(8h/3 / 64) * 64 with SwiGLU
        defaults["ffn_hidden_size"] = (
            int(4 * hidden * 2 / 3 / 64) * 64 if f.get("activation") == "swiglu" else 4 * hidden
        )
    return f, defaults


# ----------------------------------------------------------------------------- specs -> values
MODEL_DESTS = frozenset(
    (
        *"num_layers hidden_size ffn_hidden_size num_attention_heads group_query_attention num_query_groups".split(),
        *"kv_channels multi_latent_attention vocab_size make_vocab_size_divisible_by normalization swiglu".split(),
        *"squared_relu position_embedding_type untie_embeddings_and_output_weights add_bias_linear".split(),
        *"add_qkv_bias hidden_dropout attention_dropout num_experts moe_ffn_hidden_size moe_router_topk".split(),
        *"moe_shared_expert_intermediate_size moe_layer_freq mtp_num_layers max_position_embeddings".split(),
        *MLA_DETAIL_DESTS,
        # hybrid, Gated DeltaNet and sparse-attention shapes (the hybrid pattern itself carries the '|' stages of the
        # plan, so it stays with the plan values)
        *"is_hybrid_model mamba_state_dim mamba_head_dim mamba_num_groups mamba_num_heads".split(),
        *"experimental_attention_variant linear_attention_freq linear_conv_kernel_dim linear_key_head_dim".split(),
        *"linear_value_head_dim linear_num_key_heads linear_num_value_heads attention_output_gate".split(),
        *"dsa_indexer_n_heads dsa_indexer_head_dim dsa_indexer_topk".split(),
        *"window_size window_attn_skip_freq no_rope_freq softmax_type".split(),
        *GPT_OSS_NUMERICS_DESTS,
    )
)
"""What `megatron_values` writes about the model's architecture; the rest is the training plan."""


def position_embedding_type(model: ModelSpec) -> str:
    """megatron-core's `position_embedding_type` of the model: "yarn" with a YaRN scaling factor."""
    if model.position == "rope" and model.yarn_rotary_scaling_factor:
        return "yarn"
    return {"learned": "learned_absolute", "none": "none"}.get(model.position, "rope")


def local_attention_values(model: ModelSpec) -> dict[str, Any]:
    """megatron-core 0.16.1 TransformerConfig's sliding window (`window_size` "left,right", `window_attn_skip_freq`),
    NoPE layers (`no_rope_freq`, an int N: every N-th layer skips RoPE), `softmax_type` and gpt-oss's YaRN factor and
    GLU clamp (`GPT_OSS_NUMERICS_DESTS`), where they differ from the defaults."""
    out: dict[str, Any] = {}
    if model.window_size:
        out["window_size"] = f"{model.window_size},0"
        if model.window_attn_skip_freq:
            out["window_attn_skip_freq"] = model.window_attn_skip_freq
    if model.nope_layer_interval:
        out["no_rope_freq"] = model.nope_layer_interval
    if model.softmax_type != "vanilla":
        out["softmax_type"] = model.softmax_type
    out.update({dest: getattr(model, dest) for dest in GPT_OSS_NUMERICS_DESTS if getattr(model, dest)})
    return out


def megatron_plan_values(model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> tuple[dict[str, Any], list[str]]:
    """`megatron_values` without the model's architecture (`MODEL_DESTS`): the parallel plan, batch, recompute,
    precision and overlap flags, for a model the run already describes (`paraplan tune`'s reproducer)."""
    values, gaps = megatron_values(model, system, train)
    return {dest: value for dest, value in values.items() if dest not in MODEL_DESTS}, gaps


def pattern_with_stages(pattern: str, layout: tuple[int, ...] | None) -> str:
    """The hybrid pattern with '|' between pipeline stages (megatron-core 0.19.2 hybrid_layer_allocation)."""
    if layout is None:
        return pattern
    segments, start = [], 0
    for n in layout:
        segments.append(pattern[start : start + n])
        start += n
    return "|".join(segments)


def megatron_values(model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> tuple[dict[str, Any], list[str]]:
    """Megatron argument values (destination name -> value) for this plan, and what they cannot express.

    A switch whose value equals its flag's `sets` is written as the flag; other switch values are defaults."""
    gaps: list[str] = []
    out: dict[str, Any] = {}
    # ---- model
    out["num_layers"] = model.num_layers
    out["hidden_size"] = model.hidden_size
    out["ffn_hidden_size"] = model.ffn_hidden_size
    out["num_attention_heads"] = model.num_attention_heads
    if not model.is_mla and model.num_query_groups and model.num_query_groups != model.num_attention_heads:
        out["group_query_attention"] = True
        out["num_query_groups"] = model.num_query_groups
    if model.kv_channels:
        out["kv_channels"] = model.kv_channels
    if model.is_mla:
        out["multi_latent_attention"] = True
        if model.q_lora_rank:
            out["q_lora_rank"] = model.q_lora_rank
        out["kv_lora_rank"] = model.kv_lora_rank
        out["qk_head_dim"] = model.qk_nope_head_dim
        out["qk_pos_emb_head_dim"] = model.qk_rope_head_dim
        out["v_head_dim"] = model.v_head_dim
    out["vocab_size"] = model.vocab_size
    out["make_vocab_size_divisible_by"] = 128
    out["normalization"] = "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"
    if model.activation == "swiglu":
        out["swiglu"] = True
    elif model.activation == "squared_relu":
        out["squared_relu"] = True
    elif model.activation != "gelu":
        gaps.append(f"activation {model.activation} (Megatron-LM's flags give gelu, swiglu, squared-relu): gelu used")
    if model.position == "alibi":
        gaps.append("ALiBi positions (Megatron-LM has none): rope used")
    out["position_embedding_type"] = position_embedding_type(model)
    if not model.tied_embeddings:
        out["untie_embeddings_and_output_weights"] = True
    if model.moe_expert_linear_bias:  # every linear has a bias (gpt-oss): Megatron's default
        pass
    elif not model.attention_bias:
        out["add_bias_linear"] = False
    elif model.activation != "gelu" or model.norm != "layernorm":
        out["add_bias_linear"] = False
        out["add_qkv_bias"] = True
    out["hidden_dropout"] = 0.1 if model.dropout else 0.0
    out["attention_dropout"] = 0.1 if model.dropout else 0.0
    if model.is_moe:
        out["num_experts"] = model.num_experts
        if model.moe_ffn_hidden_size is not None:
            out["moe_ffn_hidden_size"] = model.moe_ffn_hidden_size
        out["moe_router_topk"] = model.moe_router_topk
        if model.moe_shared_expert_intermediate_size:
            out["moe_shared_expert_intermediate_size"] = model.moe_shared_expert_intermediate_size
        if model.moe_first_k_dense or model.moe_layer_freq != 1:
            out["moe_layer_freq"] = format_layer_pattern(
                model.moe_first_k_dense, model.moe_layer_freq, model.num_layers
            )
        out["moe_grouped_gemm"] = True
        if train.moe_token_dispatcher_type == "flex":
            out["moe_token_dispatcher_type"] = "flex"
            out["moe_flex_dispatcher_backend"] = "deepep"
        else:
            out["moe_token_dispatcher_type"] = "alltoall"
    if model.mtp_num_layers:
        out["mtp_num_layers"] = model.mtp_num_layers
    out.update(local_attention_values(model))
    if model.attention_chunk_size:  # megatron-core 0.16.1 TransformerConfig has no chunked-attention field
        gaps.append(
            f"chunked attention (chunks of {model.attention_chunk_size}): Megatron-LM has no flag for it and runs "
            "these layers with full attention (Megatron-Bridge's Llama 4 provider adds attention_chunk_size)"
        )
    if model.attention_output_gate:
        out["attention_output_gate"] = True
    if model.dsa_indexer_n_heads:
        out["experimental_attention_variant"] = "dsa"
        for dest in DSA_DESTS:
            out[dest] = getattr(model, dest)
    if model.linear_attention_freq:
        out["experimental_attention_variant"] = "gated_delta_net"
        for dest in GDN_DESTS:
            out[dest] = getattr(model, dest)
    if model.is_hybrid:
        out["is_hybrid_model"] = True
        out["hybrid_override_pattern"] = pattern_with_stages(model.hybrid_layer_pattern or "", train.pipeline_layout)
        out["mamba_state_dim"] = model.mamba_state_dim
        out["mamba_head_dim"] = model.mamba_head_dim
        out["mamba_num_groups"] = model.mamba_num_groups
        out["mamba_num_heads"] = model.mamba_heads
        if model.mamba_conv_kernel != 4:
            gaps.append(f"Mamba conv1d width {model.mamba_conv_kernel} (Megatron's MambaMixer has d_conv=4, no flag)")
    # ---- parallel layout
    out["tensor_model_parallel_size"] = train.tp
    out["pipeline_model_parallel_size"] = train.pp
    chunks = chunks_per_rank(train)
    if "megatron" not in train.schedule.framework_names and train.pp > 1:
        gaps.append(f"pipeline schedule {train.pipeline_schedule} (Megatron-LM runs 1F1B or interleaved 1F1B)")
        chunks = 1
    if train.pipeline_layout is not None and model.is_hybrid:
        pass  # the stages are the '|' of the hybrid pattern
    elif train.pipeline_layout is not None:
        out["pipeline_model_parallel_layout"] = format_pipeline_layout(train.pipeline_layout, model.mtp_num_layers)
    elif chunks > 1:
        uneven = (
            train.decoder_first_pipeline_num_layers is not None
            or train.decoder_last_pipeline_num_layers is not None
            or train.account_for_embedding_in_pipeline_split
            or train.account_for_loss_in_pipeline_split
        )
        if not uneven and model.num_layers % (train.pp * chunks) == 0:
            out["num_layers_per_virtual_pipeline_stage"] = model.num_layers // (train.pp * chunks)
        else:
            out["num_virtual_stages_per_pipeline_rank"] = chunks
    if train.pipeline_layout is None:
        if train.decoder_first_pipeline_num_layers is not None:
            out["decoder_first_pipeline_num_layers"] = train.decoder_first_pipeline_num_layers
        if train.decoder_last_pipeline_num_layers is not None:
            out["decoder_last_pipeline_num_layers"] = train.decoder_last_pipeline_num_layers
        if train.account_for_embedding_in_pipeline_split:
            out["account_for_embedding_in_pipeline_split"] = True
        if train.account_for_loss_in_pipeline_split:
            out["account_for_loss_in_pipeline_split"] = True
    out["context_parallel_size"] = train.cp
    if model.is_moe or train.ep > 1:
        out["expert_model_parallel_size"] = train.ep
    if train.expert_tensor_parallel_size is not None:
        out["expert_tensor_parallel_size"] = train.expert_tensor_parallel_size
    if train.sequence_parallel:
        out["sequence_parallel"] = True
    # ---- batch
    out["micro_batch_size"] = train.mbs
    out["global_batch_size"] = train.gbs
    out["seq_length"] = train.seq
    out["max_position_embeddings"] = train.seq
    # ---- recompute
    if train.recompute_granularity == "selective":
        out["recompute_granularity"] = "selective"
        if train.recompute_modules is not None:
            out["recompute_modules"] = list(train.recompute_modules)
    elif train.recompute_granularity == "full":
        out["recompute_granularity"] = "full"
        if train.recompute_layer_ids is not None:
            gaps.append(f"{RECOMPUTE_LAYER_IDS_GAP}: Megatron has no recompute by layer index (Primus does)")
            out["recompute_method"], out["recompute_num_layers"] = "uniform", 1
        elif train.recompute_num_layers is None:
            out["recompute_method"], out["recompute_num_layers"] = "uniform", 1
        else:
            out["recompute_method"], out["recompute_num_layers"] = train.recompute_method, train.recompute_num_layers
    out.update(knob_values(train))
    # ---- precision
    if train.precision == "fp16":
        out["fp16"] = True
    else:
        out["bf16"] = True
    if train.precision in PRECISION_TO_FP8_RECIPE:
        out["fp8"] = "hybrid"
        out["fp8_recipe"] = PRECISION_TO_FP8_RECIPE[train.precision]
    elif train.precision == "nvfp4":
        out["fp4"] = "e2m1"
        out["fp4_recipe"] = "nvfp4"
    if train.fp8_param_gather and train.precision in LOW_PRECISIONS:
        out["fp4_param_gather" if train.precision == "nvfp4" else "fp8_param_gather"] = True
    if train.bf16_edge_layers != (0, 0):
        out["first_last_layers_bf16"] = True
        out["num_layers_at_start_in_bf16"], out["num_layers_at_end_in_bf16"] = train.bf16_edge_layers
    # ---- data parallel sharding and overlap
    if train.fsdp or train.zero_stage >= 3:
        out["use_torch_fsdp2"] = True
    elif train.zero_stage == 2:
        out["use_megatron_fsdp"] = True
        out["data_parallel_sharding_strategy"] = "optim_grads"
    elif train.use_distributed_optimizer or train.zero_stage == 1:
        out["use_distributed_optimizer"] = True
    for dest in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap"):
        if getattr(train, dest):
            out[dest] = True
    runs_schedule = "megatron" in train.schedule.framework_names or train.pp == 1
    if train.moe_ep_overlap and runs_schedule:
        out["overlap_moe_expert_parallel_comm"] = True
    elif train.moe_ep_overlap:  # its 1F1B has no F&B pairs: megatron-core refuses the overlap (specs.knobs)
        gaps.append("EP overlap (Megatron-LM's 1F1B has no forward/backward pairs to run it in): left off")
    if not train.grad_reduce_in_fp32:
        out["grad_reduce_in_bf16"] = True
    if train.use_precision_aware_optimizer:
        out["use_precision_aware_optimizer"] = True
        for dest in ("main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            if getattr(train, dest) != "fp32":
                out[dest] = getattr(train, dest)
    if train.attention_backend == "unfused":
        out["attention_backend"] = "unfused"
    if not train.kernel_fusion:
        out.update(bias_swiglu_fusion=False, apply_rope_fusion=False, persist_layer_norm=False)
    if train.cross_entropy_fusion:
        out["cross_entropy_loss_fusion"] = True
    return out, gaps
