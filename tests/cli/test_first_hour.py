"""Issue 34, "the first hour": every command's --help states its defaults, and the names a user must copy (presets,
options, datacenters, sources) come out whole at 80 columns and in a pipe."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
import yaml
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.cli.spec_options import TRAINING_OPTIONS
from paraplan.specs.presets import gpu_names, model_names
from paraplan.specs.training import TrainingSpec

runner = CliRunner()
NARROW = {"COLUMNS": "80"}  # CliRunner's stdout is a pipe: rich and click take the width from COLUMNS
TINY_GEO = Path(__file__).parents[1] / "geo" / "tiny.yaml"

# Options whose default is None on the command line but stand for a stated default (a limit, a preset's value, the
# whole data set, printing instead of writing): their help must say which.
STATED_DEFAULTS = {
    "tune": ("--max-tp", "--max-pp", "--max-vpp", "--max-cp", "--max-ep", "--max-mbs", "--precision", "--budget",
             "--time-limit", "--workers", "--gpus-per-node", "--nic-gbps", "--profile"),
    "project": ("--etp", "--dp", "--gbs", "--gpus-per-node", "--nic-gbps", "--hbm-gib", "--num-layers", "--profile",
                "--framework-version", "--format", "--device"),
    "calibrate": ("--out", "--forward-from"),
    "fit": ("--gpu", "--source"),
    "measure": ("--dtype", "--threads"),
    "validate": ("--source", "--profile", "--by", "--framework-version"),
}  # fmt: skip


# typer's click objects (typer >= 0.20 carries its own copy of click): read by their attributes
def commands() -> dict[str, Any]:
    return dict(typer.main.get_command(app).commands)


def options(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option" and p.name != "help"]


def help_record(command: Any, name: str, option: Any) -> str:
    """The help of one option as `--help` prints it (click's own record: text and `[default: ...]`)."""
    record = option.get_help_record(command.context_class(command, info_name=name))
    assert record is not None, option.opts
    return record[1]


def squeeze(text: str) -> str:
    return re.sub(r"-\s+", "-", " ".join(text.split()))  # click wraps prose at hyphens too


def is_off_switch(option: Any) -> bool:
    """A flag that is off unless given (`--json`): its absence is the default, nothing to state."""
    return option.is_flag and not option.secondary_opts and option.default is False


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_default_is_shown_in_help(name: str) -> None:
    command = commands()[name]
    shown = squeeze(runner.invoke(app, [name, "--help"], env=NARROW).stdout)
    training = TrainingSpec()
    missing = []
    for option in options(command):
        record = help_record(command, name, option)
        assert squeeze(record) in shown, (option.opts, record)  # what the record says is what --help prints
        has_default = option.default is not None and not is_off_switch(option)
        spec_field = TRAINING_OPTIONS.get(option.name or "")
        stands_for_one = spec_field is not None and getattr(training, spec_field) is not None
        stated = option.opts[0] in STATED_DEFAULTS.get(name, ())
        if (has_default or stands_for_one or stated) and "default" not in record:
            missing.append(option.opts[0])
    assert not missing, f"{name} --help states no default for {missing}"


def test_the_check_catches_a_missing_default() -> None:
    """The rule above fails on an option whose default --help leaves out."""
    bare = typer.Typer()

    @bare.command()
    def x(n: int = typer.Option(3, "--n", show_default=False, help="count")) -> None:
        """A command whose help hides its default."""

    command = typer.main.get_command(bare)
    assert "default" not in help_record(command, "x", options(command)[0])


def test_stated_defaults_match_the_code() -> None:
    from paraplan.tune.space import MAX_MBS
    from paraplan.validate.calibrate import FORWARD_FROM

    calibrate = squeeze(runner.invoke(app, ["calibrate", "--help"], env=NARROW).stdout)
    assert f"(default: {FORWARD_FROM:%Y-%m})" in calibrate
    tune = squeeze(runner.invoke(app, ["tune", "--help"], env=NARROW).stdout)
    assert f"largest micro-batch (default: {MAX_MBS})" in tune
    assert f"(default: {TrainingSpec().framework})" in tune


def tokens(text: str, name: str) -> int:
    """How often `name` stands whole in `text` (not inside a longer name, not cut by a line break)."""
    return len(re.findall(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)", text))


@pytest.mark.parametrize(("command", "names"), [("models", model_names), ("gpus", gpu_names)])
def test_preset_tables_keep_every_name_whole(command: str, names) -> None:
    result = runner.invoke(app, [command], env=NARROW)
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for name in names():
        assert tokens(result.stdout, name) >= 2, name  # in the table and in the sources below it
    table = result.stdout.split("sources:")[0]
    assert max(len(line) for line in table.splitlines()) <= 80


@pytest.mark.parametrize("name", sorted(commands()))
def test_help_keeps_every_option_name_whole(name: str) -> None:
    result = runner.invoke(app, [name, "--help"], env=NARROW)
    assert result.exit_code == 0
    assert "…" not in result.stdout
    for option in options(commands()[name]):
        for opt in (*option.opts, *option.secondary_opts):
            assert tokens(result.stdout, opt) >= 1, (name, opt)


def test_geo_tables_keep_datacenter_names_whole(tmp_path: Path) -> None:
    config = yaml.safe_load(TINY_GEO.read_text())
    long_names = {"a": "us-east-virginia-north-2", "b": "eu-west-frankfurt-main-1"}
    for dc in config["datacenters"]:
        dc["name"] = long_names[dc["name"]]
    for link in config["wan"]:
        link["between"] = [long_names[n] for n in link["between"]]
    path = tmp_path / "geo.yaml"
    path.write_text(yaml.safe_dump(config))
    result = runner.invoke(app, ["geo", "--config", str(path)], env=NARROW)
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for name in long_names.values():
        assert tokens(result.stdout, name) >= 4, name  # the heading, placements, selection, layouts
    for label in ("DP across", "tokens/s", "vs DP", "TCP flows per link", "BubbleTea"):
        assert label in result.stdout, label


def test_a_table_wider_than_the_console_is_printed_whole_not_cut() -> None:
    result = runner.invoke(app, ["models"], env={"COLUMNS": "40"})
    assert result.exit_code == 0
    assert "…" not in result.stdout
    for name in model_names():
        assert tokens(result.stdout, name) >= 2, name
