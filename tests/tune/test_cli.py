import csv
import json
import sys

from typer.testing import CliRunner

from paraplan.cli.main import app

runner = CliRunner()
BASE = ["tune", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--gbs", "16", "--seq", "4096",
        "--max-pp", "4", "--max-cp", "2", "--max-mbs", "4", "--executor", "serial"]  # fmt: skip


def test_json_output_has_the_documented_keys(tmp_path) -> None:
    out_csv = tmp_path / "all.csv"
    result = runner.invoke(app, [*BASE, "--json", "--top", "3", "--csv", str(out_csv), "--explain"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) >= {"top", "evaluated", "elapsed_s"}
    assert len(out["top"]) == 3 and out["evaluated"] > 100 and out["elapsed_s"] > 0
    first = out["top"][0]
    for key in ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "mbs", "recompute", "sharding", "sp", "schedule",
                "precision", "overlap_grad_reduce", "step_time_s", "tokens_per_sec_per_gpu", "mfu", "command",
                "megatron_args"):  # fmt: skip
        assert key in first
    assert set(first["memory"]) == {"peak_gib", "fits"} and first["memory"]["fits"]
    assert first["command"].startswith("paraplan project --model llama3.1-8b")
    assert "--tensor-model-parallel-size" in first["megatron_args"]
    assert out["explain"]["parts"] and out["explain"]["summary"]
    with out_csv.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == out["evaluated"]
    assert {"tp", "pp", "step_time_s", "peak_gib", "fits"} <= set(rows[0])


def test_command_of_the_winner_reproduces_it() -> None:
    out = json.loads(runner.invoke(app, [*BASE, "--json", "--top", "1"]).stdout)
    best = out["top"][0]
    args = best["command"].split()[1:]
    projected = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert abs(projected["step_time_s"] - best["step_time_s"]) <= 1e-9 * best["step_time_s"]
    assert abs(projected["memory"]["peak_gib"] - best["memory"]["peak_gib"]) < 1e-3


def test_rich_table_and_explanation() -> None:
    result = runner.invoke(app, [*BASE, "--top", "2", "--explain"])
    assert result.exit_code == 0, result.output
    for text in ("tokens/s/GPU", "MFU", "memory GiB", "paraplan project", "megatron:", "runner-up"):
        assert text in result.output


def test_bad_input_is_one_line_per_problem_and_exit_2() -> None:
    result = runner.invoke(app, ["tune", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8"])
    assert result.exit_code == 2
    assert "--gbs" in result.output and "--seq" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, [*BASE, "--fix", "tp=abc", "--fix", "colour=red", "--max-tp", "0"])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 3, result.output
    result = runner.invoke(app, [*BASE, "--method", "annealing", "--top", "0"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    result = runner.invoke(app, [*BASE, "--gpus", "eight"])
    assert result.exit_code == 2
    # an unknown framework or attention backend made every candidate illegal: "no configuration fits", exit 0
    result = runner.invoke(app, [*BASE, "--framework", "megatron", "--attention-backend", "sdpa"])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 2, result.output
    assert "unknown framework 'megatron'" in result.output and "unknown attention backend 'sdpa'" in result.output


def test_ray_missing_is_a_clear_message(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    result = runner.invoke(app, [*BASE, "--executor", "ray", "--address", "auto"])
    assert result.exit_code == 2
    assert "needs Ray" in result.output and "'distributed' extra" in result.output


def test_candidates_file(tmp_path) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps([{"tp": 2, "pp": 1, "mbs": 1}, {"tp": 1, "pp": 2, "mbs": 2, "sharding": "fsdp"}]))
    out = json.loads(runner.invoke(app, [*BASE, "--candidates", str(path), "--json"]).stdout)
    assert out["evaluated"] == 2
    assert {(c["tp"], c["pp"]) for c in out["top"]} <= {(2, 1), (1, 2)}
    bad = tmp_path / "bad.csv"
    bad.write_text("tp,pp\nx,1\n")
    result = runner.invoke(app, [*BASE, "--candidates", str(bad)])
    assert result.exit_code == 2 and "row 1" in result.output
