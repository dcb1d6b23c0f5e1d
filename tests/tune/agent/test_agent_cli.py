"""`paraplan tune --agent` and `--agent-start`: the readable log, the JSON, the option errors (exit 2, one line each)."""

import json
from pathlib import Path

from typer.testing import CliRunner

from paraplan.cli.main import app

runner = CliRunner()
SEARCH = ["tune", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--gbs", "16", "--seq", "4096",
          "--max-pp", "2", "--max-cp", "1", "--max-mbs", "2", "--executor", "serial"]  # fmt: skip


def test_agent_start_prints_a_readable_log(mixtral_recipe: Path) -> None:
    result = runner.invoke(app, ["tune", "--gpu", "h100-sxm5-80gb", "--agent-start", str(mixtral_recipe),
                                 "--agent-budget", "12"])  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.output
    for text in ("#0   [recipe mixtral_8x7b_nemo2.yaml] KEPT", "[recompute_less] KEPT", "why:", "change:",
                 "check: validator passed; memory fits", "DROPPED", "agent (rules):", "best vs start:"):  # fmt: skip
        assert text in out, text
    assert "Traceback" not in out


def test_agent_start_json(mixtral_recipe: Path, tmp_path: Path) -> None:
    study = tmp_path / "s.db"
    args = ["tune", "--gpu", "h100-sxm5-80gb", "--agent-start", str(mixtral_recipe), "--agent-budget", "6",
            "--study", str(study), "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    agent = json.loads(result.stdout)["agent"]
    assert agent["gain_pct"] > 0 and agent["proposals"] == 6 and agent["path"]
    assert {"index", "hypothesis", "changes", "validator", "memory", "step_time_s", "status", "reason"} <= set(
        agent["steps"][1]
    )
    again = json.loads(runner.invoke(app, [*args[:-4], "12", "--study", str(study), "--json"]).stdout)["agent"]
    assert again["resumed"] == len(agent["steps"]) and again["proposals"] == 12


def test_search_then_agent_json() -> None:
    result = runner.invoke(app, [*SEARCH, "--agent", "--agent-budget", "4", "--json", "--top", "2"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["top"] and out["agent"]["start"]["source"].startswith("search best")
    assert out["agent"]["start"]["step_time_s"] == out["top"][0]["step_time_s"]


def test_agent_option_errors_exit_2(mixtral_recipe: Path) -> None:
    base = ["tune", "--gpu", "h100-sxm5-80gb", "--agent-start", str(mixtral_recipe)]
    for extra, words in (
        (["--agent-proposer", "oracle"], "unknown agent proposer"),
        (["--agent-proposer", "replay"], "--agent-transcript"),
        (["--agent-budget", "0"], "--agent-budget must be >= 1"),
        (["--agent-proposer", "llm"], "needs an endpoint"),
        (["--agent-proposer", "replay", "--agent-transcript", "/nonexistent.jsonl"], "nonexistent"),
    ):
        result = runner.invoke(app, [*base, *extra], env={"PARAPLAN_LLM_URL": "", "PARAPLAN_LLM_MODEL": ""})
        assert result.exit_code == 2, (extra, result.output)
        assert words in result.output and "Traceback" not in result.output, (extra, result.output)
    result = runner.invoke(app, [*SEARCH, "--agent", "--candidates", '[{"tp": 1}]'])
    assert result.exit_code == 2 and "--candidates" in result.output
    result = runner.invoke(
        app, ["tune", "--gpu", "h100-sxm5-80gb", "--agent-start", str(mixtral_recipe), "--gpus", "6"]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_file_options_refuse_folders_missing_and_binary_files(mixtral_recipe: Path, tmp_path: Path) -> None:
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe{\xe9\n")
    base = ["tune", "--gpu", "h100-sxm5-80gb"]
    for path, words in ((tmp_path, "is a directory"), (tmp_path / "missing", "file not found"),
                        (binary, "not a UTF-8 text file")):  # fmt: skip
        for args in (
            [*base, "--agent-start", str(path), "--gpus", "64"],
            [
                *base,
                "--agent-start",
                str(mixtral_recipe),
                "--agent-proposer",
                "replay",
                "--agent-transcript",
                str(path),
            ],
        ):
            result = runner.invoke(app, args)
            assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output, (
                args,
                result.output,
            )


def test_agent_after_a_search_over_several_gpu_counts_keeps_the_winning_count() -> None:
    args = [*SEARCH[:6], "8,16", *SEARCH[7:], "--agent", "--agent-budget", "3", "--json", "--top", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    best = out["top"][0]
    start = out["agent"]["steps"][0]
    assert start["step_time_s"] == best["step_time_s"]
    assert (
        start["spec"]["data_parallel_size"]
        * start["spec"]["tensor_model_parallel_size"]
        * start["spec"]["pipeline_model_parallel_size"]
        * start["spec"]["context_parallel_size"]
        == best["num_gpus"]
    )
