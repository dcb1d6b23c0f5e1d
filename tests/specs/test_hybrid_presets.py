"""The hybrid presets project and tune, and a HuggingFace nemotron_h config.json reads to the preset's shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import paraplan
from paraplan.errors import ConfigError
from paraplan.formats.common import same_shape
from paraplan.projection import project_specs
from paraplan.specs.hf import load_hf_config
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.validate import layout_problems
from paraplan.tune.candidate import TuneProblem, to_training
from paraplan.tune.space import parse_constraints
from paraplan.tune.tuner import TuneOptions, tune

HYBRIDS = {  # preset: (tp, ep) that the model splits over
    "nemotron-h-8b": (8, 1),
    "nemotron-h-56b": (8, 1),
    "nemotron-3-nano-30b-a3b": (2, 8),
    "qwen3-next-80b-a3b": (2, 32),
    "llama4-scout": (8, 8),
    "llama4-maverick": (8, 8),
    "deepseek-v3.2": (8, 8),
    "gpt-oss-120b": (2, 8),
    "gpt-oss-20b": (2, 8),
    "kimi-k2": (8, 8),
    "qwen3-8b": (8, 1),
    "qwen3-32b": (8, 1),
}


@pytest.mark.parametrize("preset", sorted(HYBRIDS))
def test_hybrid_preset_projects_with_a_breakdown_by_kind(preset: str) -> None:
    tp, ep = HYBRIDS[preset]
    r = paraplan.project(preset, "h100-sxm5-80gb", 64, tp=tp, ep=ep, etp=1, sp=True, gbs=64, seq=8192)
    assert r.step_time_s > 0 and r.memory.peak_gib > 0
    assert 0.05 < r.mfu < 0.7


TUNES = {  # preset: GPUs, axes fixed beyond the common ones to keep the tune small, the largest pp
    "nemotron-h-8b": (16, [], 2),
    "nemotron-h-56b": (64, ["tp=8", "recompute=none"], 2),
    "nemotron-3-nano-30b-a3b": (16, [], 2),
    "qwen3-next-80b-a3b": (64, [], 2),
    "llama4-scout": (64, ["tp=4", "recompute=none"], 2),
    "llama4-maverick": (128, ["tp=8", "recompute=none", "etp=1,2"], 2),
    # 61 layers split over 7 stages counting the embedding and the loss as layers (63 = 7 x 9)
    "deepseek-v3.2": (448, ["tp=1", "pp=7", "etp=1", "ep=32,64"], 8),
    "gpt-oss-120b": (64, ["recompute=none", "etp=1"], 2),
    "gpt-oss-20b": (16, ["etp=1"], 2),
    "kimi-k2": (448, ["tp=1", "pp=7", "etp=1", "ep=32,64"], 8),  # 61 layers + embedding + loss = 7 x 9
    "qwen3-8b": (8, [], 2),
    "qwen3-32b": (32, ["recompute=none"], 2),
}


@pytest.mark.parametrize("preset", sorted(TUNES))
def test_hybrid_preset_tunes(preset: str) -> None:
    """A tiny tune (1F1B, distributed optimizer, bf16, mbs 1)."""
    gpus, fixes, max_pp = TUNES[preset]
    problem = TuneProblem(model_preset(preset), (system_preset("h100-sxm5-80gb", gpus),), 2 * gpus, 4096)
    fixes = ["schedule=1f1b", "sharding=dist_opt", "precision=bf16", *fixes]
    limits = parse_constraints(fixes, {"pp": max_pp, "cp": 1, "mbs": 1})
    result = tune(problem, limits, TuneOptions(executor="serial", top_k=3, seed_planner=False))
    assert result.top and result.top[0].fits and result.top[0].step_time_s > 0
    model = model_preset(preset)
    for e in result.top:  # every plan kept is legal: Mamba groups split over tp, pipelines split by the layers' work
        train = e.train or to_training(problem, e.candidate)
        system = problem.system(e.candidate.num_gpus)
        assert layout_problems(model, system, train) == [], e.candidate.describe()
        assert model.mamba_num_groups % train.tp == 0 and model.linear_num_key_heads % train.tp == 0
        assert train.pp == 1 or train.pipeline_layout is not None or not model.has_unequal_mixers
        projection = project_specs(model, system, train)
        assert projection.step_time_s == pytest.approx(e.step_time_s, rel=1e-12)


NEMOTRON_H_8B_HF = {  # transformers NemotronHConfig field names (5.23.0); the shape of the nemotron-h-8b preset
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "num_hidden_layers": 52,
    "hidden_size": 4096,
    "intermediate_size": 21504,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 131072,
    "mlp_hidden_act": "relu2",
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "tie_word_embeddings": False,
}


def _write(tmp_path: Path, cfg: dict) -> Path:
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(cfg))
    return path


def test_nemotron_h_config_json_reads_to_the_preset(tmp_path: Path) -> None:
    assert same_shape(load_hf_config(_write(tmp_path, NEMOTRON_H_8B_HF)), model_preset("nemotron-h-8b"))
    # the newer list form of the pattern
    as_list = dict(NEMOTRON_H_8B_HF)
    symbols = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    as_list["layers_block_type"] = [symbols[c] for c in as_list.pop("hybrid_override_pattern")]
    assert same_shape(load_hf_config(_write(tmp_path, as_list)), model_preset("nemotron-h-8b"))


def test_nemotron_3_nano_config_json_reads_to_the_preset(tmp_path: Path) -> None:
    cfg = dict(NEMOTRON_H_8B_HF)
    cfg.update(
        hybrid_override_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
        hidden_size=2688, intermediate_size=1856, num_key_value_heads=2, mamba_num_heads=64, n_routed_experts=128,
        moe_intermediate_size=1856, num_experts_per_tok=6, n_shared_experts=1, moe_shared_expert_intermediate_size=3712,
    )  # fmt: skip
    assert same_shape(load_hf_config(_write(tmp_path, cfg)), model_preset("nemotron-3-nano-30b-a3b"))


def test_an_unknown_block_type_is_refused(tmp_path: Path) -> None:
    cfg = dict(NEMOTRON_H_8B_HF)
    del cfg["hybrid_override_pattern"]
    cfg["layers_block_type"] = ["mamba2"] * 52
    with pytest.raises(ConfigError, match="unknown types \\['mamba2'\\]"):
        load_hf_config(_write(tmp_path, cfg))


def test_qwen3_next_config_json_reads_to_the_preset(tmp_path: Path) -> None:
    """transformers Qwen3NextConfig field names; `layer_types` or `full_attention_interval` place the attention."""
    cfg = {
        "model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048, "intermediate_size": 5120,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936,
        "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "num_experts": 512,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "num_experts_per_tok": 10,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "tie_word_embeddings": False,
    }  # fmt: skip
    assert same_shape(load_hf_config(_write(tmp_path, cfg)), model_preset("qwen3-next-80b-a3b"))
    cfg["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(48)]
    del cfg["full_attention_interval"]
    assert same_shape(load_hf_config(_write(tmp_path, cfg)), model_preset("qwen3-next-80b-a3b"))
    cfg["layer_types"][0] = "full_attention"
    with pytest.raises(ConfigError, match="not every 1-th layer full attention"):
        load_hf_config(_write(tmp_path, cfg))


def test_llama4_config_json_reads_to_the_presets(tmp_path: Path) -> None:
    """transformers Llama4Config (`llama4`, the text model under `text_config`) and Llama4TextConfig."""
    text = {
        "model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 202048, "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
        "attention_chunk_size": 8192, "no_rope_layer_interval": 4, "tie_word_embeddings": False,
    }  # fmt: skip
    wrapped = {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"], "text_config": text}
    assert same_shape(load_hf_config(_write(tmp_path, wrapped)), model_preset("llama4-scout"))
    maverick = {**text, "num_local_experts": 128, "interleave_moe_layer_step": 2}
    assert same_shape(load_hf_config(_write(tmp_path, maverick)), model_preset("llama4-maverick"))
    with pytest.raises(ConfigError, match="moe_layers \\[0, 5\\] is not every 2-th layer"):
        load_hf_config(_write(tmp_path, {**maverick, "moe_layers": [0, 5]}))


def test_deepseek_v32_config_json_reads_to_the_preset(tmp_path: Path) -> None:
    """transformers DeepseekV32Config: the DeepSeek-V3 fields and index_n_heads, index_head_dim, index_topk."""
    cfg = {
        "model_type": "deepseek_v32", "num_hidden_layers": 61, "hidden_size": 7168, "intermediate_size": 18432,
        "num_attention_heads": 128, "vocab_size": 129280, "n_routed_experts": 256, "n_shared_experts": 1,
        "moe_intermediate_size": 2048, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048,
    }  # fmt: skip
    assert same_shape(load_hf_config(_write(tmp_path, cfg)), model_preset("deepseek-v3.2"))


GPT_OSS_20B_HF = {  # openai/gpt-oss-20b config.json's shape fields (as quoted in the model-configs data)
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 24, "hidden_size": 2880,
    "intermediate_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "vocab_size": 201088, "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4,
    "sliding_window": 128, "attention_bias": True, "tie_word_embeddings": False,
    "layer_types": ["sliding_attention", "full_attention"] * 12, "swiglu_limit": 7.0,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
}  # fmt: skip


def test_gpt_oss_config_json_reads_to_the_presets(tmp_path: Path) -> None:
    """HF's sliding_window 128 counts the query's own key: Megatron-Bridge's window (127, 0), paraplan's 127."""
    assert same_shape(load_hf_config(_write(tmp_path, GPT_OSS_20B_HF)), model_preset("gpt-oss-20b"))
    big = {**GPT_OSS_20B_HF, "num_hidden_layers": 36, "num_local_experts": 128}
    big["layer_types"] = ["sliding_attention", "full_attention"] * 18
    assert same_shape(load_hf_config(_write(tmp_path, big)), model_preset("gpt-oss-120b"))
    del big["layer_types"]  # GptOssConfig's default alternates, sliding first
    assert same_shape(load_hf_config(_write(tmp_path, big)), model_preset("gpt-oss-120b"))
    odd = {**GPT_OSS_20B_HF, "layer_types": ["full_attention", "sliding_attention"] * 12}
    with pytest.raises(ConfigError, match="layer_types is not sliding_attention with every n-th layer full_attention"):
        load_hf_config(_write(tmp_path, odd))
    with pytest.raises(ConfigError, match="missing field 'sliding_window' required for model_type 'gpt_oss'"):
        load_hf_config(_write(tmp_path, {k: v for k, v in GPT_OSS_20B_HF.items() if k != "sliding_window"}))


def test_sliding_window_refuses_context_parallelism_with_the_rule() -> None:
    with pytest.raises(ConfigError, match="cp 2 > 1 with sliding-window attention \\(window 127\\) is not modelled"):
        paraplan.project("gpt-oss-20b", "h100-sxm5-80gb", 32, tp=2, cp=2, ep=8, gbs=32, seq=8192)


def test_local_attention_fields_are_checked() -> None:
    oss = model_preset("gpt-oss-20b")
    with pytest.raises(ConfigError, match="model softmax_type 'sink' must be one of vanilla, off-by-one, learnable"):
        oss.with_overrides(softmax_type="sink")
    with pytest.raises(ConfigError, match="model window_size must be >= 0 \\(got -1\\)"):
        oss.with_overrides(window_size=-1)
