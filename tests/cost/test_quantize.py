"""Low-precision recipes as their quantisation kernels (issue 32): which GEMMs run quantised, the bytes each recipe's
casts move, weights cast once per step under megatron-core, and the first/last layers a run keeps in BF16."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paraplan.api import project
from paraplan.cost.calibration import calibration_for
from paraplan.cost.compute import activation_quantize_s, compute_time_s, gemm_time_s
from paraplan.cost.quantize import RECIPES, activation_quantize_bytes, weight_quantize_bytes
from paraplan.errors import ConfigError
from paraplan.formats import read_config
from paraplan.graph import layers as L
from paraplan.graph.backward import backward_ops
from paraplan.graph.kinds import layer_kind
from paraplan.graph.ops import OpKind, Phase
from paraplan.graph.partition import pipeline_split
from paraplan.memory.activations import layer_modes
from paraplan.projection import _layout_parts
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import LOW_PRECISIONS, TrainingSpec

ELEMENTS = 1_000_000


@pytest.mark.parametrize(
    ("precision", "any_layout", "per_element"),
    [
        ("fp8", False, 2 + 2 * 1),  # Hopper delayed scaling: fused cast-transpose, both copies, amax in the cast
        ("fp8", True, 2 + 1),  # Blackwell: one copy serves both layouts
        ("fp8_cs", True, 2 + 2 + 1),  # current scaling: an amax pass first
        ("fp8_cs", False, 2 + 2 + 2 * 1),
        ("fp8_blockwise", False, 2 + 2 * (1 + 4 / 128)),  # 1x128 FP32 scales, a copy per orientation
        ("mxfp8", True, 2 + 2 * (1 + 1 / 32)),  # E8M0 scale per 32, row- and column-wise in one kernel
        ("nvfp4", True, 3 * 2 + 2 * (0.5 + 1 / 16)),  # amax, row-wise cast, RHT + column-wise cast
    ],
)
def test_activation_quantize_bytes_per_recipe(precision: str, any_layout: bool, per_element: float) -> None:
    recipe = RECIPES[precision]
    assert activation_quantize_bytes(recipe, ELEMENTS, any_layout) == pytest.approx(per_element * ELEMENTS)


@pytest.mark.parametrize(
    ("precision", "any_layout", "per_element"),
    [
        ("fp8", True, 2 + 1),
        ("fp8_cs", False, 2 + 2 + 2),
        ("mxfp8", True, 2 + 2 * (1 + 1 / 32)),
        ("nvfp4", True, 2 * 2 + 2 * (0.5 + 1 / 256)),  # 16x16 2D blocks, no RHT on weights
    ],
)
def test_weight_quantize_bytes_per_recipe(precision: str, any_layout: bool, per_element: float) -> None:
    assert weight_quantize_bytes(RECIPES[precision], ELEMENTS, any_layout) == pytest.approx(per_element * ELEMENTS)


def test_every_low_precision_has_a_recipe() -> None:
    assert set(RECIPES) == set(LOW_PRECISIONS)


def _layer(precision: str, gpu: str = "gb200-nvl72"):
    model = model_preset("llama3.1-70b")
    train = TrainingSpec(
        tensor_model_parallel_size=4, micro_batch_size=1, global_batch_size=8, seq_length=8192, precision=precision
    )
    shard = L.Shard.of(train)
    forward = layer_kind("dense").ops(model, shard)
    ops = [o for op in forward for o in (op, *backward_ops(op))]
    gpu_spec = system_preset(gpu, 8).gpu
    cal = calibration_for(gpu_spec.name, "megatron-lm")
    return ops, gpu_spec, cal


def _gemm_s(ops, gpu, cal) -> float:
    return sum(compute_time_s(op, gpu, cal) for op in ops if op.kind is OpKind.GEMM)


def test_nvfp4_gains_less_than_its_peak_ratio_over_mxfp8_on_a_gemm_heavy_layer() -> None:
    """The FP4 peak is twice FP8's on Blackwell, and both take the fitted FP8 efficiency: NVFP4's GEMMs would run
    at half MXFP8's time but for the quantisation kernels, which move more bytes for NVFP4 (three reads of the
    16-bit tensor, for the amax, the row-wise cast and the RHT cast) than for MXFP8 (one)."""
    fp4_ops, gpu, cal = _layer("nvfp4")
    fp8_ops, _, _ = _layer("mxfp8")
    speedup = _gemm_s(fp8_ops, gpu, cal) / _gemm_s(fp4_ops, gpu, cal)
    peak_ratio = gpu.peak_flops("nvfp4") / gpu.peak_flops("mxfp8")
    assert peak_ratio == 2.0
    assert 1.0 < speedup < 0.9 * peak_ratio
    # the casts are what keeps it from the peak ratio
    fp4_casts = sum(activation_quantize_s(op, gpu, cal) for op in fp4_ops if op.kind is OpKind.GEMM)
    fp8_casts = sum(activation_quantize_s(op, gpu, cal) for op in fp8_ops if op.kind is OpKind.GEMM)
    assert fp4_casts > 1.5 * fp8_casts
    bare = (_gemm_s(fp8_ops, gpu, cal) - fp8_casts) / (_gemm_s(fp4_ops, gpu, cal) - fp4_casts)
    assert bare == pytest.approx(peak_ratio, rel=0.15)


def test_casts_run_before_forward_and_input_gradient_gemms_only() -> None:
    """The weight-gradient GEMM reads the column-wise copies the forward and input-gradient casts wrote."""
    ops, gpu, cal = _layer("nvfp4")
    qkv = [op for op in ops if op.name == "qkv"]
    by_phase = {op.phase: op for op in qkv}
    assert activation_quantize_s(by_phase[Phase.BACKWARD_WEIGHT], gpu, cal) == 0.0
    forward = by_phase[Phase.FORWARD]
    g = forward.gemm
    expected = activation_quantize_bytes(RECIPES["nvfp4"], g.m * g.k * g.count, True) / (
        gpu.hbm_bytes_per_s * cal.memory_efficiency
    )
    assert activation_quantize_s(forward, gpu, cal) == pytest.approx(expected + 3 * cal.kernel_launch_s)
    bf16 = replace(forward, precision="bf16")
    assert activation_quantize_s(bf16, gpu, cal) == 0.0 and gemm_time_s(bf16, gpu, cal) > 0


def test_lm_head_and_router_stay_bf16_in_low_precision_runs() -> None:
    """megatron-core's output layer and TopKRouter run outside Transformer Engine; torchtitan filters `output`."""
    model = model_preset("mixtral-8x7b")
    shard = L.Shard.of(TrainingSpec(precision="nvfp4", seq_length=1024))
    head = {op.name: op.precision for op in layer_kind("head").ops(model, shard) if op.kind is OpKind.GEMM}
    moe = {op.name: op.precision for op in layer_kind("moe").ops(model, shard) if op.kind is OpKind.GEMM}
    assert head == {"lm_head": "bf16"}
    assert moe["router"] == "bf16"
    assert moe["qkv"] == moe["expert_up"] == moe["expert_down"] == "nvfp4"


