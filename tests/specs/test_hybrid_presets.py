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
}


@pytest.mark.parametrize("preset", sorted(HYBRIDS))
def test_hybrid_preset_projects_with_a_breakdown_by_kind(preset: str) -> None:
    tp, ep = HYBRIDS[preset]
    r = paraplan.project(preset, "h100-sxm5-80gb", 64, tp=tp, ep=ep, sp=True, gbs=64, seq=8192)
    assert r.step_time_s > 0 and r.memory.peak_gib > 0
    assert 0.05 < r.mfu < 0.7


@pytest.mark.parametrize("preset", ["nemotron-h-8b", "nemotron-3-nano-30b-a3b"])
def test_hybrid_preset_tunes(preset: str) -> None:
    problem = TuneProblem(model_preset(preset), (system_preset("h100-sxm5-80gb", 16),), 32, 4096)
    limits = parse_constraints([], {"pp": 2, "cp": 1, "mbs": 1})
    result = tune(problem, limits, TuneOptions(executor="serial", top_k=3, seed_planner=False))
    assert result.top and result.top[0].fits and result.top[0].step_time_s > 0
    model = model_preset(preset)
    for e in result.top:  # every plan kept is legal: Mamba groups split over tp, pipelines split by the layers' work
        train = e.train or to_training(problem, e.candidate)
        system = problem.system(e.candidate.num_gpus)
        assert layout_problems(model, system, train) == [], e.candidate.describe()
        assert model.mamba_num_groups % train.tp == 0
        assert train.pp == 1 or train.pipeline_layout is not None
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
