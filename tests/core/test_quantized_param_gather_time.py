"""The time of quantised primary weights under megatron-core's distributed optimizer (`--fp8-param-gather`,
`TrainingSpec.gathers_quantized_weights`, `cost.primary_weights`): the param all-gather sends one byte per quantised
weight, the optimizer casts its shard of them after its step (with an amax all-reduce), and the first micro-batch
remakes only the column-wise copies; MXFP8 (16-bit gather through the grad buffer, quantised on every rank) and NVFP4
(not run by TE 2.9's distributed-optimizer path) keep the time they had without the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from paraplan.cost.calibration import calibration_for
from paraplan.cost.collectives import timed_collective
from paraplan.cost.comm import place_group
from paraplan.cost.quantize import (
    RECIPES,
    primary_weight_amax_bytes,
    primary_weight_cast_bytes,
    weight_quantize_bytes,
    weight_transpose_bytes,
)
from paraplan.formats.chakra import export_chakra
from paraplan.formats.chakra_pb import read_trace
from paraplan.graph.ops import CommAxis, CommKind
from paraplan.projection import (
    _dp_times,
    _optimizer_time,
    _StageSums,
    _weight_casts_s,
    group_placements,
    stage_costs,
)
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check

MODEL = model_preset("llama3.1-8b")
H100, B200 = system_preset("h100-sxm5-80gb", 16), system_preset("b200", 16)


def _train(precision: str = "fp8_cs", flag: bool = True, **values: object) -> TrainingSpec:
    base = dict(dp=16, mbs=1, gbs=64, seq=4096, use_distributed_optimizer=True, precision=precision)
    return TrainingSpec().with_values(**{**base, **values, "fp8_param_gather": flag})


@pytest.mark.parametrize(
    ("values", "gathers"),
    [
        ({"precision": "fp8"}, True),
        ({"precision": "fp8_cs"}, True),
        ({"precision": "fp8_blockwise"}, True),
        ({"precision": "fp8_cs", "framework": "nemo-megatron"}, True),
        ({"precision": "mxfp8"}, False),  # gathered in 16 bits through the grad buffer, quantised on every rank
        ({"precision": "nvfp4"}, False),  # TE 2.9's cast_master_weights_to_fp8 refuses NVFP4
        ({"precision": "bf16"}, False),
        ({"precision": "fp8_cs", "fp8_param_gather": False}, False),
        ({"precision": "fp8_cs", "use_distributed_optimizer": False}, False),  # no sharded optimizer: no gather
        ({"precision": "fp8_cs", "fsdp": True, "zero_stage": 3, "use_distributed_optimizer": False}, False),
        ({"precision": "fp8_cs", "framework": "torchtitan"}, False),
    ],
)
def test_which_runs_gather_quantized_weights(values: dict[str, object], gathers: bool) -> None:
    flag = bool(values.pop("fp8_param_gather", True))
    assert _train(flag=flag, **values).gathers_quantized_weights is gathers


def test_the_all_gather_sends_one_byte_per_quantized_weight() -> None:
    cal = calibration_for(H100.gpu.name, "megatron-lm")
    dense, expert = 4e9, 6e9
    for overlap in (False, True):  # one collective, or megatron-core's buckets (counted in parameters)
        on, off = _train(overlap_grad_reduce=overlap), _train(flag=False, overlap_grad_reduce=overlap)
        groups = group_placements(on, H100)
        every = _dp_times(dense, expert, on, H100, cal, groups, 1, None, dense, expert)
        none = _dp_times(dense, expert, off, H100, cal, groups, 1, None, dense, expert)  # the flag off: 16-bit
        assert every[0] == none[0]  # gradients reduce as before
        if not overlap:  # one byte per element of everything: the bytes of half the parameters in 16 bits
            assert every[1] == _dp_times(dense / 2, expert / 2, off, H100, cal, groups)[1]
            assert every[1] < 0.55 * none[1]
        else:  # as many buckets (megatron-core sizes them in elements), each of half the bytes: the latencies remain
            assert every[1] < 0.7 * none[1]
        part = _dp_times(dense, expert, on, H100, cal, groups, 1, None, dense / 4, 0.0)
        assert every[1] < part[1] < none[1]


@pytest.mark.parametrize(("gpu", "system"), [("h100", H100), ("b200", B200)])
@pytest.mark.parametrize("precision", ["fp8", "fp8_cs", "fp8_blockwise"])
def test_the_first_microbatch_only_remakes_the_columnwise_copies(gpu: str, system: object, precision: str) -> None:
    cal = calibration_for(system.gpu.name, "megatron-lm")  # type: ignore[attr-defined]
    quantized = 1e9
    total = _StageSums(quantized_weights=quantized, float8_params=quantized)
    on, off = _train(precision), _train(precision, flag=False)
    bandwidth = system.gpu.hbm_bytes_per_s * cal.memory_efficiency  # type: ignore[attr-defined]
    any_layout = gpu == "b200"
    recipe = RECIPES[precision]
    assert _weight_casts_s(total, off, system, cal) == pytest.approx(  # type: ignore[arg-type]
        weight_quantize_bytes(recipe, quantized, any_layout) / bandwidth / off.num_microbatches, rel=1e-12
    )
    expected = weight_transpose_bytes(recipe, quantized, any_layout) / bandwidth / on.num_microbatches
    assert _weight_casts_s(total, on, system, cal) == pytest.approx(expected, rel=1e-12)  # type: ignore[arg-type]
    if precision != "fp8_blockwise" and any_layout:  # Blackwell per-tensor FP8: one copy serves both GEMMs
        assert expected == 0.0
    else:  # Hopper per-tensor, and 2D blocks on every GPU: one transpose (a byte read, a byte written)
        assert expected > 0.0


@pytest.mark.parametrize(("precision", "bytes_per_element"), [("fp8", 3.0), ("fp8_cs", 5.0), ("fp8_blockwise", 5.0)])
def test_the_optimizer_casts_its_shard_and_reduces_the_amaxes(precision: str, bytes_per_element: float) -> None:
    cal = calibration_for(H100.gpu.name, "megatron-lm")
    on, off = _train(precision, ep=4), _train(precision, flag=False, ep=4)
    groups = group_placements(on, H100)
    dense, expert, q_dense, q_expert = 2e9, 8e9, 1.5e9, 8e9
    edp = 4
    base = _optimizer_time(dense, expert, off, edp, H100, cal, 0.0, (q_dense, q_expert), groups)
    with_cast = _optimizer_time(dense, expert, on, edp, H100, cal, 0.0, (q_dense, q_expert), groups)
    shard = q_dense / 16 + q_expert / edp
    weight = RECIPES[precision].weight_element_bytes
    assert primary_weight_cast_bytes(RECIPES[precision], shard) == pytest.approx(
        shard * (bytes_per_element - 1 + weight)
    )
    cast = primary_weight_cast_bytes(RECIPES[precision], shard) / (H100.gpu.hbm_bytes_per_s * cal.memory_efficiency)
    amax = sum(
        timed_collective(CommKind.ALL_REDUCE, primary_weight_amax_bytes(RECIPES[precision], q), g, H100, cal,
                         axis=CommAxis.DP)[0]
        for q, g in ((q_dense, groups[CommAxis.DP]), (q_expert, place_group(edp, on.etp * on.ep, H100.gpus_per_node)))
    )  # fmt: skip
    assert amax > 0.0
    assert with_cast - base == pytest.approx(cast + amax, rel=1e-9)


def _stages(train: TrainingSpec, system: object) -> tuple[object, ...]:
    return stage_costs(MODEL, system, check(MODEL, system, train))  # type: ignore[arg-type]


@pytest.mark.parametrize(("precision", "system"), [("mxfp8", B200), ("nvfp4", B200), ("bf16", H100), ("bf16", B200)])
def test_mxfp8_nvfp4_and_bf16_runs_keep_their_time(precision: str, system: object) -> None:
    assert _stages(_train(precision), system) == _stages(_train(precision, flag=False), system)


def test_a_quantized_run_gathers_less_and_casts_in_the_optimizer() -> None:
    on, off = _stages(_train("fp8_cs"), H100), _stages(_train("fp8_cs", flag=False), H100)
    for with_flag, without in zip(on, off, strict=True):
        assert with_flag.dp_param_gather_s < 0.75 * without.dp_param_gather_s  # type: ignore[attr-defined]
        assert with_flag.dp_grad_reduce_s == without.dp_grad_reduce_s  # type: ignore[attr-defined]
        assert with_flag.forward_s < without.forward_s  # type: ignore[attr-defined]
        assert with_flag.optimizer_s > without.optimizer_s  # type: ignore[attr-defined]


def test_chakra_trace_sizes_the_optimizer_s_param_gather(tmp_path: Path) -> None:
    system = system_preset("h100-sxm5-80gb", 8)
    sizes = {}
    for flag in (False, True):
        train = check(MODEL, system, _train("fp8_cs", flag, dp=8, gbs=8, seq=1024))
        out = export_chakra(MODEL, system, train, tmp_path / str(flag), prefix="t", ranks=(0,))
        nodes = read_trace(out.paths[0])[1]
        sizes[flag] = sum(n.attr("comm_size") for n in nodes if n.name.startswith("param_gather"))
    linear = MODEL.num_layers * 218_103_808  # Llama 3.1 8B: a layer's QKV, output and SwiGLU weights, in fp8
    assert sizes[True] == pytest.approx(sizes[False] - linear)


@pytest.mark.parametrize(
    ("precision", "values", "casts"),
    [
        ("fp8", {}, True),
        ("fp8", {"use_precision_aware_optimizer": True}, False),  # TE FusedAdam writes delayed-scaling FP8 params
        ("fp8_cs", {"use_precision_aware_optimizer": True}, True),  # fp32 main params: megatron-core casts
        ("fp8_cs", {"use_precision_aware_optimizer": True, "main_params_dtype": "fp16"}, False),
    ],
)
def test_the_precision_aware_optimizer_may_write_the_weights_itself(
    precision: str, values: dict[str, object], casts: bool
) -> None:
    cal = calibration_for(H100.gpu.name, "megatron-lm")
    on, off = _train(precision, **values), _train(precision, flag=False, **values)
    groups = group_placements(on, H100)
    q = (1e9, 0.0)
    added = _optimizer_time(2e9, 0.0, on, 16, H100, cal, 0.0, q, groups) - _optimizer_time(
        2e9, 0.0, off, 16, H100, cal, 0.0, q, groups
    )
    assert (added > 0.0) is casts