def _nvfp4_run(**extra) -> object:
    return project(
        "llama3.1-70b", "gb200-nvl72", 64, tp=4, pp=4, mbs=1, gbs=128, seq=8192, sp=True, precision="nvfp4",
        framework="nemo-megatron", **extra,
    )  # fmt: skip


def test_bf16_layers_cost_as_bf16() -> None:
    """Every layer kept in BF16: the NVFP4 run costs what the BF16 run does (the LM head is BF16 in both)."""
    everything = _nvfp4_run(first_last_layers_bf16=True, num_layers_at_start_in_bf16=40, num_layers_at_end_in_bf16=40)
    bf16 = project(
        "llama3.1-70b", "gb200-nvl72", 64, tp=4, pp=4, mbs=1, gbs=128, seq=8192, sp=True, precision="bf16",
        framework="nemo-megatron",
    )  # fmt: skip
    assert everything.step_time_s == pytest.approx(bf16.step_time_s, rel=1e-9)
    plain = _nvfp4_run()
    edges = _nvfp4_run(first_last_layers_bf16=True)  # Megatron's default counts: one layer at each end
    assert plain.step_time_s < edges.step_time_s < everything.step_time_s
    # the counts alone do nothing (megatron-core reads them only under the switch)
    assert _nvfp4_run(num_layers_at_end_in_bf16=8).step_time_s == plain.step_time_s


