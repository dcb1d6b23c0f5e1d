"""The quantised weights of megatron-core's low-precision runs (`memory.model.quantized_copy_bytes_per_weight`): TE keeps
each low-precision linear's quantised weight workspace, row-wise and column-wise, for the whole run beside the 16-bit
weight; under `--fp8-param-gather` that quantised tensor is the weight itself."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from paraplan.api import memory
from paraplan.formats import read_config
from paraplan.formats.megatron import write_megatron
from paraplan.formats.nemo import read_nemo, write_nemo
from paraplan.memory.activations import layer_modes
from paraplan.memory.model import states_floor_bytes
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.specs.frameworks import era_training_values
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check
from paraplan.tune.memfilter import GroupMemory

MODEL = model_preset("llama3.1-8b")
GIB = 2**30
DATA = Path(__file__).parents[1] / "formats" / "data"


def _linear_params_per_layer() -> int:
    """QKV, the attention output and the three SwiGLU projections of one Llama layer (no biases)."""
    h, hd = MODEL.hidden_size, MODEL.head_dim
    q, kv = MODEL.num_attention_heads * hd, MODEL.num_query_groups * hd
    return h * (q + 2 * kv) + q * h + 3 * h * MODEL.ffn_hidden_size


def _parts(gpu: str = "b200", precision: str = "fp8_cs", **training: object) -> dict[str, float]:
    common = dict(gpus=1, mbs=1, gbs=1, seq=1024, precision=precision, use_distributed_optimizer=True)
    return memory("llama3.1-8b", gpu, **{**common, **training}).peak.parts


@pytest.mark.parametrize(
    ("precision", "gpu", "bytes_per_weight"),
    [
        ("fp8", "h100-sxm5-80gb", 2.0),  # Float8Tensor data + its transpose: Hopper's FP8 GEMMs are TN only
        ("fp8_cs", "h100-sxm5-80gb", 2.0),
        ("fp8", "b200", 1.0),  # Blackwell: one copy serves both layouts
        ("fp8_cs", "b200", 1.0),
        ("fp8_blockwise", "h100-sxm5-80gb", 2 * (1 + 4 / 128**2)),  # 128x128 FP32 scales, row- and column-wise
        ("mxfp8", "b200", 2 * (1 + 1 / 32)),  # one E8M0 scale per 32 elements, each way
        ("nvfp4", "b200", 2 * (0.5 + 1 / 16)),  # TE stores 1x16 E4M3 scales each way, whatever the 2D weight blocks
    ],
)
def test_the_copies_hold_each_linear_weight_in_both_usages(precision: str, gpu: str, bytes_per_weight: float) -> None:
    expected = MODEL.num_layers * _linear_params_per_layer() * bytes_per_weight
    assert _parts(gpu, precision)["quantized_weight_copies"] == pytest.approx(expected, rel=1e-12)


def test_bf16_layers_have_no_copy() -> None:
    edges = _parts(first_last_layers_bf16=True, num_layers_at_start_in_bf16=2, num_layers_at_end_in_bf16=3)
    assert _parts()["quantized_weight_copies"] - edges["quantized_weight_copies"] == pytest.approx(
        5 * _linear_params_per_layer() * 1.0
    )
    every = dict(first_last_layers_bf16=True, num_layers_at_start_in_bf16=16, num_layers_at_end_in_bf16=16)
    assert _parts(**every)["quantized_weight_copies"] == 0.0


@pytest.mark.parametrize(
    "training",
    [
        {"precision": "bf16"},  # no low-precision GEMM
        {"framework": "torchtitan", "use_distributed_optimizer": False, "fsdp": True, "zero_stage": 3},  # torchao casts
        {"fsdp": True, "zero_stage": 3, "use_distributed_optimizer": False},  # Megatron-FSDP: not modelled
    ],
)
def test_no_copies_outside_megatron_core_low_precision_runs(training: dict[str, object]) -> None:
    assert _parts(**training)["quantized_weight_copies"] == 0.0


@pytest.mark.parametrize(("precision", "gpu", "bytes_per_weight"), [("fp8_cs", "b200", 1.0), ("mxfp8", "b200", 2.0625)])
def test_quantised_primary_weights_replace_the_16bit_weights(precision: str, gpu: str, bytes_per_weight: float) -> None:
    copies = _parts(gpu, precision)
    primary = _parts(gpu, precision, fp8_param_gather=True)
    linear = MODEL.num_layers * _linear_params_per_layer()
    assert primary["quantized_weight_copies"] == 0.0
    assert primary["weights"] == pytest.approx(copies["weights"] - 2 * linear + bytes_per_weight * linear, rel=1e-12)
    assert primary["gradients"] == copies["gradients"] and primary["optimizer"] == copies["optimizer"]
    # the flag does nothing in a BF16 run
    assert _parts(precision="bf16", fp8_param_gather=True) == _parts(precision="bf16")


def test_the_tuners_floor_counts_the_copies_and_its_memory_is_the_projections() -> None:
    system = system_preset("h100-sxm5-80gb", 16)
    for extra in ({}, {"fp8_param_gather": True}):
        train = check(
            MODEL,
            system,
            TrainingSpec(
                tensor_model_parallel_size=2, pipeline_model_parallel_size=2, data_parallel_size=4,
                global_batch_size=32, seq_length=4096, precision="fp8_cs", use_distributed_optimizer=True, **extra,
            ),
        )  # fmt: skip
        group = GroupMemory(MODEL, system, train)
        projected = project_specs(MODEL, system, train, ProjectionOptions(breakdown=False)).memory
        assert group.memory(train.recompute_granularity, train.recompute_num_layers) == projected
        footprints = group._stage_footprints(layer_modes(train))
        floors = states_floor_bytes(MODEL, group.shard, train, footprints, group.holder, None, group._copy_bytes)
        without = states_floor_bytes(MODEL, group.shard, train, footprints, group.holder)
        for floor, bare, rank in zip(floors, without, projected.ranks, strict=True):
            assert floor <= rank.total_bytes
            if not extra:  # the copies are a state: in the floor, to the byte
                assert floor - bare == pytest.approx(rank.parts["quantized_weight_copies"], rel=1e-9)


BASE = (
    "--num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --micro-batch-size 1 "
    "--global-batch-size 8 --bf16 --use-distributed-optimizer "
)


def test_megatron_arguments_read_and_write_the_flag() -> None:
    model, system = model_preset("llama3.1-8b"), system_preset("b200", 8)
    _, fp8, _ = read_config(BASE + "--fp8-format hybrid --fp8-recipe mxfp8 --fp8-param-gather", "megatron", num_gpus=8)
    assert fp8.precision == "mxfp8" and fp8.fp8_param_gather and fp8.quantized_primary_weights
    assert "--fp8-param-gather" in write_megatron(model, system, fp8)
    _, fp4, _ = read_config(BASE + "--fp4-format e2m1 --fp4-param-gather", "megatron", num_gpus=8)
    assert fp4.precision == "nvfp4" and fp4.fp8_param_gather
    text = write_megatron(model, system, fp4)
    assert "--fp4-param-gather" in text and "--fp8-param-gather" not in text
    assert read_config(text, "megatron", num_gpus=8).train.fp8_param_gather
    _, plain, _ = read_config(BASE + "--fp8-format hybrid", "megatron", num_gpus=8)
    assert not plain.fp8_param_gather and "param-gather" not in write_megatron(model, system, plain)


@pytest.mark.parametrize(
    ("recipe", "quantized"),
    [
        ("bf16_with_mxfp8_mixed", True),
        ("bf16_with_fp8_current_scaling_mixed", True),
        ("bf16_with_fp8_subchannel_scaling_mixed", False),
        ("bf16_with_nvfp4_mixed", False),  # megatron-bridge 0.3.0 (26.02)
    ],
)
def test_bridge_recipes_quantise_the_weights_as_megatron_bridge_sets_them(recipe: str, quantized: bool) -> None:
    text = (
        (DATA / "nemo/llama3_70b_bridge.yaml")
        .read_text()
        .replace("mixed_precision: bf16_mixed", f"mixed_precision: {recipe}")
    )
    assert read_nemo(text, num_gpus=128).train.fp8_param_gather is quantized
    stated = text.replace("ddp:\n", "ddp:\n  fp8_param_gather: false\n", 1)
    assert "fp8_param_gather: false" in stated
    assert read_nemo(stated, num_gpus=128).train.fp8_param_gather is False  # a stated value is kept


def test_nemo_writes_the_flag_back() -> None:
    model, system = model_preset("llama3.1-8b"), system_preset("b200", 8)
    train = check(model, system, TrainingSpec(global_batch_size=8, precision="fp8_cs", fp8_param_gather=True))
    assert read_nemo(write_nemo(model, system, train), num_gpus=8).train.fp8_param_gather
    off = check(model, system, TrainingSpec(global_batch_size=8, precision="fp8_cs"))
    text = write_nemo(model, system, off)
    assert not read_nemo(text, num_gpus=8).train.fp8_param_gather and "overwrites it" in text


def test_nemo_eras_quantise_the_weights_of_their_fp8_recipes() -> None:
    def values(precision: str, day: date | None = None) -> dict[str, object]:
        return era_training_values("nemo-megatron", day, 2, precision, moe=False, gpu="b200")

    assert values("mxfp8")["fp8_param_gather"] is True and values("fp8_cs", date(2026, 2, 1))["fp8_param_gather"]
    assert values("fp8", date(2024, 7, 1))["fp8_param_gather"] is True  # nemo-toolkit 2.0.0 `fp8_params = True`
    assert values("nvfp4")["fp8_param_gather"] is False and values("fp8_blockwise")["fp8_param_gather"] is False
    assert values("bf16")["fp8_param_gather"] is False
    assert "fp8_param_gather" not in era_training_values("megatron-lm", None, 2, "fp8_cs", moe=False)  # off


def test_nemo2_plugin_fp8_params() -> None:
    text = (DATA / "nemo/mixtral_8x7b_nemo2.yaml").read_text()
    plain = read_nemo(text).train
    assert plain.precision == "fp8_cs" and not plain.fp8_param_gather
    on = text.replace("    fp8_recipe: tensorwise\n", "    fp8_recipe: tensorwise\n    fp8_params: true\n", 1)
    assert on != text and read_nemo(on).train.fp8_param_gather
