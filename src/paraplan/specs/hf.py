"""Read a local HuggingFace `config.json` into a ModelSpec, offline.

Architectures: Llama, Mistral, Mixtral, Qwen2/Qwen3, Qwen3-MoE, DeepSeek-V2/V3, GPT-2, GPT-NeoX, the hybrid Mamba-2
models (Nemotron-H, Nemotron 3: `nemotron_h`, with `hybrid_override_pattern` or `layers_block_type`), Qwen3-Next
(`qwen3_next`: Gated DeltaNet among gated full attention, `layer_types` or `full_attention_interval`), Llama 4
(`llama4` with its `text_config`, or `llama4_text`: chunked attention between NoPE global layers, interleaved MoE)
and gpt-oss (`gpt_oss`: sliding-window layers between global ones, attention sinks, MoE). Both the legacy
(`rope_scaling`, `torch_dtype`) and newer (`rope_parameters`, `dtype`) keys are accepted; they are only checked for
type, but for gpt-oss's YaRN factor (megatron-core runs its RoPE unfused: `graph.layers.fused_rope_available`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paraplan.errors import ConfigError
from paraplan.specs.model import ModelSpec
from paraplan.textfiles import load_json, read_text_file

_SUPPORTED = {
    "llama": "llama",
    "mistral": "llama",
    "mixtral": "mixtral",
    "qwen2": "llama",
    "qwen3": "llama",
    "qwen2_moe": "qwen_moe",
    "qwen3_moe": "qwen_moe",
    "deepseek_v2": "deepseek",
    "deepseek_v3": "deepseek",
    "deepseek_v32": "deepseek",
    "gpt2": "gpt2",
    "gpt_neox": "neox",
    "nemotron_h": "nemotron_h",
    "qwen3_next": "qwen3_next",
    "llama4": "llama4",
    "llama4_text": "llama4",
    "gpt_oss": "gpt_oss",
}

# transformers 5.23.0 NemotronHConfig: `layers_block_type` names and their `hybrid_override_pattern` symbols
HF_LAYER_SYMBOLS = {"linear_attention": "M", "full_attention": "*", "mlp": "-", "moe": "E"}
HF_ACTIVATIONS = {"relu2": "squared_relu", "silu": "swiglu", "gelu": "gelu", "relu": "relu"}


def _require(cfg: dict[str, Any], path: Path, *keys: str) -> list[str]:
    return [
        f"{path}: missing field '{k}' required for model_type '{cfg.get('model_type')}'" for k in keys if k not in cfg
    ]


def load_hf_config(path: str | Path) -> ModelSpec:
    path = Path(path)
    cfg = load_json(read_text_file(path, "model config"), str(path))
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: expected a JSON object at the top level")
    model_type = str(cfg.get("model_type", "")).lower()
    family = _SUPPORTED.get(model_type)
    if family is None:
        raise ConfigError(
            f"{path}: model_type '{model_type}' is not supported; supported: {', '.join(sorted(_SUPPORTED))}"
        )
    name = path.parent.name or path.stem
    if family == "gpt2":
        problems = _require(cfg, path, "n_layer", "n_embd", "n_head", "vocab_size")
        if problems:
            raise ConfigError(problems)
        return ModelSpec(
            name=name,
            num_layers=cfg["n_layer"],
            hidden_size=cfg["n_embd"],
            ffn_hidden_size=cfg.get("n_inner") or 4 * cfg["n_embd"],
            num_attention_heads=cfg["n_head"],
            vocab_size=cfg["vocab_size"],
            activation="gelu",
            norm="layernorm",
            position="learned",
            tied_embeddings=True,
            attention_bias=True,
            dropout=True,
            source=str(path),
        )
    if family == "nemotron_h":
        return _nemotron_h(cfg, path, name)
    if family == "qwen3_next":
        return _qwen3_next(cfg, path, name)
    if family == "llama4":
        return _llama4(cfg.get("text_config", cfg) if model_type == "llama4" else cfg, path, name)
    if family == "gpt_oss":
        return _gpt_oss(cfg, path, name)
    problems = _require(cfg, path, "num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
    if family != "neox":
        problems += _require(cfg, path, "intermediate_size")
    if problems:
        raise ConfigError(problems)
    for key in ("rope_scaling", "rope_parameters"):
        if cfg.get(key) is not None and not isinstance(cfg[key], dict):
            raise ConfigError(f"{path}: '{key}' must be an object or null")
    common: dict[str, Any] = dict(
        name=name,
        num_layers=cfg["num_hidden_layers"],
        hidden_size=cfg["hidden_size"],
        num_attention_heads=cfg["num_attention_heads"],
        vocab_size=cfg["vocab_size"],
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        source=str(path),
    )
    if family == "neox":
        return ModelSpec(
            ffn_hidden_size=cfg.get("intermediate_size") or 4 * cfg["hidden_size"],
            activation="gelu",
            norm="layernorm",
            attention_bias=True,
            **common,
        )
    common["ffn_hidden_size"] = cfg["intermediate_size"]
    common["num_query_groups"] = cfg.get("num_key_value_heads")
    common["kv_channels"] = cfg.get("head_dim")
    common["attention_bias"] = bool(cfg.get("attention_bias", model_type == "qwen2"))
    if family == "mixtral":
        return ModelSpec(
            num_experts=cfg.get("num_local_experts", 8),
            moe_ffn_hidden_size=cfg["intermediate_size"],
            moe_router_topk=cfg.get("num_experts_per_tok", 2),
            **common,
        )
    if family == "qwen_moe":
        problems = _require(cfg, path, "num_experts", "moe_intermediate_size", "num_experts_per_tok")
        if problems:
            raise ConfigError(problems)
        mlp_only = cfg.get("mlp_only_layers") or []
        return ModelSpec(
            num_experts=cfg["num_experts"],
            moe_ffn_hidden_size=cfg["moe_intermediate_size"],
            moe_router_topk=cfg["num_experts_per_tok"],
            moe_shared_expert_intermediate_size=cfg.get("shared_expert_intermediate_size", 0) or 0,
            moe_layer_freq=cfg.get("decoder_sparse_step", 1) or 1,
            moe_first_k_dense=len(mlp_only),
            **common,
        )
    if family == "deepseek":
        problems = _require(
            cfg, path, "n_routed_experts", "moe_intermediate_size", "num_experts_per_tok", "kv_lora_rank"
        )
        if problems:
            raise ConfigError(problems)
        common.pop("kv_channels")
        common["num_query_groups"] = None
        return ModelSpec(
            num_experts=cfg["n_routed_experts"],
            moe_ffn_hidden_size=cfg["moe_intermediate_size"],
            moe_router_topk=cfg["num_experts_per_tok"],
            moe_shared_expert_intermediate_size=(cfg.get("n_shared_experts") or 0) * cfg["moe_intermediate_size"],
            moe_first_k_dense=cfg.get("first_k_dense_replace", 0) or 0,
            moe_layer_freq=cfg.get("moe_layer_freq", 1) or 1,
            q_lora_rank=cfg.get("q_lora_rank"),
            kv_lora_rank=cfg["kv_lora_rank"],
            qk_nope_head_dim=cfg.get("qk_nope_head_dim", 128),
            qk_rope_head_dim=cfg.get("qk_rope_head_dim", 64),
            v_head_dim=cfg.get("v_head_dim", 128),
            mtp_num_layers=cfg.get("num_nextn_predict_layers", 0) or 0,
            # DeepSeek-V3.2 (transformers DeepseekV32Config): the sparse-attention indexer, defaults 64 x 128, top-2048
            dsa_indexer_n_heads=cfg.get("index_n_heads", 64) if model_type == "deepseek_v32" else 0,
            dsa_indexer_head_dim=cfg.get("index_head_dim", 128),
            dsa_indexer_topk=cfg.get("index_topk", 2048),
            **common,
        )
    return ModelSpec(**common)


def _nemotron_h(cfg: dict[str, Any], path: Path, name: str) -> ModelSpec:
    """Nemotron-H / Nemotron 3 (transformers NemotronHConfig): the block pattern from `hybrid_override_pattern` or
    `layers_block_type`; fields the file leaves out take NemotronHConfig's defaults, as transformers does."""
    problems = _require(cfg, path, "hidden_size", "num_attention_heads", "vocab_size", "intermediate_size")
    pattern = cfg.get("hybrid_override_pattern")
    blocks = cfg.get("layers_block_type") or cfg.get("layer_types")
    if pattern is None and blocks is not None:
        unknown = sorted({b for b in blocks if b not in HF_LAYER_SYMBOLS})
        if unknown:
            problems.append(f"{path}: layers_block_type has unknown types {unknown} ({', '.join(HF_LAYER_SYMBOLS)})")
        pattern = "".join(HF_LAYER_SYMBOLS.get(b, "?") for b in blocks)
    if pattern is None:
        problems.append(f"{path}: nemotron_h needs 'hybrid_override_pattern' or 'layers_block_type'")
    act = str(cfg.get("mlp_hidden_act", "relu2"))
    if act not in HF_ACTIVATIONS:
        problems.append(f"{path}: mlp_hidden_act '{act}' is not one of {', '.join(HF_ACTIVATIONS)}")
    if problems:
        raise ConfigError(problems)
    assert pattern is not None
    moe = "E" in pattern
    shared = cfg.get("moe_shared_expert_intermediate_size", 7688) if cfg.get("n_shared_experts", 1) else 0
    return ModelSpec(
        name=name,
        num_layers=len(pattern),
        hybrid_layer_pattern=pattern,
        hidden_size=cfg["hidden_size"],
        ffn_hidden_size=cfg["intermediate_size"],
        num_attention_heads=cfg["num_attention_heads"],
        num_query_groups=cfg.get("num_key_value_heads", 8),
        kv_channels=cfg.get("head_dim", 128),
        vocab_size=cfg["vocab_size"],
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        activation=HF_ACTIVATIONS[act],  # type: ignore[arg-type]
        position="none",
        attention_bias=bool(cfg.get("attention_bias", False)),
        mamba_state_dim=cfg.get("ssm_state_size", 128),
        mamba_head_dim=cfg.get("mamba_head_dim", 64),
        mamba_num_groups=cfg.get("n_groups", cfg.get("mamba_n_groups", 8)),
        mamba_num_heads=cfg.get("mamba_num_heads", 128),
        mamba_conv_kernel=cfg.get("conv_kernel", cfg.get("mamba_d_conv", 4)),
        num_experts=cfg.get("n_routed_experts", 8) if moe else 0,
        moe_ffn_hidden_size=cfg.get("moe_intermediate_size", 7688) if moe else None,
        moe_router_topk=cfg.get("num_experts_per_tok", 2) if moe else 0,
        moe_shared_expert_intermediate_size=shared if moe else 0,
        source=str(path),
    )