def test_bf16_layers_are_the_global_first_and_last() -> None:
    model = model_preset("llama3.1-70b")
    train = TrainingSpec(
        pipeline_model_parallel_size=4, data_parallel_size=1, global_batch_size=8, precision="nvfp4",
        first_last_layers_bf16=True, num_layers_at_start_in_bf16=2, num_layers_at_end_in_bf16=3,
    )  # fmt: skip
    stages, _ = _layout_parts(model, pipeline_split(train), *layer_modes(train), train.bf16_edge_layers)
    bf16_layers = [sum(n for _, _, n, bf16 in parts if bf16) for parts in stages]
    assert bf16_layers == [2, 0, 0, 3]
    assert train.bf16_edge_layers == (2, 3)
    assert replace(train, precision="bf16").bf16_edge_layers == (0, 0)


def test_weights_cast_once_per_step_under_megatron_core_and_every_forward_elsewhere() -> None:
    """TE keeps the weights' casts over the micro-batches when megatron-core passes `is_first_microbatch`."""
    base = dict(tp=8, mbs=1, seq=4096, sp=True, precision="fp8_cs")
    few = project("llama3.1-8b", "h100-sxm5-80gb", 8, gbs=2, framework="megatron-lm", **base)
    many = project("llama3.1-8b", "h100-sxm5-80gb", 8, gbs=16, framework="megatron-lm", **base)
    titan_few = project("llama3.1-8b", "h100-sxm5-80gb", 8, gbs=2, framework="torchtitan", **base)
    titan_many = project("llama3.1-8b", "h100-sxm5-80gb", 8, gbs=16, framework="torchtitan", **base)
    # per micro-batch: megatron-core's share of the weight casts falls with more micro-batches, torchtitan's does not
    mega = few.step_time_s / 2 - many.step_time_s / 16
    titan = titan_few.step_time_s / 2 - titan_many.step_time_s / 16
    assert mega > titan


def test_bf16_layer_counts_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"40 \+ 41 = 81 exceeds the model's 80 decoder layers"):
        _nvfp4_run(first_last_layers_bf16=True, num_layers_at_start_in_bf16=40, num_layers_at_end_in_bf16=41)
    with pytest.raises(ConfigError, match=r"num_layers_at_end_in_bf16 must be >= 0 \(got -1\)"):
        _nvfp4_run(num_layers_at_end_in_bf16=-1)


def test_first_last_layers_bf16_round_trips_through_megatron_and_nemo() -> None:
    from paraplan.formats.megatron import write_megatron
    from paraplan.formats.nemo import read_nemo, write_nemo

    base = "--num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --micro-batch-size 1 "
    base += "--global-batch-size 8 --bf16 --fp4-format e2m1 --fp4-recipe nvfp4"
    _, train, _ = read_config(base + " --first-last-layers-bf16 --num-layers-at-end-in-bf16 3", "megatron", num_gpus=8)
    assert train.precision == "nvfp4" and train.bf16_edge_layers == (1, 3)  # Megatron's default start count: 1
    _, off, hints = read_config(base + " --num-layers-at-end-in-bf16 3", "megatron", num_gpus=8)
    assert off.bf16_edge_layers == (0, 0) and any("every layer in the low precision" in n for n in hints.notes)
    model, system = model_preset("llama3.1-8b"), system_preset("b200", 8)
    text = write_megatron(model, system, train)
    assert "--first-last-layers-bf16" in text and "--num-layers-at-end-in-bf16 3" in text
    assert read_config(text, "megatron", num_gpus=8).train.bf16_edge_layers == (1, 3)
    assert read_nemo(write_nemo(model, system, train), num_gpus=8).train.bf16_edge_layers == (1, 3)
    assert "--first-last-layers-bf16" not in write_megatron(model, system, off)


def test_chakra_traces_build_the_bf16_layers_in_bf16() -> None:
    from paraplan.formats.chakra import _stage_parts
    from paraplan.graph.partition import virtual_stages

    model = model_preset("llama3.1-8b")
    train = TrainingSpec(
        data_parallel_size=1, global_batch_size=1, precision="mxfp8", first_last_layers_bf16=True,
        num_layers_at_end_in_bf16=2,
    )  # fmt: skip
    (stage,) = virtual_stages(model, train)
    parts = {name: ops for name, _, ops in _stage_parts(model, L.Shard.of(train), train, stage)}

    def gemms(name: str) -> set[str]:
        return {op.precision for op in parts[name] if op.kind is OpKind.GEMM}

    assert gemms("layer0") == gemms("layer30") == gemms("layer31") == {"bf16"}
    assert gemms("layer1") == gemms("layer29") == {"mxfp8"}
