"""The `paraplan` command. Each command group lives in its own module with a `register(app)` function."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="paraplan",
    help="Project LLM training step time, memory and the best parallel configuration.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: every option name whole, the help wrapped beside or under it, at any width (rich's
    # panels cut long option names to fit 80 columns: `--account-for-embedding-in-pipe…`)
    rich_markup_mode=None,
)

# Modules under paraplan.cli that define `register(app: typer.Typer) -> None`.
COMMAND_MODULES = (
    "project",
    "catalog",
    "validate",
    "calibrate",
    "fit",
    "measure",
    "tune",
    "geo",
    "formats",
)


def _version(value: bool) -> None:
    if value:
        from paraplan import __version__

        print(f"paraplan {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version"),
) -> None:
    """Project LLM training step time, memory and the best parallel configuration."""


for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"paraplan.cli.{_name}")
    except ModuleNotFoundError as exc:  # a command module not written yet
        if exc.name != f"paraplan.cli.{_name}":
            raise
        continue
    _module.register(app)


def run() -> None:
    app()
