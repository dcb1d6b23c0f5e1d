"""torchao's float8 all-gather under torchtitan's FSDP2 (`TrainingSpec.fsdp_float8_all_gather`): the float8 linears'
weights gathered, kept and copied out in one byte, the rest 16-bit; the TOML keys; the rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.cost.calibration import calibration_for
from paraplan.cost.fsdp_copies import fsdp2_copies
from paraplan.errors import ConfigError
from paraplan.formats import emit, read_config
from paraplan.memory.fsdp2 import all_gather_pool_bytes
from paraplan.memory.model import state_bytes
from paraplan.projection import _dp_times, group_placements, project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check

DATA = Path(__file__).parents[1] / "formats" / "data" / "torchtitan"
LAYER, FLOAT8, EDGE = 218_103_808.0, 218_103_808.0, 1_050_673_152.0  # Llama 3.1 8B: a block, its linears, the root


def _train(on: bool, **values: object) -> TrainingSpec:
    base = dict(framework="torchtitan", fsdp=True, dp=8, mbs=1, gbs=8, seq=8192, precision="fp8_cs")
    return TrainingSpec().with_values(**{**base, **values, "fsdp_float8_all_gather": on})


def test_gathered_bytes_per_element() -> None:
    off, on = _train(False), _train(True)
    assert off.fsdp_gather_bytes(100.0, 60.0) == 200.0  # all 16-bit
    assert on.fsdp_gather_bytes(100.0, 60.0) == 2 * 40 + 1 * 60  # the float8 linears' weights in one byte
    assert on.fsdp_gather_bytes(100.0, 0.0) == 200.0


def test_the_all_gather_moves_fewer_bytes_and_takes_less_time() -> None:
    system = system_preset("h100-sxm5-80gb", 8)
    cal = calibration_for(system.gpu.name, "torchtitan")
    dense = 32 * LAYER + EDGE
    times = {}
    for on in (False, True):
        train = _train(on)
        times[on] = _dp_times(dense, 0.0, train, system, cal, group_placements(train, system), 33, None, 32 * FLOAT8)
    assert times[True][2] < 0.7 * times[False][2]  # the gather: 2.1 of 4.0 bytes per parameter
    assert times[True][3] == times[False][3]  # gradients reduce-scatter as before
    copy = {on: fsdp2_copies(dense, _train(on), system.gpu, cal, 33, 32 * FLOAT8).copy_out_s for on in (False, True)}
    assert copy[True] < 0.6 * copy[False]


def test_the_gathered_block_and_the_pool_are_smaller() -> None:
    off, on = _train(False), _train(True)
    pool_off = all_gather_pool_bytes(off, (EDGE,), LAYER, FLOAT8)
    pool_on = all_gather_pool_bytes(on, (EDGE,), LAYER, FLOAT8)
    # the root unit (embedding and LM head, 16-bit) and its copied input now exceed a block's two outputs and input
    assert pool_on == pytest.approx(2 * EDGE * (1 + 1 / 8))
    assert pool_off == pytest.approx(2 * (EDGE + LAYER * (1 + 1 / 8)))
    weights = {
        t.fsdp_float8_all_gather: state_bytes(1e10, 0.0, t, 8, EDGE + LAYER, gathered_float8_params=f8)["weights"]
        for t, f8 in ((off, 0.0), (on, FLOAT8))
    }
    assert weights[False] - weights[True] == pytest.approx(FLOAT8)  # one byte less per float8 weight


def test_projection_of_llama_8b() -> None:
    model, system = model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", 8)
    off = project_specs(model, system, _train(False, recompute_granularity="selective"))
    on = project_specs(model, system, _train(True, recompute_granularity="selective"))
    assert on.step_time_s < off.step_time_s
    assert on.pipeline.comm_total_s["fsdp"] < off.pipeline.comm_total_s["fsdp"]
    parts_off, parts_on = off.memory.ranks[0].parts, on.memory.ranks[0].parts
    assert parts_off["weights"] - parts_on["weights"] == pytest.approx(FLOAT8)
    assert parts_on["allocator_all_gather_pool"] < parts_off["allocator_all_gather_pool"]
    assert parts_on["gradients"] == parts_off["gradients"]  # gradients stay 16-bit


def test_rule() -> None:
    model, system = model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", 8)
    with pytest.raises(ConfigError, match="fsdp_float8_all_gather needs per-tensor FP8"):
        check(model, system, _train(True, precision="fp8_blockwise"))
    with pytest.raises(ConfigError, match="fsdp_float8_all_gather needs torchtitan's FSDP"):
        check(model, system, _train(True, framework="megatron-lm", fsdp=False))
    result = CliRunner().invoke(
        app,
        ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--framework", "torchtitan",
         "--fsdp", "--precision", "bf16", "--fsdp-float8-all-gather", "--seq", "8192", "--mbs", "1"],
    )  # fmt: skip
    assert result.exit_code == 2 and "fsdp_float8_all_gather needs per-tensor FP8" in result.output


def test_torchtitan_toml_round_trip() -> None:
    first = read_config(DATA / "llama3_8b.toml", "torchtitan", num_gpus=64)
    assert first.train.fsdp_float8_all_gather
    system = system_preset("h100-sxm5-80gb", 64)
    text = emit("torchtitan", first.model, system, first.train, strict=True)
    assert "enable_fsdp_float8_all_gather = true" in text and "recipe_name" not in text  # torchtitan refuses both
    assert read_config(text, "torchtitan", num_gpus=64).train.fsdp_float8_all_gather
    plain = emit("torchtitan", first.model, system, first.train.with_values(fsdp_float8_all_gather=False))
    assert (
        "enable_fsdp_float8_all_gather" not in plain
        and not read_config(plain, "torchtitan", num_gpus=64).train.fsdp_float8_all_gather
    )


def test_torchtitan_toml_rules() -> None:
    text = (DATA / "llama3_8b.toml").read_text()
    with pytest.raises(ConfigError, match="not supported with float8.recipe_name"):
        read_config(text + 'recipe_name = "tensorwise"\n', "torchtitan", num_gpus=64)
    unsharded = text.replace("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 1").replace(
        "data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 32"
    )
    read = read_config(unsharded, "torchtitan", num_gpus=64)
    assert not read.train.fsdp_float8_all_gather
    assert any("enable_fsdp_float8_all_gather is off without FSDP" in n for n in read.hints.notes)
    no_precompute = text.replace("precompute_float8_dynamic_scale_for_fsdp = true\n", "")
    notes = read_config(no_precompute, "torchtitan", num_gpus=64).hints.notes
    assert any("projected with precomputed scales" in n for n in notes)


def test_chakra_trace_sizes_the_float8_gather(tmp_path: Path) -> None:
    from paraplan.formats.chakra import export_chakra
    from paraplan.formats.chakra_pb import read_trace

    model, system = model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", 8)
    sizes = {}
    for on in (False, True):
        train = check(model, system, _train(on, gbs=8, seq=1024))
        out = export_chakra(model, system, train, tmp_path / str(on), prefix="t", ranks=(0,))
        nodes = read_trace(out.paths[0])[1]
        sizes[on] = next(n.attr("comm_size") for n in nodes if n.name == "F.mb0.s0.fsdp_gather.dp")
    dense = sizes[False] / 2  # 16-bit elements before
    assert sizes[True] == pytest.approx(2 * (dense - 32 * FLOAT8) + 32 * FLOAT8)