def full_attention_interval(layer_types: list[str], where: str, problems: list[str]) -> int:
    """n such that layer i is full attention exactly when (i + 1) % n == 0 (Megatron's `linear_attention_freq`)."""
    unknown = sorted(set(layer_types) - {"linear_attention", "full_attention"})
    if unknown:
        problems.append(f"{where}: layer_types has unknown types {unknown} (linear_attention, full_attention)")
        return 0
    if "full_attention" not in layer_types:
        problems.append(f"{where}: layer_types has no full_attention layer (paraplan models every n-th one)")
        return 0
    n = layer_types.index("full_attention") + 1
    expected = ["full_attention" if (i + 1) % n == 0 else "linear_attention" for i in range(len(layer_types))]
    if layer_types != expected:
        problems.append(f"{where}: layer_types is not every {n}-th layer full attention, which paraplan models")
    return n


def _qwen3_next(cfg: dict[str, Any], path: Path, name: str) -> ModelSpec:
    """Qwen3-Next (transformers Qwen3NextConfig): Gated DeltaNet layers with every n-th layer gated full attention;
    fields the file leaves out take Qwen3NextConfig's defaults (transformers 5.23.0)."""
    problems = _require(cfg, path, "num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
    layers = cfg.get("num_hidden_layers", 0)
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if len(layer_types) != layers:
            problems.append(f"{path}: layer_types has {len(layer_types)} entries for {layers} layers")
        interval = full_attention_interval(list(layer_types), str(path), problems)
    else:
        interval = cfg.get("full_attention_interval", 4)
    if problems:
        raise ConfigError(problems)
    experts = cfg.get("num_experts", 512)
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=cfg["hidden_size"],
        ffn_hidden_size=cfg.get("intermediate_size", 5632),
        num_attention_heads=cfg["num_attention_heads"],
        num_query_groups=cfg.get("num_key_value_heads", 2),
        kv_channels=cfg.get("head_dim", 256),
        vocab_size=cfg["vocab_size"],
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", False)),
        attention_output_gate=True,  # Qwen3NextAttention always gates its output
        num_experts=experts,
        moe_ffn_hidden_size=cfg.get("moe_intermediate_size", 512) if experts else None,
        moe_router_topk=cfg.get("num_experts_per_tok", 10) if experts else 0,
        moe_shared_expert_intermediate_size=cfg.get("shared_expert_intermediate_size", 512) if experts else 0,
        moe_layer_freq=cfg.get("decoder_sparse_step", 1) or 1,
        moe_first_k_dense=len(cfg.get("mlp_only_layers") or []),
        linear_attention_freq=interval,
        linear_conv_kernel_dim=cfg.get("linear_conv_kernel_dim", 4),
        linear_key_head_dim=cfg.get("linear_key_head_dim", 128),
        linear_value_head_dim=cfg.get("linear_value_head_dim", 128),
        linear_num_key_heads=cfg.get("linear_num_key_heads", 16),
        linear_num_value_heads=cfg.get("linear_num_value_heads", 32),
        source=str(path),
    )


