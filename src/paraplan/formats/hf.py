"""HuggingFace `config.json`: read with the core reader (`paraplan.specs.hf`), written from a ModelSpec.

A config.json describes the model only, so reading gives default training settings, and writing picks the
model_type the core reader maps back to the same shape: llama (dense SwiGLU, `head_dim` when set), mixtral,
qwen3_moe / qwen2_moe (shared experts), deepseek_v3 (MLA), gpt2 (GELU, LayerNorm, learned positions) and
gpt_neox (GELU, LayerNorm, rotary), nemotron_h (a hybrid layer pattern: Mamba-2, attention, MLP and MoE blocks).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from paraplan.formats.common import ReadConfig, SystemHints, finish_gaps, load_text
from paraplan.specs.hf import HF_ACTIVATIONS, HF_LAYER_SYMBOLS, load_hf_config
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec


def read_hf(path_or_text: str | Path, *, num_gpus: int | None = None) -> ReadConfig:
    text, source, path = load_text(path_or_text)
    if path is not None:
        model = load_hf_config(path)
    else:
        with tempfile.TemporaryDirectory() as folder:
            file = Path(folder) / "model" / "config.json"
            file.parent.mkdir()
            file.write_text(text)
            model = load_hf_config(file)
        model = ModelSpec(**{**{f: getattr(model, f) for f in model.__slots__}, "source": "config.json text"})
    return ReadConfig(model, TrainingSpec(), SystemHints(num_gpus=num_gpus, source=source))


def hf_config(model: ModelSpec, gaps: list[str]) -> dict[str, Any]:
    common: dict[str, Any] = {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "vocab_size": model.vocab_size,
        "tie_word_embeddings": model.tied_embeddings,
    }
    if model.is_hybrid:
        return _nemotron_h(model, common, gaps)
    dense_llama = model.activation == "swiglu" and model.norm == "rmsnorm" and model.position == "rope"
    if model.is_mla:
        shared = model.moe_shared_expert_intermediate_size
        if model.is_moe and shared % model.expert_ffn:
            gaps.append(f"shared expert width {shared} is not a multiple of the expert width {model.expert_ffn}")
        return {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            **common,
            "intermediate_size": model.ffn_hidden_size,
            "num_key_value_heads": model.num_attention_heads,
            "hidden_act": "silu",
            "n_routed_experts": model.num_experts,
            "moe_intermediate_size": model.expert_ffn,
            "n_shared_experts": shared // model.expert_ffn if model.is_moe else 0,
            "num_experts_per_tok": model.moe_router_topk,
            "first_k_dense_replace": model.moe_first_k_dense,
            "moe_layer_freq": model.moe_layer_freq,
            "q_lora_rank": model.q_lora_rank,
            "kv_lora_rank": model.kv_lora_rank,
            "qk_nope_head_dim": model.qk_nope_head_dim,
            "qk_rope_head_dim": model.qk_rope_head_dim,
            "v_head_dim": model.v_head_dim,
            "num_nextn_predict_layers": model.mtp_num_layers,
            "rms_norm_eps": 1e-6,
        }
    if model.activation == "gelu" and model.norm == "layernorm":
        if model.position == "learned":
            if model.num_query_groups not in (None, model.num_attention_heads) or not model.tied_embeddings:
                gaps.append("GPT-2 configs have tied embeddings and no GQA")
            if not (model.attention_bias and model.dropout):
                gaps.append("GPT-2 configs have biases and dropout")
            return {
                "architectures": ["GPT2LMHeadModel"],
                "model_type": "gpt2",
                "n_layer": model.num_layers,
                "n_embd": model.hidden_size,
                "n_head": model.num_attention_heads,
                "n_inner": model.ffn_hidden_size,
                "vocab_size": model.vocab_size,
                "activation_function": "gelu_new",
            }
        if not model.attention_bias or model.dropout or model.num_query_groups not in (None, model.num_attention_heads):
            gaps.append("GPT-NeoX configs have biases, no dropout and no GQA")
        return {
            "architectures": ["GPTNeoXForCausalLM"],
            "model_type": "gpt_neox",
            **common,
            "intermediate_size": model.ffn_hidden_size,
            "hidden_act": "gelu",
        }
    if not dense_llama:
        gaps.append(
            f"{model.activation}/{model.norm}/{model.position} has no config.json type the reader maps back: "
            "written as llama"
        )
    llama: dict[str, Any] = {
        **common,
        "intermediate_size": model.ffn_hidden_size,
        "num_key_value_heads": model.kv_groups,
        "hidden_act": "silu",
        "attention_bias": model.attention_bias,
        "rms_norm_eps": 1e-5,
    }
    if model.kv_channels:
        llama["head_dim"] = model.kv_channels
    if not model.is_moe:
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **llama}
    mixtral_like = (
        model.expert_ffn == model.ffn_hidden_size
        and not model.moe_shared_expert_intermediate_size
        and model.moe_first_k_dense == 0
        and model.moe_layer_freq == 1
        and not model.kv_channels
    )
    if mixtral_like:
        return {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            **llama,
            "num_local_experts": model.num_experts,
            "num_experts_per_tok": model.moe_router_topk,
        }
    qwen = "qwen2_moe" if model.moe_shared_expert_intermediate_size else "qwen3_moe"
    out = {
        "architectures": ["Qwen2MoeForCausalLM" if qwen == "qwen2_moe" else "Qwen3MoeForCausalLM"],
        "model_type": qwen,
        **llama,
        "num_experts": model.num_experts,
        "moe_intermediate_size": model.expert_ffn,
        "num_experts_per_tok": model.moe_router_topk,
        "decoder_sparse_step": model.moe_layer_freq,
        "mlp_only_layers": list(range(model.moe_first_k_dense)),
    }
    if model.moe_shared_expert_intermediate_size:
        out["shared_expert_intermediate_size"] = model.moe_shared_expert_intermediate_size
    return out


def _nemotron_h(model: ModelSpec, common: dict[str, Any], gaps: list[str]) -> dict[str, Any]:
    """transformers NemotronHConfig: the pattern both as `hybrid_override_pattern` and as `layers_block_type`."""
    pattern = model.hybrid_layer_pattern or ""
    to_type = {symbol: name for name, symbol in HF_LAYER_SYMBOLS.items()}
    to_act = {ours: theirs for theirs, ours in HF_ACTIVATIONS.items()}
    if model.activation not in to_act or model.norm != "rmsnorm" or model.position != "none":
        gaps.append(f"nemotron_h has RMSNorm, no positional embedding and relu2 MLPs (got {model.activation}, "
                    f"{model.norm}, {model.position})")  # fmt: skip
    out: dict[str, Any] = {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        **common,
        "hybrid_override_pattern": pattern,
        "layers_block_type": [to_type[symbol] for symbol in pattern],
        "intermediate_size": model.ffn_hidden_size,
        "num_key_value_heads": model.kv_groups,
        "head_dim": model.head_dim,
        "attention_bias": model.attention_bias,
        "mlp_hidden_act": to_act.get(model.activation, "relu2"),
        "ssm_state_size": model.mamba_state_dim,
        "mamba_num_heads": model.mamba_heads,
        "mamba_head_dim": model.mamba_head_dim,
        "n_groups": model.mamba_num_groups,
        "conv_kernel": model.mamba_conv_kernel,
        "layer_norm_epsilon": 1e-5,
    }
    if model.is_moe:
        out.update(
            n_routed_experts=model.num_experts,
            moe_intermediate_size=model.expert_ffn,
            num_experts_per_tok=model.moe_router_topk,
            n_shared_experts=1 if model.moe_shared_expert_intermediate_size else 0,
            moe_shared_expert_intermediate_size=model.moe_shared_expert_intermediate_size,
        )
    return out


def write_hf(model: ModelSpec, system: SystemSpec, train: TrainingSpec, *, strict: bool = False) -> str:
    """config.json for the model (training settings have no place in it)."""
    gaps: list[str] = []
    config = hf_config(model, gaps)
    notes = finish_gaps(gaps, strict, "config.json")
    if notes:
        config["_paraplan_notes"] = notes
    return json.dumps(config, indent=2) + "\n"
