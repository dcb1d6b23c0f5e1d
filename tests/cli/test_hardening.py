"""Issue 34: bad files, bad values, unwritable outputs and bad CSV cells give one clear line each and exit 2."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.errors import ConfigError
from paraplan.specs.files import training_from_file
from paraplan.textfiles import MAX_YAML_DEPTH, load_json, load_yaml, read_text_file

runner = CliRunner()
PROJECT = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--gbs", "8"]
TUNE = ["tune", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--gbs", "16", "--seq", "4096",
        "--executor", "serial"]  # fmt: skip
PRIMUS_DATA = Path(__file__).parents[1] / "formats" / "data" / "primus"


def assert_bad(result, *fragments: str) -> list[str]:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert lines, result.output
    for fragment in fragments:
        assert any(fragment in ln for ln in lines), (fragment, result.output)
    return lines


# ----------------------------------------------------------------------------- 1. files
def _bad_file(tmp_path: Path, kind: str) -> Path:
    if kind == "folder":
        path = tmp_path / "a-folder"
        path.mkdir()
    elif kind == "missing":
        path = tmp_path / "missing.yaml"
    else:  # not UTF-8: a UTF-16 byte-order mark and Latin-1 bytes
        path = tmp_path / "binary.yaml"
        path.write_bytes(b"\xff\xfetp: 2\n\xe9\n")
    return path


FILE_KIND_MESSAGE = {"folder": "is a directory", "missing": "file not found", "binary": "not a UTF-8 text file"}
FILE_OPTIONS = {
    "--config": lambda p: [*PROJECT, "--config", str(p)],
    "--system-file": lambda p: [*PROJECT, "--system-file", str(p)],
    "--megatron-args": lambda p: [*PROJECT, "--megatron-args", str(p)],
    "--from-config": lambda p: [*PROJECT, "--from-config", str(p)],
    "geo --config": lambda p: ["geo", "--config", str(p)],
    "validate --data": lambda p: ["validate", "--data", str(p)],
    "--candidates": lambda p: [*TUNE, "--candidates", str(p)],
}


@pytest.mark.parametrize("kind", sorted(FILE_KIND_MESSAGE))
@pytest.mark.parametrize("option", sorted(FILE_OPTIONS))
def test_every_file_option_refuses_folders_missing_and_binary_files(tmp_path: Path, option: str, kind: str) -> None:
    if option == "--megatron-args" and kind == "missing":
        pytest.skip("--megatron-args takes the arguments themselves when no such file exists")
    path = _bad_file(tmp_path, kind)
    assert_bad(runner.invoke(app, FILE_OPTIONS[option](path)), str(path), FILE_KIND_MESSAGE[kind])


def test_primus_model_file_that_is_not_utf8(tmp_path: Path) -> None:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "modules:\n  pre_trainer:\n    framework: megatron\n    model: model.yaml\n    overrides: {}\n"
    )
    (tmp_path / "model.yaml").write_bytes(b"num_layers: \xe9\n")
    result = runner.invoke(app, [*PROJECT, "--from-config", str(experiment), "--format", "primus"])
    assert_bad(result, "model.yaml", "not a UTF-8 text file")


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "locked.yaml"
    path.write_text("tp: 2\n")

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)  # root reads any file: deny it here
    with pytest.raises(ConfigError, match="not readable"):
        read_text_file(path, "--config")


def test_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbftp: 2\n")
    assert training_from_file(path).tp == 2


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('gbs: "64"\n', "'global_batch_size' must be an integer (got '64')"),
        ("tp: {a: 1}\n", "'tensor_model_parallel_size' must be an integer"),
        ("sequence_parallel: [1]\n", "'sequence_parallel' must be true or false"),
        ("precision: 8\n", "'precision' must be text"),
        ("pipeline_layout: 4\n", "'pipeline_layout' must be a list of integers"),
        ("1: 2\n", "setting names must be text"),
        ("- tp\n- 2\n", "expected a mapping"),
        ("tp: [1\n", "not valid YAML"),
    ],
)
def test_config_file_value_types_name_the_field(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(text)
    assert_bad(runner.invoke(app, [*PROJECT, "--config", str(path)]), fragment)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("tp: 0\n", "tp must be >= 1 (got 0)"),
        ("pp: 0\n", "pp must be >= 1 (got 0)"),
        ("cp: -2\n", "cp must be >= 1 (got -2)"),
    ],
)
def test_zero_parallel_degrees_in_a_file(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(text)
    assert_bad(runner.invoke(app, [*PROJECT, "--config", str(path)]), fragment)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("gpu: h100-sxm5-80gb\nnum_gpus: eight\n", "'num_gpus' must be an integer"),
        ("gpu: h100-sxm5-80gb\nnum_gpus: 8\nnic_gbps: fast\n", "'nic_gbps' must be a number"),
        ("gpu: h100-sxm5-80gb\nnum_gpus: 8\nnic_gbps: 0\n", "nic_gbps must be > 0"),
        (
            "gpu: {name: x, bf16_tflops: big, hbm_gib: 80, hbm_tbps: 3, sm_count: 1}\nnum_gpus: 8\n"
            "gpus_per_node: 8\nscale_up_gbps: 450\nnic_gbps: 400\n",
            "'bf16_tflops' must be a number",
        ),
        ("gpu: h100-sxm5-80gb\nnum_gpus: 8\n3: x\n", "setting names must be text (got 3)"),
    ],
)
def test_system_file_value_types(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "system.yaml"
    path.write_text(text)
    args = ["project", "--model", "llama3.1-8b", "--system-file", str(path), "--gbs", "8"]
    assert_bad(runner.invoke(app, args), fragment)


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (ALIAS_BOMB, "alias bomb"),
        ("a: &a [1, *a]\n", "recursive alias"),
        ("[" * (MAX_YAML_DEPTH + 10) + "]" * (MAX_YAML_DEPTH + 10), f"nesting deeper than {MAX_YAML_DEPTH}"),
    ],
)
def test_yaml_aliases_and_nesting_are_bounded(text: str, fragment: str) -> None:
    start = time.process_time()  # CPU time: a bomb burns it; a busy machine does not add to it
    with pytest.raises(ConfigError, match=fragment):
        load_yaml(text, "bomb.yaml")
    assert time.process_time() - start < 5


def test_yaml_anchors_within_bounds_still_work() -> None:
    assert load_yaml("base: &b {x: 1}\nother: {<<: *b, y: 2}\n") == {"base": {"x": 1}, "other": {"x": 1, "y": 2}}


def test_primus_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(ALIAS_BOMB + "modules: {pre_trainer: {overrides: {}}}\n")
    start = time.process_time()  # CPU time: a bomb burns it; a busy machine does not add to it
    assert_bad(runner.invoke(app, [*PROJECT, "--from-config", str(path), "--format", "primus"]), "alias bomb")
    assert time.process_time() - start < 10


def test_deep_json_is_refused() -> None:
    with pytest.raises(ConfigError, match="nesting"):
        load_json("[" * 100_000 + "]" * 100_000, "deep.json")


# ----------------------------------------------------------------------------- 2. values
@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--num-attention-heads", "0"], "num_attention_heads must be >= 1 (got 0)"),
        (["--vocab-size", "0"], "vocab_size must be >= 1 (got 0)"),
        (["--hidden-size", "-4096"], "hidden_size must be >= 1 (got -4096)"),
        (["--num-layers", "0"], "num_layers must be >= 1 and <= 10000 (got 0)"),
        (["--num-layers", "100000000"], "num_layers must be >= 1 and <= 10000"),
        (["--nic-gbps", "0"], "nic_gbps must be > 0 (got 0.0)"),
        (["--nic-gbps", "-5"], "nic_gbps must be > 0 (got -5.0)"),
        (["--nic-gbps", "nan"], "'nic_gbps' must be a finite number"),
        (["--scale-up-gbps", "0"], "scale_up_gbps must be > 0"),
        (["--hbm-tbps", "0"], "hbm_tbps must be > 0"),
        (["--hbm-gib", "-10"], "hbm_gib must be > 0 (got -10.0)"),
        (["--gpus-per-node", "0"], "gpus_per_node must be >= 1"),
        (["--pp", "2", "--pipeline-layout", "-1,33"], "pipeline layout layer counts must be >= 0 (got -1,33)"),
        (["--pp", "100000000"], "pp*vpp = 100000000*1 = 100000000 model stages is more than the 4096 accepted"),
        (["--gbs", str(2**62)], "micro-batches x model stages"),
        (["--gbs", "10000000"], "is more than the 1048576 the simulator plays"),
    ],
)
def test_values_are_refused_with_the_rule_and_numbers(extra: list[str], fragment: str) -> None:
    start = time.process_time()  # CPU time: a bomb burns it; a busy machine does not add to it
    assert_bad(runner.invoke(app, [*PROJECT, *extra]), fragment)
    assert time.process_time() - start < 20  # refused before the work


def test_top_k_above_the_experts() -> None:
    args = ["project", "--model", "mixtral-8x7b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--gbs", "8"]
    assert_bad(runner.invoke(app, [*args, "--moe-router-topk", "100"]), "moe_router_topk 100 must be between 1 and")


def test_preset_name_too_long_for_a_file_name() -> None:
    result = runner.invoke(app, ["project", "--model", "x" * 300, "--gpu", "h100-sxm5-80gb", "--gpus", "8"])
    assert_bad(result, "unknown model preset")


def test_library_refuses_zero_heads() -> None:
    from paraplan.specs.presets import model_preset

    with pytest.raises(ConfigError, match="num_attention_heads"):
        model_preset("llama3.1-8b").with_overrides(num_attention_heads=0)


# ----------------------------------------------------------------------------- 3. outputs
@pytest.mark.parametrize("option", ["--trace", "--emit-file", "--html", "--png"])
@pytest.mark.parametrize("where", ["folder", "no-parent"])
def test_unwritable_outputs_refused_before_anything_is_printed(tmp_path: Path, option: str, where: str) -> None:
    path = tmp_path if where == "folder" else tmp_path / "missing" / "out.file"
    result = runner.invoke(app, [*PROJECT, option, str(path)])
    assert_bad(result, option)
    assert "step time" not in result.output.lower() and "{" not in result.stdout


def test_chakra_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    assert_bad(runner.invoke(app, [*PROJECT, "--chakra", str(tmp_path / "plain" / "traces")]), "is a file")


def test_unknown_emit_format_refused_before_the_json() -> None:
    result = runner.invoke(app, [*PROJECT, "--json", "--emit", "foo"])
    assert_bad(result, "unknown config format 'foo'")
    assert result.stdout.strip() == ""


def test_tune_csv_output_checked_first(tmp_path: Path) -> None:
    assert_bad(runner.invoke(app, [*TUNE, "--csv", str(tmp_path)]), "--csv", "is a folder")


# ----------------------------------------------------------------------------- 4. validate's CSV
def _measured_csv(tmp_path: Path, edit: dict[str, str], bom: bool = False) -> Path:
    """Two rows of the shipped measured data; the second one edited."""
    shared = Path("/work/shared/data/measured/public.csv")
    if not shared.is_file():
        pytest.skip("shared measured data not present")
    lines = shared.read_text(encoding="utf-8").splitlines()
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    good = [r for r in rows if r["source"] == "Korthikanti2022_Table5" and r["metric"] == "step_time_s"][:2]
    assert len(good) == 2
    good[1] = {**good[1], **edit}
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(good)
    path = tmp_path / "runs.csv"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + out.getvalue().encode("utf-8"))
    return path


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ({"tp": "abc"}, "column tp must be a number (got 'abc')"),
        ({"value": "0"}, "the measured value must be > 0"),
        ({"value": "nan"}, "column value must be a number"),
        ({"pp": "1.5"}, "column pp must be an integer"),
        ({"num_gpus": "1e400"}, "column num_gpus must be a number"),
    ],
)
def test_one_bad_cell_costs_one_row(tmp_path: Path, edit: dict[str, str], reason: str) -> None:
    result = runner.invoke(app, ["validate", "--data", str(_measured_csv(tmp_path, edit)), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert len(out["rows"]) == 1  # the good row is projected
    assert any(reason in str(skipped) for skipped in out["skipped"]), out["skipped"]


def test_byte_order_mark_and_strict_json(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "--data", str(_measured_csv(tmp_path, {}, bom=True)), "--json"])
    assert result.exit_code == 0, result.output
    assert "Infinity" not in result.stdout and "NaN" not in result.stdout
    out = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert not out["skipped"]


# ----------------------------------------------------------------------------- 5. the first hour
def test_version() -> None:
    from paraplan import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"paraplan {__version__}"


def test_global_batch_defaults_to_megatrons_and_says_so() -> None:
    result = runner.invoke(
        app, ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "gbs = mbs*dp = 1*8 = 8" in result.stderr
    assert json.loads(result.stdout)["config"]["gbs"] == 8


def test_an_explicit_global_batch_is_kept() -> None:
    assert_bad(runner.invoke(app, [*PROJECT[:-1], "1"]), "global batch 1 must be divisible by mbs*dp = 1*8 = 8")


def test_help_shows_the_training_defaults() -> None:
    result = runner.invoke(app, ["project", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for fragment in (
        "seq_length (default: 2048)",
        "micro_batch_size (default: 1)",
        "global_batch_size (default: mbs*dp",
    ):
        assert fragment in result.stdout, fragment


@pytest.mark.parametrize("limit", ["nan", "inf", "-5", "0"])
def test_tune_time_limit_must_be_a_positive_number(limit: str) -> None:
    assert_bad(runner.invoke(app, [*TUNE, "--time-limit", limit]), "--time-limit must be a number of seconds > 0")


def test_candidates_as_an_inline_json_list() -> None:
    result = runner.invoke(app, [*TUNE, "--candidates", '[{"tp": 2, "pp": 1, "mbs": 1}]', "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["evaluated"] == 1
