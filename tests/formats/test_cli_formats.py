"""`paraplan convert` and `paraplan project --megatron-args/--from-config/--emit/--chakra`."""

import json
from pathlib import Path

from typer.testing import CliRunner

from paraplan.cli.main import app

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def _errors(result) -> list[str]:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return [line for line in result.output.splitlines() if line.startswith("error:")]


def test_convert_between_formats() -> None:
    result = runner.invoke(
        app,
        [
            "convert",
            "--from",
            "megatron",
            "--input",
            str(DATA / "megatron/llama3_8b_pretrain.sh"),
            "--to",
            "torchtitan",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "[parallelism]" in result.output and "tensor_parallel_degree = 2" in result.output


def test_convert_writes_a_file(tmp_path: Path) -> None:
    out = tmp_path / "exp.yaml"
    args = ["convert", "--input", str(DATA / "nemo/mixtral_8x7b_nemo2.yaml"), "--to", "primus", "-o", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    assert "expert_model_parallel_size: 8" in out.read_text()


def test_convert_reports_bad_input_with_exit_2() -> None:
    result = runner.invoke(
        app, ["convert", "--input", str(DATA / "torchtitan/bad.toml"), "--to", "megatron", "--gpus", "16"]
    )
    lines = _errors(result)
    assert any("unknown section 'optimiser'" in line for line in lines) and len(lines) == 6


def test_convert_needs_the_gpu_count() -> None:
    result = runner.invoke(app, ["convert", "--input", str(DATA / "nemo/llama3_70b_bridge.yaml"), "--to", "megatron"])
    assert any("does not state the GPU count: give --gpus" in line for line in _errors(result))


def test_convert_checks_the_layout() -> None:
    args = ["convert", "--input", str(DATA / "nemo/llama3_70b_bridge.yaml"), "--to", "megatron", "--gpus", "48"]
    assert any("must equal the GPU count 48" in line for line in _errors(runner.invoke(app, args)))


def test_convert_to_chakra(tmp_path: Path) -> None:
    source = tmp_path / "small.sh"
    source.write_text(
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 512 --num-attention-heads 8 \\\n"
        "  --vocab-size 32000 --swiglu --normalization RMSNorm --position-embedding-type rope --bf16 \\\n"
        "  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel \\\n"
        "  --micro-batch-size 1 --global-batch-size 8 --seq-length 1024 --use-distributed-optimizer\n"
    )
    args = ["convert", "--input", str(source), "--to", "chakra", "-o", str(tmp_path), "--gpu", "h100-sxm5-80gb"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.glob("*.et")) == sorted(f"paraplan.{r}.et" for r in range(8))
    assert (tmp_path / "comm_group.json").is_file()


def test_project_from_megatron_args_with_overrides() -> None:
    args = ["project", "--megatron-args", str(DATA / "megatron/llama3_8b_pretrain.sh"), "--gpu", "h100-sxm5-80gb"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)["config"]
    assert (config["tp"], config["pp"], config["dp"], config["gbs"]) == (2, 2, 8, 128)  # 32 GPUs from torchrun
    result = runner.invoke(app, [*args, "--tp", "4", "--json"])  # an explicit option wins over the file
    assert json.loads(result.stdout)["config"]["tp"] == 4


def test_project_megatron_args_string_on_a_preset() -> None:
    args = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--json"]
    megatron = "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --global-batch-size 64 --bf16"
    megatron += " --num-layers-per-virtual-pipeline-stage 8"  # the layer count comes from the preset
    result = runner.invoke(app, [*args, "--megatron-args", megatron])
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)["config"]
    assert (config["tp"], config["pp"], config["vpp"]) == (2, 2, 2)


def test_project_from_config_and_emit(tmp_path: Path) -> None:
    out = tmp_path / "run.sh"
    args = ["project", "--from-config", str(DATA / "torchtitan/llama3_8b.toml"), "--gpu", "h100-sxm5-80gb"]
    result = runner.invoke(app, [*args, "--gpus", "64", "--emit", "megatron", "--emit-file", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "--tensor-model-parallel-size 2" in text and "--use-torch-fsdp2" in text
    assert "--fp8-recipe tensorwise" in text


def test_project_emit_prints_after_the_report() -> None:
    args = ["project", "--from-config", str(DATA / "nemo/mixtral_8x7b_nemo2.yaml"), "--gpu", "h100-sxm5-80gb"]
    result = runner.invoke(app, [*args, "--emit", "nemo"])
    assert result.exit_code == 0, result.output
    assert "num_moe_experts: 8" in result.stdout


def test_project_reports_a_bad_config() -> None:
    args = ["project", "--from-config", str(DATA / "nemo/bad_bridge.yaml"), "--gpu", "h100-sxm5-80gb", "--gpus", "8"]
    assert len(_errors(runner.invoke(app, args))) == 5
    result = runner.invoke(app, ["project", "--megatron-args", "--tp 2", "--gpu", "h100-sxm5-80gb", "--gpus", "8"])
    assert any("unknown flag --tp" in line for line in _errors(result))
