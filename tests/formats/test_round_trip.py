"""read -> project -> emit -> read gives the same configuration, for every format, on example files written
in each format's documented shape."""

from pathlib import Path

import pytest

from paraplan.formats import detect_format, emit, read_config
from paraplan.formats.common import same_shape
from paraplan.projection import project_specs
from paraplan.specs.presets import system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import resolve_dp

DATA = Path(__file__).parent / "data"

CASES = [
    # (format, file, GPU count when the file does not state it, GPU preset)
    ("megatron", "megatron/llama3_8b_pretrain.sh", None, "h100-sxm5-80gb"),
    ("megatron", "megatron/deepseek_v3_args.txt", 1024, "h100-sxm5-80gb"),
    ("megatron", "megatron/gpt3_175b_interleaved.txt", None, "a100-sxm4-80gb"),
    ("primus", "primus/exp_llama3.1_8b.yaml", 64, "mi300x"),
    ("primus", "primus/exp_mixtral_8x7b_zb.yaml", 64, "mi300x"),
    ("torchtitan", "torchtitan/llama3_8b.toml", 64, "h100-sxm5-80gb"),
    ("torchtitan", "torchtitan/llama3_70b_interleaved.toml", None, "h100-sxm5-80gb"),
    ("torchtitan", "torchtitan/deepseek_v3_671b.toml", 512, "h100-sxm5-80gb"),
    ("nemo", "nemo/llama3_70b_bridge.yaml", 64, "h100-sxm5-80gb"),
    ("nemo", "nemo/mixtral_8x7b_nemo2.yaml", None, "h100-sxm5-80gb"),
]


@pytest.mark.parametrize(("fmt", "name", "gpus", "gpu"), CASES, ids=[c[1] for c in CASES])
def test_round_trip(fmt: str, name: str, gpus: int | None, gpu: str) -> None:
    first = read_config(DATA / name, fmt, num_gpus=gpus, env={})
    assert first.model is not None, first.hints.notes
    n = gpus or first.hints.num_gpus
    assert n, "the file states its GPU count"
    system = system_preset(gpu, n)
    result = project_specs(first.model, system, first.train)
    assert result.step_time_s > 0
    text = emit(fmt, first.model, system, result.train, strict=True)  # strict: every setting expressible
    assert detect_format(text) == fmt
    second = read_config(text, fmt, num_gpus=n, env={})
    assert second.model is not None and same_shape(second.model, first.model)
    assert resolve_dp(second.train, system) == result.train
    if first.hints.num_gpus:
        assert second.hints.num_gpus == first.hints.num_gpus


def test_hf_round_trip() -> None:
    first = read_config(DATA / "hf/qwen3-30b-a3b/config.json", "hf")
    system = system_preset("h100-sxm5-80gb", 8)
    train = TrainingSpec().with_values(ep=8, gbs=64, seq=4096)
    result = project_specs(first.model, system, train)
    second = read_config(emit("hf", first.model, system, result.train, strict=True), "hf")
    assert same_shape(second.model, first.model)


@pytest.mark.parametrize("preset", ["llama3.1-8b", "mixtral-8x7b", "qwen3-235b-a22b", "deepseek-v3"])
def test_hf_writer_covers_the_presets(preset: str) -> None:
    from paraplan.specs.presets import model_preset

    model = model_preset(preset)
    text = emit("hf", model, system_preset("h100-sxm5-80gb", 8), TrainingSpec(), strict=True)
    assert same_shape(read_config(text, "hf").model, model)


@pytest.mark.parametrize("fmt", ["megatron", "primus", "torchtitan", "nemo"])
def test_cross_format_keeps_the_plan(fmt: str) -> None:
    """A Megatron command line converted to every other format keeps the layout and the batch."""
    first = read_config(DATA / "megatron/llama3_8b_pretrain.sh", "megatron", env={})
    system = system_preset("h100-sxm5-80gb", first.hints.num_gpus)
    train = resolve_dp(first.train, system)
    other = read_config(emit(fmt, first.model, system, train), fmt, num_gpus=system.num_gpus, env={})
    back = resolve_dp(other.train, system)
    for field in ("tp", "pp", "cp", "dp", "mbs", "gbs", "seq", "recompute_granularity", "precision"):
        assert getattr(back, field) == getattr(train, field), field
    assert same_shape(other.model, first.model)


def test_a_setting_the_format_cannot_express_is_reported() -> None:
    from paraplan.errors import ConfigError
    from paraplan.specs.presets import model_preset

    system = system_preset("h100-sxm5-80gb", 8)
    train = TrainingSpec().with_values(pp=2, gbs=16, pipeline_schedule="zb-v")
    with pytest.raises(ConfigError, match="Megatron-LM cannot express: pipeline schedule zb-v"):
        emit("megatron", model_preset("llama3.1-8b"), system, train, strict=True)
    text = emit("megatron", model_preset("llama3.1-8b"), system, train)
    assert "# not expressible in Megatron-LM, nearest setting used: pipeline schedule zb-v" in text
    with pytest.raises(ConfigError, match="config.json cannot express: GPT-2 configs have tied embeddings"):
        emit("hf", model_preset("gpt3-175b"), system, train, strict=True)


@pytest.mark.parametrize("fmt", ["megatron", "primus", "nemo"])
def test_flex_dispatcher_survives_a_round_trip(fmt: str) -> None:
    """DeepEP's flex dispatcher is written as Megatron's `moe_token_dispatcher_type: flex` and read back."""
    first = read_config(DATA / "megatron/deepseek_v3_args.txt", "megatron", num_gpus=1024, env={})
    assert first.train.moe_token_dispatcher_type == "alltoall"
    system = system_preset("h100-sxm5-80gb", 1024)
    train = resolve_dp(first.train.with_values(moe_token_dispatcher_type="flex"), system)
    back = read_config(emit(fmt, first.model, system, train, strict=True), fmt, num_gpus=1024, env={})
    assert back.train.moe_token_dispatcher_type == "flex"
