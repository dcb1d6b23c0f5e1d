import json

from typer.testing import CliRunner

from paraplan.cli.main import app

runner = CliRunner()


def test_project_json_has_the_documented_keys() -> None:
    result = runner.invoke(app, ["project", "--model", "llama3.1-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "64",
                                 "--tp", "4", "--pp", "4", "--gbs", "128", "--seq", "8192", "--sp", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    for key in ("step_time_s", "tokens_per_sec_per_gpu", "mfu", "hfu", "tflops_per_gpu", "breakdown", "memory"):
        assert key in out
    assert 0 < out["mfu"] < 1 and 0 < out["hfu"] < 1
    assert set(out["memory"]) >= {"peak_gib", "fits", "parts"}
    assert abs(sum(out["breakdown"].values()) - out["step_time_s"]) < 1e-9 * out["step_time_s"]
    assert abs(sum(out["memory"]["parts"].values()) - out["memory"]["peak_gib"]) < 1e-3


def test_project_is_deterministic() -> None:
    args = ["project", "--model", "mixtral-8x7b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--ep", "8", "--tp", "2",
            "--sp", "--gbs", "256", "--json"]  # fmt: skip
    assert runner.invoke(app, args).output == runner.invoke(app, args).output


def test_rich_table_and_memory_command() -> None:
    result = runner.invoke(
        app, ["project", "--model", "llama3.1-8b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--gbs", "64"]
    )
    assert result.exit_code == 0
    assert "step time" in result.output and "MFU" in result.output
    result = runner.invoke(app, ["memory", "--model", "llama3.1-8b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--gbs", "64",
                                 "--json"])  # fmt: skip
    assert result.exit_code == 0
    assert "fits" in json.loads(result.output)["memory"]


def test_catalog_commands() -> None:
    models = runner.invoke(app, ["models", "--json"])
    names = {m["name"] for m in json.loads(models.output)}
    assert {"gpt3-175b", "llama3.1-405b", "deepseek-v3", "nemotron4-340b", "qwen3-235b-a22b"} <= names
    gpus = runner.invoke(app, ["gpus", "--json"])
    assert {"a100-sxm4-80gb", "h100-sxm5-80gb", "b200", "gb200-nvl72", "mi325x"} <= {
        g["name"] for g in json.loads(gpus.output)
    }


def test_explicit_model_fields() -> None:
    result = runner.invoke(app, ["project", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--num-layers", "24", "--hidden-size",
                                 "2048", "--num-attention-heads", "16", "--vocab-size", "51200", "--activation", "gelu",
                                 "--norm", "layernorm", "--gbs", "16", "--seq", "2048", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["step_time_s"] > 0
