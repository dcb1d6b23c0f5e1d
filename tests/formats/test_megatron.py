"""Megatron-LM command lines: launch scripts, argument files, and every kind of mistake."""

from pathlib import Path

import pytest

from paraplan.errors import ConfigError
from paraplan.formats import read_config
from paraplan.formats.common import Problems
from paraplan.formats.megatron_layout import (
    format_layer_pattern,
    format_pipeline_layout,
    parse_layer_pattern,
    parse_pipeline_layout,
)
from paraplan.specs.knobs import knob_problems

DATA = Path(__file__).parent / "data" / "megatron"


def test_launch_script_with_arrays_variables_and_torchrun() -> None:
    model, train, hints = read_config(DATA / "llama3_8b_pretrain.sh", "megatron", env={})
    assert (hints.num_gpus, hints.gpus_per_node) == (32, 8)  # --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES
    assert (train.tp, train.pp, train.mbs, train.gbs, train.seq) == (2, 2, 1, 128, 8192)  # $TP, $PP expanded
    assert train.sequence_parallel and train.use_distributed_optimizer and train.overlap_param_gather
    assert train.recompute_granularity == "selective" and train.precision == "bf16"
    assert model is not None and model.vocab_size == 128256  # from --tokenizer-model meta-llama/Llama-3.1-8B
    assert (model.activation, model.norm, model.position, model.kv_groups) == ("swiglu", "rmsnorm", "rope", 8)
    assert not model.tied_embeddings and not model.attention_bias and not model.dropout
    assert any("tokenizer" in note for note in hints.notes)


def test_moe_mla_mtp_fp8_and_layout() -> None:
    model, train, _ = read_config(DATA / "deepseek_v3_args.txt", "megatron", num_gpus=1024, env={})
    assert model.is_mla and model.q_lora_rank == 1536 and model.kv_lora_rank == 512
    assert (model.num_experts, model.moe_router_topk, model.moe_first_k_dense, model.moe_layer_freq) == (256, 8, 3, 1)
    assert model.mtp_num_layers == 1 and model.moe_shared_expert_intermediate_size == 2048
    assert train.pipeline_layout == (3, *[4] * 14, 2)
    assert train.precision == "fp8_blockwise" and not train.moe_ep_overlap
    assert train.recompute_granularity == "full" and train.recompute_num_layers == 2


def test_ep_overlap_is_read_and_refused_where_megatron_refuses_it(tmp_path: Path) -> None:
    """megatron-core 0.15 TransformerConfig: the EP overlap needs a virtual pipeline at pp > 1 and no full
    recompute; the DeepSeek-V3 recipe (pp 16, one chunk per rank, full recompute of 2 layers) has neither."""
    args = tmp_path / "args.txt"
    args.write_text((DATA / "deepseek_v3_args.txt").read_text() + "--overlap-moe-expert-parallel-comm\n")
    model, train, _ = read_config(args, "megatron", num_gpus=1024, env={})
    assert train.moe_ep_overlap
    problems = knob_problems(model, train)
    assert any("needs the interleaved schedule" in p and "pp 16" in p for p in problems)
    assert any("full recompute" in p for p in problems)
    assert not knob_problems(model, train.with_values(moe_ep_overlap=False))


def test_interleaved_from_layers_per_virtual_stage_and_fp16() -> None:
    model, train, hints = read_config(DATA / "gpt3_175b_interleaved.txt", "megatron", env={})
    assert hints.num_gpus == 1024 and train.vpp == 2 and train.pipeline_schedule == "interleaved"
    assert train.precision == "fp16"
    assert (model.activation, model.norm, model.position, model.dropout, model.attention_bias) == (
        "gelu",
        "layernorm",
        "learned",
        True,
        True,
    )
    assert model.ffn_hidden_size == 4 * 12288 and model.vocab_size == 50257  # Megatron's defaults, GPT-2 BPE


