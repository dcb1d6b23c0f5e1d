"""An unknown setting name is a ConfigError naming it (and the closest valid name), never dropped: issue 31."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

import paraplan
from paraplan.cli.main import app
from paraplan.cost.calibration import Calibration, calibration_for
from paraplan.errors import ConfigError
from paraplan.specs.files import system_from_file, training_from_file
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec


def test_api_keyword_is_checked() -> None:
    """`tensor_parallel=8` used to project tp 1 without a word."""
    with pytest.raises(ConfigError) as err:
        paraplan.project("llama3.1-8b", "h100-sxm5-80gb", 8, tensor_parallel=8, gbs=64)
    assert err.value.problems == [
        "unknown training setting 'tensor_parallel' (did you mean 'tensor_model_parallel_size'?)"
    ]
    assert paraplan.project("llama3.1-8b", "h100-sxm5-80gb", 8, tp=8, gbs=64).train.tp == 8


def test_training_with_values() -> None:
    with pytest.raises(ConfigError, match="unknown training setting 'micro_batch' .*'micro_batch_size'"):
        TrainingSpec().with_values(micro_batch=2)
    with pytest.raises(ConfigError) as err:  # every unknown name at once, even one given as None
        TrainingSpec().with_values(tp=2, zzz=1, qqq=None)
    assert [p.split("'")[1] for p in err.value.problems] == ["qqq", "zzz"]
    assert TrainingSpec().with_values(tp=2, sp=True, dp=None).sequence_parallel


def test_model_with_overrides() -> None:
    model = model_preset("llama3.1-8b")
    with pytest.raises(ConfigError, match="unknown model field 'num_layer' .*'num_layers'"):
        model.with_overrides(num_layer=4)
    assert model.with_overrides(num_layers=4, kv_channels=None).num_layers == 4


def test_system_with_overrides() -> None:
    system = system_preset("h100-sxm5-80gb", 8)
    with pytest.raises(ConfigError, match="unknown system field 'nic_gpbs' .*'nic_gbps'"):
        system.with_overrides(nic_gpbs=200)
    changed = system.with_overrides(nic_gbps=200, hbm_gib=40.0)
    assert (changed.nic_gbps, changed.gpu.hbm_gib) == (200, 40.0)


def test_calibration_with_values() -> None:
    with pytest.raises(ConfigError, match="unknown calibration constant 'gemm_eff' .*'gemm_efficiency'"):
        Calibration().with_values(gemm_eff=0.5)
    with pytest.raises(ConfigError, match="unknown calibration constant 'gemm_eficiency'"):
        calibration_for("h100-sxm5-80gb", "", table={"family": {"hopper": {"gemm_eficiency": 0.5}}})


def test_files(tmp_path: Path) -> None:
    system = tmp_path / "system.yaml"
    system.write_text("gpu: h100-sxm5-80gb\nnum_gpus: 8\nnic_gpbs: 200\n")
    with pytest.raises(ConfigError, match=r"system.yaml: unknown system field 'nic_gpbs' \(did you mean 'nic_gbps'"):
        system_from_file(system)
    train = tmp_path / "train.yaml"
    train.write_text("tp: 2\nglobal_batch: 16\n")
    with pytest.raises(ConfigError, match=r"train.yaml: unknown training setting 'global_batch' .*'global_batch_size'"):
        training_from_file(train)


@pytest.mark.parametrize(
    ("name", "text", "option", "line"),
    [
        (
            "system.yaml",
            "gpu: h100-sxm5-80gb\nnum_gpus: 8\nrail_optimised: true\n",
            "--system-file",
            "unknown system field 'rail_optimised'",
        ),
        ("train.yaml", "tp: 2\nmicro_batch: 1\n", "--config", "unknown training setting 'micro_batch'"),
    ],
)
def test_cli_files_exit_2_with_one_line(tmp_path: Path, name: str, text: str, option: str, line: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    args = ["project", "--model", "llama3.1-8b", "--gbs", "8", option, str(path)]
    if option == "--config":
        args += ["--gpu", "h100-sxm5-80gb", "--gpus", "8"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and line in errors[0], result.output


def test_rail_optimized_is_gone() -> None:
    """It was accepted and changed nothing; the network model has no term for it (cost/comm.py), so it is removed
    and a file that sets it is told so instead of being believed."""
    with pytest.raises(ConfigError, match="unknown system field 'rail_optimized'"):
        system_preset("h100-sxm5-80gb", 8).with_overrides(rail_optimized=False)
