import json
from pathlib import Path

import pytest

import paraplan
from paraplan.specs.hf import load_hf_config
from paraplan.specs.presets import gpu_names, model_names, model_preset

CONFIGS = {
    "llama": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0}, "torch_dtype": "bfloat16"},
    "qwen3": {"model_type": "qwen3", "num_hidden_layers": 28, "hidden_size": 1024, "intermediate_size": 3072,
              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
              "tie_word_embeddings": True, "rope_parameters": {"rope_theta": 1000000}, "dtype": "bfloat16"},
    "mixtral": {"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
                "num_experts_per_tok": 2},
    "qwen3_moe": {"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048, "intermediate_size": 6144,
                  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                  "num_experts": 128, "moe_intermediate_size": 768, "num_experts_per_tok": 8, "decoder_sparse_step": 1},
    "deepseek_v3": {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
                    "intermediate_size": 18432, "num_attention_heads": 128, "vocab_size": 129280,
                    "n_routed_experts": 256, "n_shared_experts": 1, "moe_intermediate_size": 2048,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "num_nextn_predict_layers": 1},
    "gpt2": {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257},
    "gpt_neox": {"model_type": "gpt_neox", "num_hidden_layers": 16, "hidden_size": 2048, "intermediate_size": 8192,
                 "num_attention_heads": 16, "vocab_size": 50304},
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_hf_config_loads_and_projects(kind: str, tmp_path: Path) -> None:
    path = tmp_path / kind / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(CONFIGS[kind]))
    model = load_hf_config(path)
    assert model.num_layers == CONFIGS[kind].get("num_hidden_layers", CONFIGS[kind].get("n_layer"))
    ep = 8 if model.is_moe else 1
    r = paraplan.project(str(path), "h100-sxm5-80gb", 64, tp=1, ep=ep, gbs=64, seq=2048)
    assert r.step_time_s > 0


def test_deepseek_config_matches_preset(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["deepseek_v3"]))
    loaded, preset = load_hf_config(path), model_preset("deepseek-v3")
    for field in ("num_layers", "num_experts", "moe_router_topk", "moe_first_k_dense", "kv_lora_rank",
                  "moe_shared_expert_intermediate_size", "mtp_num_layers", "qk_rope_head_dim"):  # fmt: skip
        assert getattr(loaded, field) == getattr(preset, field), field
    assert preset.num_moe_layers == 58


def test_every_preset_projects() -> None:
    for name in model_names():
        m = model_preset(name)
        ep = 8 if m.is_moe else 1
        tp = 8 if m.is_mla else min(8, m.kv_groups)
        r = paraplan.project(m, "h100-sxm5-80gb", 64, tp=tp, ep=ep, sp=True, gbs=64, seq=4096)
        assert r.step_time_s > 0 and r.memory.peak_gib > 0
    for gpu in gpu_names():
        precision = "fp16" if gpu.startswith("v100") else "bf16"
        r = paraplan.project("llama3.1-8b", gpu, 8, gbs=8, seq=2048, precision=precision)
        assert r.step_time_s > 0


def test_deepseek_v3_fp8_pipeline_on_b200() -> None:
    r = paraplan.project("deepseek-v3", "b200", 256, tp=1, pp=16, ep=8, gbs=2048, seq=4096, precision="mxfp8",
                         pipeline_layout=(4,) + (4,) * 14 + (1,))  # fmt: skip
    assert r.model_flops_per_step > 0


def test_system_file_overrides(tmp_path: Path) -> None:
    from paraplan.specs.files import system_from_file

    f = tmp_path / "sys.yaml"
    f.write_text("gpu: h100-sxm5-80gb\nnum_gpus: 64\nnic_gbps: 200\ngpus_per_node: 4\n")
    system = system_from_file(f)
    assert system.nic_gbps == 200 and system.gpus_per_node == 4 and system.num_gpus == 64
    custom = tmp_path / "custom.yaml"
    custom.write_text("gpu: {name: my-gpu, bf16_tflops: 500, hbm_gib: 64, hbm_tbps: 2.0, sm_count: 100}\n"
                      "num_gpus: 8\ngpus_per_node: 8\nscale_up_gbps: 200\nnic_gbps: 100\n")  # fmt: skip
    assert paraplan.project("llama3.1-8b", system_from_file(custom), gbs=8).step_time_s > 0