def _llama4(cfg: dict[str, Any], path: Path, name: str) -> ModelSpec:
    """Llama 4's text model (transformers Llama4TextConfig, 5.23.0): MoE layers every `interleave_moe_layer_step`
    (layers step-1, 2·step-1, ...), one shared expert as wide as a routed one, RoPE layers chunked and every
    `no_rope_layer_interval`-th layer NoPE and global; fields the file leaves out take Llama4TextConfig's defaults."""
    problems = _require(cfg, path, "num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
    layers = cfg.get("num_hidden_layers", 0)
    step = cfg.get("interleave_moe_layer_step", 1) or 1
    moe_layers = cfg.get("moe_layers")
    if moe_layers is not None and list(moe_layers) != list(range(step - 1, layers, step)):
        problems.append(f"{path}: moe_layers {moe_layers} is not every {step}-th layer, which paraplan models")
    interval = cfg.get("no_rope_layer_interval", 4)
    no_rope = cfg.get("no_rope_layers")
    if no_rope is not None and list(no_rope) != [int((i + 1) % interval != 0) for i in range(layers)]:
        problems.append(f"{path}: no_rope_layers is not every {interval}-th layer NoPE, which paraplan models")
    if problems:
        raise ConfigError(problems)
    expert_ffn = cfg.get("intermediate_size", 8192)
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=cfg["hidden_size"],
        ffn_hidden_size=cfg.get("intermediate_size_mlp", 16384),
        num_attention_heads=cfg["num_attention_heads"],
        num_query_groups=cfg.get("num_key_value_heads", 8),
        kv_channels=cfg.get("head_dim", 128),
        vocab_size=cfg["vocab_size"],
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", False)),
        num_experts=cfg.get("num_local_experts", 16),
        moe_ffn_hidden_size=expert_ffn,
        moe_router_topk=cfg.get("num_experts_per_tok", 1),
        moe_shared_expert_intermediate_size=expert_ffn,  # Llama4TextMoe: one shared expert of intermediate_size
        moe_first_k_dense=step - 1,
        moe_layer_freq=step,
        attention_chunk_size=cfg.get("attention_chunk_size", 8192) or 0,
        nope_layer_interval=interval,
        source=str(path),
    )


