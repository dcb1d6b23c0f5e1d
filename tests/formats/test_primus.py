"""Primus experiments: model files, overrides, inheritance and ${ENV:default} values."""

from pathlib import Path

import pytest

from paraplan.errors import ConfigError
from paraplan.formats import read_config

DATA = Path(__file__).parent / "data" / "primus"


def test_model_file_overrides_and_env_defaults() -> None:
    model, train, hints = read_config(DATA / "exp_llama3.1_8b.yaml", "primus", env={})
    assert model.name == "llama3.1_8B" and model.num_layers == 32 and model.kv_groups == 8
    assert model.activation == "swiglu" and not model.attention_bias  # from llama_base.yaml via extends
    assert (train.tp, train.pp, train.cp, train.seq) == (1, 1, 2, 8192)  # ${PRIMUS_TP:1} ... defaults
    assert train.precision == "fp8" and train.recompute_num_layers == 4
    assert any("pre_trainer.yaml" in note for note in hints.notes)  # Primus's module defaults are not here


def test_environment_values_win() -> None:
    _, train, _ = read_config(DATA / "exp_llama3.1_8b.yaml", "primus", env={"PRIMUS_TP": "2", "PRIMUS_CP": "1"})
    assert (train.tp, train.cp) == (2, 1)


def test_experiment_inheritance_bases_and_zero_bubble() -> None:
    model, train, _ = read_config(DATA / "exp_mixtral_8x7b_zb.yaml", "primus", env={})
    assert model.num_experts == 8 and model.moe_router_topk == 2 and model.vocab_size == 32000
    assert train.pipeline_schedule == "zb-h1" and train.ep == 8 and train.pp == 4
    assert train.use_distributed_optimizer and train.overlap_grad_reduce  # from exp_base.yaml


def test_mistakes_are_listed() -> None:
    with pytest.raises(ConfigError) as err:
        read_config(DATA / "bad_exp.yaml", "primus", env={})
    text = "\n".join(err.value.problems)
    for fragment in (
        "unknown top-level key 'user_nmae' (did you mean user_name?)",
        "unknown key 'tensor_model_paralel_size' (did you mean tensor_model_parallel_size?)",
        "environment variable PRIMUS_SEQ is not set and '${PRIMUS_SEQ}' has no default",
        "fp8_recipe is set but FP8 is off",
        "recompute_granularity full needs recompute_method",
        "zero_bubble_v_schedule needs enable_zero_bubble: true",
    ):
        assert fragment in text, fragment


def test_inheritance_cycle_and_missing_parent(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nmodules: {pre_trainer: {overrides: {}}}\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    (tmp_path / "c.yaml").write_text("extends: missing.yaml\nmodules: {pre_trainer: {overrides: {}}}\n")
    for name, fragment in (("a.yaml", "inherited in a cycle"), ("c.yaml", "'missing.yaml', which is not found")):
        with pytest.raises(ConfigError, match=fragment):
            read_config(tmp_path / name, "primus", env={})
