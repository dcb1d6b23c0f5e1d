"""HuggingFace `config.json`: read with the core reader (`paraplan.specs.hf`), written from a ModelSpec.

A config.json describes the model only, so reading gives default training settings, and writing picks the
model_type the core reader maps back to the same shape: llama (dense SwiGLU, `head_dim` when set), mixtral,
qwen3_moe / qwen2_moe (shared experts), deepseek_v3 (MLA), gpt2 (GELU, LayerNorm, learned positions) and
gpt_neox (GELU, LayerNorm, rotary), nemotron_h (a hybrid layer pattern: Mamba-2, attention, MLP and MoE blocks),
qwen3_next (Gated DeltaNet), llama4_text (chunked attention) and gpt_oss (sliding-window attention with sinks).
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
    if model.linear_attention_freq:
        return _qwen3_next(model, common, gaps)
    if model.attention_chunk_size:
        return _llama4(model, common, gaps)
    if model.window_size:
        return _gpt_oss(model, common, gaps)
    dense_llama = model.activation == "swiglu" and model.norm == "rmsnorm" and model.position == "rope"
    if model.is_mla:
        shared = model.moe_shared_expert_intermediate_size
        if model.is_moe and shared % model.expert_ffn:
            gaps.append(f"shared expert width {shared} is not a multiple of the expert width {model.expert_ffn}")
        sparse = model.dsa_indexer_n_heads > 0
        indexer = (
            {
                "index_n_heads": model.dsa_indexer_n_heads,
                "index_head_dim": model.dsa_indexer_head_dim,
                "index_topk": model.dsa_indexer_topk,
            }
            if sparse
            else {}
        )
        return {
            "architectures": ["DeepseekV32ForCausalLM" if sparse else "DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v32" if sparse else "deepseek_v3",
            **indexer,
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


def _qwen3_next(model: ModelSpec, common: dict[str, Any], gaps: list[str]) -> dict[str, Any]:
    """transformers Qwen3NextConfig: Gated DeltaNet layers, every n-th gated full attention, MoE."""
    n = model.linear_attention_freq
    if not model.attention_output_gate:
        gaps.append("qwen3_next's full attention always has an output gate: written with one")
    if model.activation != "swiglu" or model.norm != "rmsnorm" or not model.is_moe:
        gaps.append(f"qwen3_next has SwiGLU experts and RMSNorm (got {model.activation}, {model.norm})")
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        **common,
        "intermediate_size": model.ffn_hidden_size,
        "num_key_value_heads": model.kv_groups,
        "head_dim": model.head_dim,
        "hidden_act": "silu",
        "attention_bias": model.attention_bias,
        "layer_types": ["full_attention" if (i + 1) % n == 0 else "linear_attention" for i in range(model.num_layers)],
        "full_attention_interval": n,
        "linear_conv_kernel_dim": model.linear_conv_kernel_dim,
        "linear_key_head_dim": model.linear_key_head_dim,
        "linear_value_head_dim": model.linear_value_head_dim,
        "linear_num_key_heads": model.linear_num_key_heads,
        "linear_num_value_heads": model.linear_num_value_heads,
        "num_experts": model.num_experts,
        "moe_intermediate_size": model.expert_ffn,
        "shared_expert_intermediate_size": model.moe_shared_expert_intermediate_size,
        "num_experts_per_tok": model.moe_router_topk,
        "decoder_sparse_step": model.moe_layer_freq,
        "mlp_only_layers": list(range(model.moe_first_k_dense)),
        "rms_norm_eps": 1e-6,
    }


def _llama4(model: ModelSpec, common: dict[str, Any], gaps: list[str]) -> dict[str, Any]:
    """transformers Llama4TextConfig (`llama4_text`, the text model alone): chunked attention, interleaved MoE."""
    step = model.moe_layer_freq
    if model.moe_first_k_dense != step - 1 or model.moe_shared_expert_intermediate_size != model.expert_ffn:
        gaps.append("llama4 places MoE on layers step-1, 2·step-1, ... with a shared expert as wide as a routed one")
    if model.activation != "swiglu" or model.norm != "rmsnorm":
        gaps.append(f"llama4 has SwiGLU and RMSNorm (got {model.activation}, {model.norm})")
    return {
        "architectures": ["Llama4ForCausalLM"],
        "model_type": "llama4_text",
        **common,
        "intermediate_size": model.expert_ffn,
        "intermediate_size_mlp": model.ffn_hidden_size,
        "num_key_value_heads": model.kv_groups,
        "head_dim": model.head_dim,
        "hidden_act": "silu",
        "attention_bias": model.attention_bias,
        "num_local_experts": model.num_experts,
        "num_experts_per_tok": model.moe_router_topk,
        "interleave_moe_layer_step": step,
        "attention_chunk_size": model.attention_chunk_size,
        "no_rope_layer_interval": model.nope_layer_interval,
        "rms_norm_eps": 1e-5,
    }


def _gpt_oss(model: ModelSpec, common: dict[str, Any], gaps: list[str]) -> dict[str, Any]:
    """transformers GptOssConfig: sliding-window layers (HF `sliding_window` counts the query's own key) with every
    n-th full attention, attention sinks, every layer MoE without a shared expert."""
    every = model.window_attn_skip_freq
    unmatched = (
        not model.is_moe
        or model.moe_shared_expert_intermediate_size
        or model.moe_first_k_dense
        or model.moe_layer_freq != 1
        or model.activation != "swiglu"
        or model.norm != "rmsnorm"
    )
    if unmatched:
        gaps.append("gpt_oss has SwiGLU experts in every layer, no shared expert, RMSNorm")
    if model.softmax_type != "learnable":
        gaps.append(f"gpt_oss attention always has learned sinks (softmax {model.softmax_type}): written with them")
    if not model.moe_expert_linear_bias:
        gaps.append("gpt_oss experts always have biases: written with them")
    factor = model.yarn_rotary_scaling_factor
    yarn = {"rope_type": "yarn", "factor": factor} if factor else None
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        **common,
        "intermediate_size": model.expert_ffn,
        "num_key_value_heads": model.kv_groups,
        "head_dim": model.head_dim,
        "hidden_act": "silu",
        "attention_bias": model.attention_bias,
        "num_local_experts": model.num_experts,
        "num_experts_per_tok": model.moe_router_topk,
        "experts_per_token": model.moe_router_topk,
        "sliding_window": model.window_size + 1,
        "layer_types": [
            "full_attention" if every and (i + 1) % every == 0 else "sliding_attention" for i in range(model.num_layers)
        ],
        "rms_norm_eps": 1e-5,
        "swiglu_limit": model.activation_func_clamp_value,
        "rope_scaling": yarn,
    }


def write_hf(model: ModelSpec, system: SystemSpec, train: TrainingSpec, *, strict: bool = False) -> str:
    """config.json for the model (training settings have no place in it)."""
    gaps: list[str] = []
    config = hf_config(model, gaps)
    notes = finish_gaps(gaps, strict, "config.json")
    if notes:
        config["_paraplan_notes"] = notes
    return json.dumps(config, indent=2) + "\n"
