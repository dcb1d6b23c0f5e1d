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


def test_current_primus_keys_env_sections_and_kernel_switches() -> None:
    """`env:` feeds ${VAR:default} (the module's over the top level's), and --cross-entropy-fusion-impl and
    use_turbo_grouped_gemm are read, not refused (issue 32: Primus's current configs failed to read)."""
    _, train, _ = read_config(DATA / "exp_current_keys.yaml", "primus", env={})
    assert (train.tp, train.pp) == (2, 2)


def test_the_shell_environment_wins_over_env_sections() -> None:
    _, train, _ = read_config(DATA / "exp_current_keys.yaml", "primus", env={"PRIMUS_TP": "4"})
    assert (train.tp, train.pp) == (4, 2)


def test_env_section_must_be_a_mapping() -> None:
    text = "modules:\n  pre_trainer:\n    framework: megatron\n    env: [A, B]\n    overrides: {}\n"
    with pytest.raises(ConfigError, match="env must be a mapping of environment variables"):
        read_config(text, "primus", env={})


def test_torchtitan_backend() -> None:
    """Primus's torchtitan backend: torchtitan's tables in YAML, read by the torchtitan reader; Primus's own
    sections dropped with a note in its files."""
    model, train, hints = read_config(DATA / "exp_torchtitan_llama3.1_8b.yaml", "primus", num_gpus=16, env={})
    assert model is not None and model.num_layers == 32 and model.hidden_size == 4096
    assert train.framework == "torchtitan" and train.fsdp
    assert (train.tp, train.dp, train.mbs, train.seq) == (2, 8, 4, 8192)
    assert train.gbs == 4 * 8 and train.recompute_granularity == "none"
    assert any("training.mock_data not read (Primus's own settings)" in note for note in hints.notes)


def test_torchtitan_backend_overrides_are_checked() -> None:
    text = (
        "modules:\n  pre_trainer:\n    framework: torchtitan\n    overrides:\n"
        "      model: {name: llama3, flavor: 8B}\n      parallelism: {tensor_paralel_degree: 2}\n"
    )
    with pytest.raises(ConfigError, match="parallelism.tensor_paralel_degree"):
        read_config(text, "primus", num_gpus=8, env={})


def test_unknown_backend_is_named() -> None:
    text = "modules:\n  pre_trainer:\n    framework: jax\n    overrides: {}\n"
    with pytest.raises(ConfigError, match="megatron and torchtitan backends"):
        read_config(text, "primus", env={})