def test_every_mistake_is_listed() -> None:
    with pytest.raises(ConfigError) as err:
        read_config(DATA / "contradictions.txt", "megatron", env={})
    text = "\n".join(err.value.problems)
    for fragment in (
        "--tensor-model-parallel-size is given twice with different values (4 and 8)",
        "unknown flag --pipeline-model-parallel-sise (did you mean --pipeline-model-parallel-size?)",
        "--sequence-parallel takes no value (got yes)",
        "--micro-batch-size needs a value",
        "--global-batch-size must be an integer (got '$GBS') (a shell variable that is not set in the file)",
        "--fp16 and --bf16 are both set",
        "--fp8-recipe is set but FP8 is off",
        "--recompute-granularity selective does not take --recompute-method",
        "--num-query-groups has no effect without --group-query-attention",
        "--swiglu and --squared-relu are both set",
        "--moe-router-topk is set but the model has no experts",
        "--q-lora-rank is set without --multi-latent-attention",
    ):
        assert fragment in text, fragment
    assert len(err.value.problems) == 12


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ("--recompute-granularity full --recompute-num-layers 2", "needs --recompute-method uniform or block"),
        ("--recompute-method block", "--recompute-method is set without --recompute-granularity"),
        ("--recompute-activations --recompute-granularity full", "contradicts --recompute-granularity full"),
        ("--fp8-format e4m3 --fp4-format e2m1", "are both set: choose one low precision"),
        ("--fp8-format e5m2", "--fp8-format must be one of e4m3, hybrid"),
        ("--use-torch-fsdp2 --use-megatron-fsdp", "choose one"),
        ("--pipeline-model-parallel-size 1 --num-virtual-stages-per-pipeline-rank 2", "need --pipeline-model-parallel"),
        ("--pipeline-model-parallel-layout 'Et|tL' --decoder-first-pipeline-num-layers 1", "both set the stage split"),
        ("--pipeline-model-parallel-layout 'Et|tL|t'", "places the embedding (E) on the first"),
        ("--num-experts 8 --moe-layer-freq '[1,1,0,1]' --num-layers 4", "not a dense prefix followed by every n-th"),
        ("--tensor-model-parallel_size 2", "did you mean --tensor-model-parallel-size?"),
        ("4", "unexpected '4' before the first flag"),
    ],
)
def test_contradictions(args: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        read_config(args, "megatron", env={})
    assert any(fragment in p for p in err.value.problems), err.value.problems


def test_variables_from_the_environment_and_equals_form() -> None:
    _, train, _ = read_config(
        "--tensor-model-parallel-size=${TP:-2} --global-batch-size $GBS --bf16", "megatron", env={"GBS": "64"}
    )
    assert (train.tp, train.gbs) == (2, 64)


def test_layer_patterns_and_layouts_round_trip() -> None:
    problems = Problems()
    for first, freq, layers in ((0, 1, 8), (3, 1, 61), (1, 2, 27), (0, 2, 48)):
        text = format_layer_pattern(first, freq, layers)
        assert parse_layer_pattern(text, layers, "x", problems) == (first, freq)
    assert parse_pipeline_layout("E|(t|)*3,m|L", "x", problems) == ((0, 1, 1, 1, 0, 0), 1)
    counts = (3, 4, 4, 2)
    assert parse_pipeline_layout(format_pipeline_layout(counts, 1), "x", problems) == (counts, 1)
    assert not problems


def test_kernel_fusion_flags_round_trip() -> None:
    """`--no-bias-swiglu-fusion --no-rope-fusion` is eager PyTorch; one of them alone is noted, kept fused."""
    from paraplan.formats.megatron import write_megatron
    from paraplan.specs.presets import model_preset, system_preset

    base = "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --micro-batch-size 1 "
    base += "--global-batch-size 8 --swiglu --normalization RMSNorm --position-embedding-type rope"
    _, eager, _ = read_config(base + " --no-bias-swiglu-fusion --no-rope-fusion", "megatron", num_gpus=8)
    assert eager.kernel_fusion is False
    _, fused, hints = read_config(base + " --no-rope-fusion", "megatron", num_gpus=8)
    assert fused.kernel_fusion is True and any("fused kernels" in note for note in hints.notes)
    text = write_megatron(model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", 8), eager)
    assert "--no-bias-swiglu-fusion" in text and "--no-rope-fusion" in text and "--no-persist-layer-norm" in text
    _, again, _ = read_config(text, "megatron", num_gpus=8)
    assert again.kernel_fusion is False


def test_cross_entropy_loss_fusion_round_trips_through_megatron_and_nemo() -> None:
    from paraplan.formats.megatron import write_megatron
    from paraplan.formats.nemo import read_nemo, write_nemo
    from paraplan.specs.presets import model_preset, system_preset

    base = "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --micro-batch-size 1 "
    base += "--global-batch-size 8"
    _, eager, _ = read_config(base, "megatron", num_gpus=8)
    assert eager.cross_entropy_fusion is False  # Megatron-LM's default
    _, fused, _ = read_config(base + " --cross-entropy-loss-fusion", "megatron", num_gpus=8)
    assert fused.cross_entropy_fusion is True
    model, system = model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", 8)
    text = write_megatron(model, system, fused)
    assert "--cross-entropy-loss-fusion" in text
    assert read_config(text, "megatron", num_gpus=8).train.cross_entropy_fusion is True
    assert "--cross-entropy-loss-fusion" not in write_megatron(model, system, eager)
    assert read_nemo(write_nemo(model, system, fused), num_gpus=8).train.cross_entropy_fusion is True
    assert read_nemo(write_nemo(model, system, eager), num_gpus=8).train.cross_entropy_fusion is False
