"""Hybrid models through the framework configs: Megatron's hybrid layer pattern (with '|' stage boundaries) and
HuggingFace's nemotron_h config.json, emitted and read back to the same plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paraplan.errors import ConfigError
from paraplan.formats import detect_format, emit, read_config
from paraplan.formats.common import same_shape
from paraplan.graph.balance import balanced_layout
from paraplan.projection import project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check, resolve_dp

PLANS = {
    "nemotron-h-8b": dict(tp=8, pp=4, sp=True, gbs=64, seq=8192),
    "nemotron-h-56b": dict(tp=8, pp=4, sp=True, gbs=64, seq=8192),
    "nemotron-3-nano-30b-a3b": dict(tp=2, ep=8, sp=True, gbs=64, seq=8192),
    "qwen3-next-80b-a3b": dict(tp=2, pp=2, ep=16, sp=True, gbs=64, seq=8192),
    "deepseek-v3.2": dict(tp=1, pp=8, ep=8, gbs=64, seq=8192, pipeline_layout=(8,) * 7 + (5,)),
    "gpt-oss-120b": dict(tp=2, ep=8, sp=True, gbs=64, seq=8192),
    "gpt-oss-20b": dict(tp=2, ep=8, sp=True, gbs=64, seq=8192),
    "kimi-k2": dict(tp=1, pp=8, ep=8, gbs=64, seq=4096, pipeline_layout=(8,) * 7 + (5,)),
    "qwen3-8b": dict(tp=2, pp=2, gbs=64, seq=8192),
    "qwen3-32b": dict(tp=8, pp=2, sp=True, gbs=64, seq=8192),
}


@pytest.mark.parametrize("preset", sorted(PLANS))
def test_megatron_and_hf_round_trip(preset: str) -> None:
    model = model_preset(preset)
    values = dict(PLANS[preset])
    if values.get("pp", 1) > 1 and "pipeline_layout" not in values:
        values["pipeline_layout"] = balanced_layout(model, values["pp"], values["seq"])
    system = system_preset("h100-sxm5-80gb", 64)
    train = check(model, system, TrainingSpec().with_values(**values))
    result = project_specs(model, system, train)
    text = emit("megatron", model, system, result.train, strict=True)
    assert detect_format(text) == "megatron"
    if model.is_hybrid:
        assert "--hybrid-override-pattern" in text and "--mamba-num-heads" in text
    elif model.dsa_indexer_n_heads:
        assert "--experimental-attention-variant dsa" in text and "--dsa-indexer-topk 2048" in text
    elif model.linear_attention_freq:
        assert "--experimental-attention-variant gated_delta_net" in text and "--attention-output-gate" in text
    elif model.window_size:  # megatron-core's (left, right) window, every 2nd layer global, learned sinks
        assert (
            "--window-size 127,0" in text and "--window-attn-skip-freq 2" in text and "--softmax-type learnable" in text
        )
    back = read_config(text, "megatron", num_gpus=64, env={})
    assert back.model is not None and same_shape(back.model, model)
    assert resolve_dp(back.train, system) == result.train  # the '|' carry the pipeline layout
    hf = read_config(emit("hf", model, system, result.train, strict=True), "hf")
    assert same_shape(hf.model, model)
    for fmt in ("nemo", "primus"):  # Megatron-core names (Megatron-Bridge YAML) and Megatron-LM's (Primus YAML)
        back = read_config(emit(fmt, model, system, result.train, strict=True), fmt, num_gpus=64, env={})
        assert back.model is not None and same_shape(back.model, model), fmt
        assert replace(resolve_dp(back.train, system), framework=result.train.framework) == result.train, fmt


def test_megatron_pipes_are_the_pipeline_layout() -> None:
    model = model_preset("nemotron-h-8b")
    system = system_preset("h100-sxm5-80gb", 16)
    train = check(model, system, TrainingSpec().with_values(tp=8, pp=2, gbs=16, seq=8192, pipeline_layout=(30, 22)))
    text = emit("megatron", model, system, train)
    pattern = model.hybrid_layer_pattern
    assert f"'{pattern[:30]}|{pattern[30:]}'" in text
    assert "--pipeline-model-parallel-layout" not in text


def test_megatron_arguments_with_the_newer_flag_and_interleaved_stages() -> None:
    args = (
        "--num-layers 8 --hidden-size 1024 --ffn-hidden-size 4096 --num-attention-heads 8 --vocab-size 32000 "
        "--hybrid-layer-pattern 'M-|M*|M-|M-' --mamba-num-heads 32 --mamba-num-groups 4 --squared-relu "
        "--normalization RMSNorm --untie-embeddings-and-output-weights --disable-bias-linear "
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1 "
        "--global-batch-size 16 --seq-length 4096 --bf16"
    )
    read = read_config(args, "megatron", num_gpus=8, env={})
    assert read.model is not None and read.model.hybrid_layer_pattern == "M-M*M-M-"
    assert read.model.position == "none" and read.model.mamba_heads == 32
    assert read.train.pipeline_layout == (2, 2, 2, 2) and read.train.vpp == 2
    assert read.train.pipeline_schedule == "interleaved"
    result = project_specs(read.model, system_preset("h100-sxm5-80gb", 8), read.train)
    assert result.step_time_s > 0


def test_megatron_pattern_problems_are_named() -> None:
    base = "--hidden-size 1024 --num-attention-heads 8 --vocab-size 32000 --seq-length 4096 --global-batch-size 8"
    with pytest.raises(ConfigError, match="num-layers 6 but the hybrid pattern has 4 layers"):
        read_config(base + " --num-layers 6 --hybrid-override-pattern 'M*M-'", "megatron", num_gpus=8, env={})
    with pytest.raises(ConfigError, match="MTP patterns after '/' are not modelled"):
        read_config(base + " --hybrid-override-pattern 'M*M-/M*'", "megatron", num_gpus=8, env={})
    with pytest.raises(ConfigError, match="mamba-state-dim is set without a hybrid layer pattern"):
        read_config(base + " --num-layers 4 --mamba-state-dim 64", "megatron", num_gpus=8, env={})


@pytest.mark.parametrize("preset", ["llama4-scout", "llama4-maverick"])
def test_llama4_round_trips_through_hf_and_nemo_and_megatron_names_the_gap(preset: str) -> None:
    """Megatron-Bridge's Llama 4 provider carries the chunks (attention_chunk_size, nope_layer_interval): the NeMo
    YAML round-trips. Megatron-core 0.16.1 has a NoPE field (no_rope_freq) but none for chunks, so Megatron-LM runs
    those layers with full attention: the command line says so (strict refuses) and reads back without chunks."""
    model = model_preset(preset)
    system = system_preset("h100-sxm5-80gb", 128)
    train = check(model, system, TrainingSpec().with_values(tp=8, pp=2, ep=8, etp=1, sp=True, gbs=128, seq=8192))
    assert train.pipeline_layout is None  # an even split given, kept
    result = project_specs(model, system, train)
    hf = read_config(emit("hf", model, system, result.train, strict=True), "hf")
    assert same_shape(hf.model, model)
    yaml_text = emit("nemo", model, system, result.train, strict=True)
    assert "attention_chunk_size: 8192" in yaml_text and "nope_layer_interval: 4" in yaml_text
    back = read_config(yaml_text, "nemo", num_gpus=128, env={})
    assert back.model is not None and same_shape(back.model, model)
    assert replace(resolve_dp(back.train, system), framework=result.train.framework) == result.train
    with pytest.raises(ConfigError, match="chunked attention \\(chunks of 8192\\): Megatron-LM has no flag"):
        emit("megatron", model, system, result.train, strict=True)
    text = emit("megatron", model, system, result.train)
    assert "--no-rope-freq 4" in text and "runs these layers with full attention" in text
    for fmt in ("megatron", "primus"):
        back = read_config(emit(fmt, model, system, result.train), fmt, num_gpus=128, env={})
        assert back.model is not None and same_shape(back.model, replace(model, attention_chunk_size=0)), fmt
        assert back.model.nope_layer_interval == 4


def test_local_attention_settings_are_read_and_checked() -> None:
    base = (
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --vocab-size 32000 --seq-length 4096 "
        "--global-batch-size 8 --micro-batch-size 1"
    )
    read = read_config(base + " --window-size 255,0 --window-attn-skip-freq 4", "megatron", num_gpus=8, env={})
    assert read.model is not None and (read.model.window_size, read.model.window_attn_skip_freq) == (255, 4)
    with pytest.raises(ConfigError, match="window-size right window 5: a causal decoder attends to no later key"):
        read_config(base + " --window-size 255,5", "megatron", num_gpus=8, env={})
    with pytest.raises(ConfigError, match="window-size must be two integers"):
        read_config(base + " --window-size 255", "megatron", num_gpus=8, env={})
    with pytest.raises(ConfigError, match="window-attn-skip-freq is set without --window-size"):
        read_config(base + " --window-attn-skip-freq 2", "megatron", num_gpus=8, env={})
    with pytest.raises(ConfigError, match="softmax-type must be one of vanilla, off-by-one, learnable"):
        read_config(base + " --softmax-type sink", "megatron", num_gpus=8, env={})
