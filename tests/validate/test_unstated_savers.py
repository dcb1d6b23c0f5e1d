"""Rows that leave recompute unstated and are OOM without it are projected with the first memory saver that fits
(`paraplan.validate.savers`): never when the row states recompute, in the savers' order, recorded as an assumption
that validate prints; no public step-time row that ran is called OOM."""

from __future__ import annotations

import csv
from dataclasses import replace
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.projection import project_specs
from paraplan.specs.training import TrainingSpec
from paraplan.validate.measured import read_rows, run_from_row
from paraplan.validate.report import validate_rows
from paraplan.validate.savers import SAVER_KEY, SAVER_MODULES, WHY, with_memory_saver
from paraplan.validate.sources import TIME_METRICS

# A Megatron-Bridge Llama 3 70B FSDP row (pp 1: offload allowed) and a DeepSeek-V3 one (pp 2: offload is not)
OFFLOAD_ROW, MODULES_ROW = "p0056", "p1784"


def _rows(public_csv, *ids: str) -> list[dict[str, str]]:
    by_id = {row["id"]: row for row in read_rows(public_csv)}
    return [by_id[i] for i in ids]


def _memory_of(run):
    return lambda train: project_specs(run.model, run.system, train).memory


def _saver(row) -> list:
    return [a for a in row.assumed if a.key == SAVER_KEY]


def test_never_applied_when_the_row_states_recompute(public_csv) -> None:
    row = _rows(public_csv, OFFLOAD_ROW)[0]
    stated = validate_rows([{**row, "recompute": "none"}]).rows[0]
    assert dict(stated.attrs)["memory"] == "exceeds HBM" and not _saver(stated)
    unstated = validate_rows([row]).rows[0]
    assert dict(unstated.attrs)["memory"] == "fits" and _saver(unstated)


def test_offload_first_with_the_fewest_layers(public_csv) -> None:
    run = run_from_row(_rows(public_csv, OFFLOAD_ROW)[0])
    memory_of = _memory_of(run)
    assert not memory_of(run.train).fits
    saved = with_memory_saver(run, memory_of)
    assert saved is not None
    n = saved.train.cpu_offloading_num_layers
    assert n > 0 and saved.train.recompute_granularity == "none"
    assert memory_of(saved.train).fits and not memory_of(replace(saved.train, cpu_offloading_num_layers=n - 1)).fits
    (assumed,) = [a for a in saved.defaults_used if a.key == SAVER_KEY]
    assert assumed.why == WHY and f"cpu_offloading_num_layers={n}" in assumed.value


def test_recompute_modules_cumulative_where_offload_is_not_allowed(public_csv) -> None:
    run = run_from_row(_rows(public_csv, MODULES_ROW)[0])
    assert run.train.pp > 1  # Megatron refuses activation offload with pipeline parallelism
    memory_of = _memory_of(run)
    saved = with_memory_saver(run, memory_of)
    assert saved is not None and saved.train.cpu_offloading_num_layers == 0
    modules = saved.train.recompute_modules
    assert saved.train.recompute_granularity == "selective" and modules
    assert modules == tuple(m for m in SAVER_MODULES if m in modules)  # in the savers' order
    assert modules == SAVER_MODULES[: len(modules)]  # DeepSeek-V3 has experts and MLA: every module is a candidate
    fewer = replace(saved.train, recompute_modules=modules[:-1]) if len(modules) > 1 else run.train
    assert memory_of(saved.train).fits and not memory_of(fewer).fits


def _stub(fits) -> object:
    """A memory function whose verdict is `fits(train)`."""
    return lambda train: SimpleNamespace(fits=fits(train))


def test_the_order_offload_then_modules_then_full_layers(public_csv) -> None:
    run = run_from_row(_rows(public_csv, OFFLOAD_ROW)[0])  # Llama: dense, no MLA; pp 1
    offload = with_memory_saver(
        run, _stub(lambda t: t.cpu_offloading_num_layers >= 5 or t.recompute_granularity != "none")
    )
    assert offload is not None and offload.train.cpu_offloading_num_layers == 5
    modules = with_memory_saver(run, _stub(lambda t: t.recompute_granularity != "none"))
    assert modules is not None and modules.train.recompute_modules == ("core_attn",)  # moe_act: no experts
    second = with_memory_saver(
        run, _stub(lambda t: t.recompute_granularity == "full" or "mlp" in (t.recompute_modules or ()))
    )
    assert second is not None and second.train.recompute_modules == ("core_attn", "mlp")
    full = with_memory_saver(run, _stub(lambda t: t.recompute_granularity == "full" and t.recompute_num_layers >= 3))
    assert full is not None
    assert (full.train.recompute_granularity, full.train.recompute_method, full.train.recompute_num_layers) == (
        "full", "block", 3,
    )  # fmt: skip
    assert with_memory_saver(run, _stub(lambda t: False)) is None


def test_only_megatron_core_runs_without_recompute_are_candidates(public_csv) -> None:
    run = run_from_row(_rows(public_csv, OFFLOAD_ROW)[0])
    fits_any = _stub(lambda t: True)
    assert with_memory_saver(replace(run, train=replace(run.train, framework="torchtitan")), fits_any) is None
    assert with_memory_saver(replace(run, train=replace(run.train, recompute_granularity="full")), fits_any) is None
    assert with_memory_saver(replace(run, train=TrainingSpec(framework="megatron-lm")), fits_any) is not None


def test_validate_prints_the_assumption(public_csv, tmp_path) -> None:
    rows = _rows(public_csv, OFFLOAD_ROW)
    path = tmp_path / "rows.csv"
    header = list(rows[0])
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerows(rows)
    result = CliRunner().invoke(app, ["validate", "--data", str(path)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"Memory saver assumed, {OFFLOAD_ROW}" in text and WHY in text and "cpu_offloading_num_layers=" in text


def test_no_public_step_time_row_is_oom(public_report) -> None:
    rows = [*public_report.rows, *(row for row, _ in public_report.flagged)]
    assert rows and all(row.metric in TIME_METRICS for row in rows)
    oom = [row.id for row in rows if dict(row.attrs)["memory"] != "fits"]
    assert not oom, f"projected OOM although they ran: {oom}"


@pytest.mark.parametrize("row_id", [OFFLOAD_ROW, MODULES_ROW])
def test_public_rows_record_the_saver(public_report, row_id: str) -> None:
    (row,) = [r for r in public_report.rows if r.id == row_id]
    assert _saver(row)
