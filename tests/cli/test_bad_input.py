"""Every kind of bad input: one clear line per problem, exit code 2, no traceback."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app

runner = CliRunner()
BASE = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb"]


def run(args: list[str]):
    return runner.invoke(app, args)


def assert_bad(result, *fragments: str) -> list[str]:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    for fragment in fragments:
        assert any(fragment in ln for ln in lines), (fragment, result.output)
    return lines


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (
            ["--gpus", "16", "--tp", "4", "--pp", "2", "--dp", "3", "--gbs", "48"],
            "world size tp*pp*cp*dp = 4*2*1*3 = 24",
        ),
        (["--gpus", "12", "--tp", "3", "--gbs", "4"], "attention heads 32 must be divisible by tp 3"),
        (["--gpus", "16", "--tp", "16", "--gbs", "16"], "KV groups 8 must be divisible by tp 16"),
        (["--gpus", "8", "--pp", "8", "--vpp", "3", "--gbs", "64"], "must divide evenly"),
        (["--gpus", "8", "--mbs", "3", "--gbs", "32"], "global batch 32 must be divisible by mbs*dp = 3*8 = 24"),
        (["--gpus", "8", "--pp", "4", "--vpp", "2", "--gbs", "4"], "interleaved 1F1B needs micro-batches"),
        (["--gpus", "8", "--fsdp", "--distributed-optimizer", "--gbs", "8"], "FSDP and the distributed optimizer"),
        (["--gpus", "8", "--gbs", "8", "--precision", "nvfp4"], "nvfp4 is not supported by h100-sxm5-80gb"),
        (["--gpus", "8", "--gbs", "8", "--schedule", "zigzag"], "pipeline schedule 'zigzag' is unknown"),
        (["--gpus", "8", "--gbs", "8", "--ep", "2"], "needs an MoE model"),
        (["--gpus", "8", "--gbs", "8", "--moe-dispatcher", "deepep"], "unknown MoE token dispatcher 'deepep'"),
        (["--gpus", "8", "--gbs", "8", "--attention-backend", "sdpa"], "unknown attention backend 'sdpa'"),
        (
            ["--gpus", "8", "--gbs", "8", "--framework", "jaxformer"],
            "unknown framework 'jaxformer': no family matches it",
        ),
    ],
)
def test_layout_rules(extra: list[str], fragment: str) -> None:
    assert_bad(run(BASE + extra), fragment)


def test_all_problems_reported_at_once() -> None:
    lines = assert_bad(run(BASE + ["--gpus", "12", "--tp", "3", "--mbs", "5", "--gbs", "8"]))
    assert len(lines) >= 3


def test_experts_divisible_by_ep() -> None:
    result = run(["project", "--model", "mixtral-8x7b", "--gpu", "h100-sxm5-80gb", "--gpus", "48", "--ep", "3",
                  "--gbs", "48"])  # fmt: skip
    assert_bad(result, "experts 8 must be divisible by ep 3")


def test_unknown_presets() -> None:
    assert_bad(
        run(["project", "--model", "gpt-5", "--gpu", "h100-sxm5-80gb", "--gpus", "8"]), "unknown model preset 'gpt-5'"
    )
    assert_bad(
        run(["project", "--model", "llama3.1-8b", "--gpu", "h1000", "--gpus", "8"]), "unknown GPU preset 'h1000'"
    )


def test_missing_fields() -> None:
    assert_bad(run(["project", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--num-layers", "4"]), "--hidden-size")
    assert_bad(run(["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb"]), "GPU count is required")


def test_malformed_files(tmp_path: Path) -> None:
    bad_json = tmp_path / "config.json"
    bad_json.write_text("{not json")
    assert_bad(run(["project", "--model", str(bad_json), "--gpu", "h100-sxm5-80gb", "--gpus", "8"]), "not valid JSON")
    bad_type = tmp_path / "other.json"
    bad_type.write_text(json.dumps({"model_type": "t5"}))
    assert_bad(run(["project", "--model", str(bad_type), "--gpu", "h100-sxm5-80gb", "--gpus", "8"]), "not supported")
    missing = tmp_path / "llama.json"
    missing.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    assert_bad(run(["project", "--model", str(missing), "--gpu", "h100-sxm5-80gb", "--gpus", "8"]), "num_hidden_layers")
    bad_yaml = tmp_path / "sys.yaml"
    bad_yaml.write_text("gpu: [unclosed\n")
    assert_bad(
        run(["project", "--model", "llama3.1-8b", "--system-file", str(bad_yaml), "--gpus", "8"]), "not valid YAML"
    )
    unknown = tmp_path / "sys2.yaml"
    unknown.write_text("gpu: h100-sxm5-80gb\nnum_gpus: 8\nwarp_drive: true\n")
    assert_bad(
        run(["project", "--model", "llama3.1-8b", "--system-file", str(unknown)]), "unknown system field 'warp_drive'"
    )
    train = tmp_path / "train.yaml"
    train.write_text("tp: 2\nmagic: 1\n")
    assert_bad(run(BASE + ["--gpus", "8", "--config", str(train)]), "unknown training setting 'magic'")


def test_bad_csv_for_validate(tmp_path: Path) -> None:
    csv = tmp_path / "x.csv"
    csv.write_text("a,b\n1,2\n")
    assert_bad(run(["validate", "--data", str(csv)]), "missing columns")
    assert_bad(run(["validate", "--data", str(tmp_path / "nope.csv")]), "not found")
    # an unknown grouping is refused before any row is read (it grouped every row under "?" before)
    assert_bad(run(["validate", "--data", str(csv), "--by", "gpus"]), "--by must be one of source, gpu", "'gpus'")


def test_console_script_exit_code() -> None:
    """The real entry point (not only the test runner) exits with 2 and prints no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "paraplan", "project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8",
         "--tp", "3"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "attention heads 32 must be divisible by tp 3" in proc.stderr


def test_validate_names_an_unknown_source_and_a_missing_profile(public_csv: Path) -> None:
    """Both used to pass with exit 0: an empty table, or every row skipped for the missing profile."""
    assert_bad(run(["validate", "--data", str(public_csv), "--source", "vTrain"]), "no rows of source 'vTrain'")
    missing = ["validate", "--data", str(public_csv), "--source", "Korthikanti2022_Table5", "--profile", "/no.json"]
    assert_bad(run(missing), "profile not found: /no.json")


def test_calibrate_checks_its_options_before_fitting(public_csv: Path, tmp_path: Path) -> None:
    """--max-evaluations 0 ended in scipy's traceback; --workers 0 ran; a bad --out failed after the fit."""
    args = ["calibrate", "--data", str(public_csv), "--max-evaluations", "0", "--workers", "0"]
    args += ["--out", str(tmp_path / "no" / "cal.yaml")]
    lines = assert_bad(run(args), "--max-evaluations must be >= 1 (got 0)", "--workers must be >= 1 (got 0)", "--out")
    assert len(lines) == 3
