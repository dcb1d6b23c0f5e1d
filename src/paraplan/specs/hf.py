"""Read a local HuggingFace `config.json` into a ModelSpec, offline.

Architectures: Llama, Mistral, Mixtral, Qwen2/Qwen3, Qwen3-MoE, DeepSeek-V2/V3, GPT-2, GPT-NeoX, and the hybrid
Mamba-2 models (Nemotron-H, Nemotron 3: `nemotron_h`, with `hybrid_override_pattern` or `layers_block_type`). Both the
legacy (`rope_scaling`, `torch_dtype`) and newer (`rope_parameters`, `dtype`) keys are accepted; neither
affects cost, so they are only checked for type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paraplan.errors import ConfigError
from paraplan.specs.model import ModelSpec

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
    "gpt2": "gpt2",
    "gpt_neox": "neox",
    "nemotron_h": "nemotron_h",
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
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"model config file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
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
