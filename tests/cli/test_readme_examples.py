"""Issue 34, "the first hour": the README's commands run as written, each projected layout fits in memory or the
README says beside it that it does not, the README starts with the two setup commands (with the virtual environment
activated), and its test command is CI's and prints the skipped tests' names."""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("PARAPLAN_SHARED", REPO.parent / "shared"))  # as tests/conftest.py finds it
README = (REPO / "README.md").read_text()
runner = CliRunner()
CHEAP = ("project", "memory", "convert", "models", "gpus")  # milliseconds to a second each
SLOW = ("tune", "validate", "geo")  # seconds to tens of seconds: with `-m slow`


@dataclass(frozen=True)
class Example:
    line: int  # the README line the command starts on
    env: dict[str, str]
    args: list[str]  # after `paraplan`
    comment: str  # the comment lines right above the command and its own trailing comment

    @property
    def command(self) -> str:
        return self.args[0]

    def __str__(self) -> str:
        return f"README line {self.line}: paraplan {' '.join(self.args)[:80]}"


def code_blocks(language: str) -> list[tuple[int, str]]:
    """(first line number, text) of each fenced block of `language`."""
    return [
        (README[: m.start()].count("\n") + 2, m.group(1))
        for m in re.finditer(rf"^```{language}\n(.*?)^```", README, re.S | re.M)
    ]


def examples() -> list[Example]:
    """Every `paraplan ...` command of the README's bash blocks, continuation lines joined, with its comments."""
    found = []
    for first, block in code_blocks("bash"):
        lines = block.splitlines()
        comments: list[str] = []
        i = 0
        while i < len(lines):
            start, text = i, lines[i]
            while text.endswith("\\") and i + 1 < len(lines):  # a continued line (also inside quotes)
                i += 1
                text = text[:-1] + " " + lines[i].strip()
            i += 1
            stripped = text.strip()
            if stripped.startswith("#") or not stripped:
                comments = comments + [stripped] if stripped else []
                continue
            words = shlex.split(stripped.split("&&")[-1], comments=True)  # the setup line: its last command
            trailing = stripped.split("  #", 1)[1] if "  #" in stripped else ""
            env = {}
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                key, value = words.pop(0).split("=", 1)
                env[key] = value
            if words and words[0] == "paraplan":
                found.append(Example(first + start, env, words[1:], " ".join([*comments, trailing])))
            comments = []
    return found


def localise(example: Example, tmp_path: Path) -> list[str]:
    """The command's arguments with the README's relative inputs made absolute (it runs in `tmp_path`, where its
    outputs land) and `my-cluster.yaml` written from the README's YAML block."""
    shared = SHARED
    cluster = tmp_path / "my-cluster.yaml"
    cluster.write_text(next(text for _, text in code_blocks("yaml") if "num_gpus" in text))
    out = []
    for arg in example.args:
        arg = arg.replace("$D", "tests/formats/data")
        if arg.startswith("tests/") or arg.startswith("examples/"):
            arg = str(REPO / arg)
        elif arg.startswith("../shared/"):
            arg = str(shared / arg.removeprefix("../shared/"))
        elif arg == "my-cluster.yaml":
            arg = str(cluster)
        out.append(arg)
    return out


def run(example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    args = localise(example, tmp_path)
    if any(a.startswith(str(SHARED)) and not Path(a).exists() for a in args):
        pytest.skip(f"measured data not found for {example}")
    if {"--html", "--png"} & set(args):
        pytest.importorskip("plotly", reason="the report extra is not installed")
        pytest.importorskip("matplotlib", reason="the report extra is not installed")
    monkeypatch.chdir(tmp_path)
    return runner.invoke(app, args, env={**example.env, "COLUMNS": "200"})


def check(example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(example, tmp_path, monkeypatch)
    assert result.exit_code == 0, f"{example}\n{result.output}"
    if example.command in ("project", "memory") and "--hybrid" not in example.args:
        with_json = Example(example.line, example.env, [*example.args, "--json"] if "--json" not in example.args
                            else example.args, example.comment)  # fmt: skip
        memory = json.loads(run(with_json, tmp_path, monkeypatch).stdout)["memory"]
        says_no = "does not fit" in example.comment
        assert memory["fits"] != says_no, (
            f"{example}: projected {memory['peak_gib']:.1f} GiB of {memory['capacity_gib']:g} "
            f"({'fits' if memory['fits'] else 'does not fit'}), but the README "
            f"{'says it does not fit' if says_no else 'does not say so beside it'}"
        )


CHEAP_EXAMPLES = [e for e in examples() if e.command in CHEAP]
SLOW_EXAMPLES = [e for e in examples() if e.command in SLOW]


def test_every_readme_command_is_checked() -> None:
    assert len(CHEAP_EXAMPLES) >= 15 and SLOW_EXAMPLES
    assert {e.command for e in examples()} <= set(CHEAP + SLOW), "a new command: list it as cheap or slow"


@pytest.mark.parametrize("example", CHEAP_EXAMPLES, ids=lambda e: f"line{e.line}")
def test_readme_example_runs_and_its_memory_verdict_is_stated(
    example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check(example, tmp_path, monkeypatch)


@pytest.mark.slow  # tune, validate and geo: 5-30 s each
@pytest.mark.parametrize("example", SLOW_EXAMPLES, ids=lambda e: f"line{e.line}")
def test_slow_readme_example_runs(example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check(example, tmp_path, monkeypatch)


def test_the_check_catches_an_unstated_out_of_memory_layout(tmp_path: Path, monkeypatch) -> None:
    oom = Example(0, {}, shlex.split("memory --model llama3.1-70b --gpu h100-sxm5-80gb --gpus 8 --tp 8 --gbs 8"), "")
    with pytest.raises(AssertionError, match="does not say so beside it"):
        check(oom, tmp_path, monkeypatch)


def test_the_readme_starts_with_the_two_setup_commands() -> None:
    first_line, block = code_blocks("bash")[0]
    assert README[: README.index("```bash")].count("\n") < 8, "the setup commands come first"
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2
    install, tests = commands
    for command in commands:
        assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -q ")
    assert " && paraplan project --model " in install
    assert tests.endswith(" && python -m pytest -q")


def test_ci_runs_the_readme_test_command_in_the_activated_environment() -> None:
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    test_command = code_blocks("bash")[0][1].splitlines()[-1].split(" && ")[-1]
    assert ". .venv/bin/activate" in ci
    assert test_command in ci and f"{test_command} -m slow" in ci


def test_the_test_command_lists_skipped_tests_and_prints_its_summary() -> None:
    addopts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    options = shlex.split(addopts)
    assert "-rs" in options  # the summary names each skipped test and its reason
    test_command = code_blocks("bash")[0][1].splitlines()[-1].split(" && ")[-1]
    quiet = shlex.split(test_command).count("-q") + options.count("-q") + 2 * options.count("-qq")
    assert quiet <= 1, "-q twice drops the per-file lines and, with them, what -rs reports"