def _gpt_oss(cfg: dict[str, Any], path: Path, name: str) -> ModelSpec:
    """gpt-oss (transformers GptOssConfig; openai/gpt-oss-20b's config.json as quoted in the model-configs data): every
    layer MoE (`num_local_experts` of `intermediate_size`, top `num_experts_per_tok`), `layer_types` alternating
    sliding_attention (a window of `sliding_window` keys counting the query's own) and full_attention, attention
    biases and learned sinks (GptOssAttention's `sinks`, one per head). No field is defaulted: the file gives them."""
    experts_per_token = cfg.get("num_experts_per_tok", cfg.get("experts_per_token"))
    problems = _require(
        cfg, path, "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
        "num_key_value_heads", "head_dim", "vocab_size", "num_local_experts", "sliding_window",
    )  # fmt: skip
    if experts_per_token is None:
        problems.append(f"{path}: missing field 'num_experts_per_tok' required for model_type 'gpt_oss'")
    if problems:
        raise ConfigError(problems)
    layers = cfg["num_hidden_layers"]
    alternating = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    layer_types = cfg.get("layer_types") or alternating  # GptOssConfig's default: alternating, sliding first
    every = 0
    if "full_attention" in layer_types:
        every = layer_types.index("full_attention") + 1
    expected = ["full_attention" if every and (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]
    if list(layer_types) != expected:
        raise ConfigError(
            f"{path}: layer_types is not sliding_attention with every n-th layer full_attention, which paraplan models"
        )
    window = cfg["sliding_window"]
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise ConfigError(f"{path}: sliding_window must be an integer of at least 2 keys (got {window!r})")
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=cfg["hidden_size"],
        ffn_hidden_size=cfg["intermediate_size"],
        num_attention_heads=cfg["num_attention_heads"],
        num_query_groups=cfg["num_key_value_heads"],
        kv_channels=cfg["head_dim"],
        vocab_size=cfg["vocab_size"],
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", True)),
        num_experts=cfg["num_local_experts"],
        moe_ffn_hidden_size=cfg["intermediate_size"],
        moe_router_topk=experts_per_token,
        window_size=window - 1,  # HF counts the query's own key; paraplan (as Megatron) the keys before it
        window_attn_skip_freq=every,
        softmax_type="learnable",
        yarn_rotary_scaling_factor=_yarn_factor(cfg),
        activation_func_clamp_value=float(cfg.get("swiglu_limit") or 0.0),
        moe_expert_linear_bias=True,  # GptOssExperts always has gate_up_proj_bias and down_proj_bias
        source=str(path),
    )


def _yarn_factor(cfg: dict[str, Any]) -> float:
    """The YaRN scaling factor of `rope_scaling` (or the newer `rope_parameters`), 0 for another RoPE type."""
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if not isinstance(scaling, dict):
        raise ConfigError("'rope_scaling' / 'rope_parameters' must be an object or null")
    kind = scaling.get("rope_type", scaling.get("type"))
    return float(scaling.get("factor") or 0.0) if kind == "yarn" else 0.0
