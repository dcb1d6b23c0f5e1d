"""Validation against the measured runs: coverage, JSON shape and the first accuracy milestone."""

import csv
import json

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.errors import ConfigError
from paraplan.validate.measured import read_rows, run_from_row
from paraplan.validate.memory import LAST_RANK, MAX_OVER_GPUS
from paraplan.validate.report import validate_rows
from paraplan.validate.sources import REPORT_ONLY_SOURCES

runner = CliRunner()


def test_every_complete_row_is_projected_or_listed(public_csv, public_report) -> None:
    rows = read_rows(public_csv)
    report = public_report
    assert len(report.rows) + len(report.memory_rows) + len(report.skipped) + len(report.flagged) == len(rows)
    complete = [r["id"] for r in rows if r["complete"] == "1"]
    projected = {r.id for r in report.rows} | {r.id for r in report.memory_rows} | {r.id for r, _ in report.flagged}
    skipped = dict(report.skipped)
    for row_id in complete:
        assert row_id in projected or skipped[row_id]


def test_json_shape(public_csv) -> None:
    result = runner.invoke(app, ["validate", "--data", str(public_csv), "--source", "Korthikanti2022_Table5", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) >= {"rows", "skipped", "per_source", "mape_pct", "kendall_tau"}
    row = out["rows"][0]
    assert set(row) >= {"id", "source", "metric", "measured", "predicted", "error_pct", "assumed"}
    # Korthikanti leaves it out: the default of Megatron-LM in its era (2022), with the era named
    assert "attention_backend=unfused (Megatron-LM 2022-23)" in row["assumed"]
    assert row["error_pct"] == 100 * (row["predicted"] - row["measured"]) / row["measured"]
    assert list(out["per_source"]) == ["Korthikanti2022_Table5"]


def test_source_balanced_mape_first_milestone(public_report) -> None:
    """The milestone is on the step time of the sources the calibration fits. The report-only source (Megatron-
    Bridge 26.02, held out forward in time) and the measured memory are printed, not asserted: issue 33 is where
    the memory model is fixed."""
    report = public_report
    fitted = report.fitted_per_source()
    assert fitted and not set(fitted) & set(REPORT_ONLY_SOURCES)
    print("step time, fitted sources:", {k: round(v["mape_pct"], 1) for k, v in fitted.items()})
    print(f"step time, source-balanced over the fitted sources: {report.fitted_mape_pct:.2f}%")
    for source, stats in report.report_only_per_source().items():
        print(f"step time, {source} (not fitted: forward in time): {stats['mape_pct']:.2f}% over {stats['n']} rows")
    for source, stats in report.memory_per_source().items():
        print(f"memory, {source}: MAPE {stats['mape_pct']:.1f}%, mean error {stats['mean_error_pct']:+.1f}%")
    assert report.fitted_mape_pct <= 15.0


def test_memory_rows_are_scored_apart_from_step_time(public_csv) -> None:
    rows = read_rows(public_csv)
    memory = [r for r in rows if r["metric"] == "memory_gib"]
    assert memory
    report = validate_rows(memory)
    assert not report.rows and report.memory_rows  # never in the step-time MAPE, tau or ranking
    assert {r.source for r in report.memory_rows} == {"torchtitan_benchmarks_202412", "megatron_lm_functional_golden"}
    assert (
        len(report.memory_rows) + len(report.memory_skipped)
        == len(memory)
        == len(report.memory_rows) + len(report.skipped)
    )
    for row in report.memory_rows:
        if row.source == "megatron_lm_functional_golden":  # the last rank: the last pipeline stage
            assert row.reading.gpu == LAST_RANK and row.reading.quantity == "allocated"
            assert row.compared_rank == row.pipeline_ranks - 1
        else:  # torchtitan: the max over all GPUs of the peak reserved memory
            assert row.reading.gpu == MAX_OVER_GPUS and row.reading.quantity == "reserved"
    skipped = dict(report.memory_skipped)
    assert set(skipped) == {"p1823", "p1826"}  # complete=0; p1827 projects with the expert TP its grid admits


def test_a_last_rank_figure_is_compared_with_the_last_pipeline_stage() -> None:
    from paraplan.memory.model import GIB, MemoryResult, RankMemory
    from paraplan.validate.memory import memory_row, reading_of

    memory = MemoryResult((RankMemory(0, {"weights": 30 * GIB}), RankMemory(1, {"weights": 20 * GIB})), 80 * GIB)
    last = memory_row("x", "S", 25.0, "peak allocated of the LAST rank (last PP stage)", memory, ())
    assert (last.predicted_gib, last.compared_rank, last.error_pct) == (20.0, 1, -20.0)
    most = memory_row("y", "S", 25.0, "peak reserved, max over all GPUs", memory, ())
    assert (most.predicted_gib, most.compared_rank) == (30.0, 0) and most.reading.quantity == "reserved"
    unstated = reading_of("no word on which GPU")
    assert unstated.gpu == MAX_OVER_GPUS and not unstated.stated and unstated.quantity == "unstated"


def test_json_has_the_memory_section_and_the_fitted_sources_figure(public_csv) -> None:
    result = runner.invoke(
        app, ["validate", "--data", str(public_csv), "--source", "megatron_lm_functional_golden", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["rows"] == [] and out["per_source"] == {}  # memory rows stay out of the step-time score
    memory = out["memory"]
    assert set(memory["per_source"]) == {"megatron_lm_functional_golden"}
    assert memory["rows"] and {"measured", "predicted", "error_pct", "compared_with"} <= set(memory["rows"][0])
    assert {s["id"] for s in memory["skipped"]} == {"p1823", "p1826"}  # complete=0 rows, with their reason
    assert {"fitted_sources_mape_pct", "report_only"} <= set(out)


def test_error_is_signed_and_scored_per_source(tmp_path) -> None:
    header = ["id", "source", "model", "arch", "num_layers", "hidden", "ffn_hidden", "num_heads", "num_kv_heads", "vocab",
              "seq_len", "gpu_preset", "num_gpus", "gpus_per_node", "tp", "pp", "vpp", "cp", "dp", "sp", "mbs", "gbs",
              "precision", "recompute", "zero", "framework", "metric", "value", "complete"]  # fmt: skip
    base = dict(arch="gpt", num_layers="12", hidden="1024", ffn_hidden="4096", num_heads="16", num_kv_heads="16",
                vocab="51200", seq_len="1024", gpu_preset="a100-sxm4-80gb", num_gpus="8", gpus_per_node="8", tp="1",
                pp="1", vpp="1", cp="1", dp="8", sp="0", mbs="4", gbs="64", precision="fp16", recompute="none",
                zero="0", framework="megatron-lm", metric="step_time_s", complete="1", model="m")  # fmt: skip
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, header)
        w.writeheader()
        w.writerow({**base, "id": "a", "source": "S1", "value": "1.0"})
        w.writerow({**base, "id": "b", "source": "S2", "value": "2.0"})
        w.writerow({**base, "id": "c", "source": "S2", "value": "2.0", "complete": "0"})
    report = validate_rows(read_rows(path))
    predicted = report.rows[0].predicted
    assert report.rows[0].error_pct == 100 * (predicted - 1.0)
    s1 = abs(100 * (predicted - 1.0))
    s2 = abs(100 * (predicted - 2.0) / 2.0)
    assert abs(report.mape_pct - (s1 + s2) / 2) < 1e-9
    assert report.skipped and report.skipped[0][0] == "c"


@pytest.mark.slow  # projects every public row (~15 s)
def test_error_by_scale_orders_the_brackets_by_size(public_report) -> None:
    by_scale = public_report.mape_by("scale")
    assert list(by_scale)[0] == "1 node"
    uppers = [int(label.split("-")[1].split()[0]) for label in list(by_scale)[1:]]
    assert uppers == sorted(uppers) and all(u & (u - 1) == 0 for u in uppers)  # powers of four, smallest first
    assert sum(v["n"] for v in by_scale.values()) == len(public_report.rows)


def test_deepspeed_zero3_rows_reduce_fp16_gradients_in_fp16(public_csv) -> None:
    from paraplan.validate.measured import run_from_row

    zero3 = [run_from_row(r) for r in read_rows(public_csv) if r["source"] == "Narayanan2021_SC21_Table2"]
    zero3 = [run for run in zero3 if run.train.zero_stage == 3]
    assert zero3
    for run in zero3:
        assert run.train.framework == "deepspeed" and run.train.precision == "fp16"
        assert not run.train.grad_reduce_in_fp32 and ("grad_reduce_in_fp32", "False") in {
            (d.key, d.value) for d in run.defaults_used
        }


def test_fastest_gap_and_tau_at_one_global_batch() -> None:
    from paraplan.validate.report import RowResult, ValidationReport

    def row(name: str, batch: int, measured: float, predicted: float) -> RowResult:
        group = ("gpt", "a100", 8)
        return RowResult(name, "vTrain_x", "step_time_s", measured, predicted, group, measured, predicted, (), batch)

    # batch 4 is always faster than batch 8; inside batch 8 the projection picks the slower layout
    rows = [row("a", 4, 1.0, 1.0), row("b", 4, 1.5, 1.5), row("c", 8, 2.0, 2.2), row("d", 8, 2.5, 2.1)]
    report = ValidationReport(rows, [])
    assert report.fastest_gap_pct("vTrain") == {"gpt/a100/8": 0.0}
    # per sample: a (0.25), b (0.375), c (0.25), d (0.3125); the projection picks a (0.25) or d (0.2625): a
    assert report.fastest_gap_pct("vTrain", per_sample=True) == {"gpt/a100/8": 0.0}
    swapped = ValidationReport([row("a", 4, 1.0, 1.1), row("c", 8, 2.0, 2.4), row("d", 8, 2.5, 2.1)], [])
    assert swapped.fastest_gap_pct("vTrain", per_sample=True) == {"gpt/a100/8": pytest.approx(25.0)}
    assert swapped.fastest_gap_pct("vTrain") == {"gpt/a100/8": 0.0}
    by_batch = report.fastest_gap_pct("vTrain", fixed_batch=True)
    assert by_batch == {"gpt/a100/8/4": 0.0, "gpt/a100/8/8": pytest.approx(25.0)}
    assert report.kendall_tau(fixed_batch=True) == pytest.approx(0.0)  # one pair right, one wrong
    assert report.kendall_tau() > 0.0


def test_deepseek_v3_rows_read_mtp_and_the_bridge_pipeline_layout(public_csv) -> None:
    from paraplan.validate.measured import DEEPSEEK_V3_LAYOUTS, run_from_row

    runs = [run_from_row(r) for r in read_rows(public_csv) if r["model_preset"] == "deepseek-v3"]
    assert runs
    for run in runs:
        # the published name says whether the run trained the multi-token-prediction module
        assert run.model.mtp_num_layers == (0 if "w/o MTP" in run.group[0] else 1)
        chunks = run.train.pp * run.train.vpp
        if chunks in DEEPSEEK_V3_LAYOUTS:  # Megatron-Bridge's recipe layout: fewer decoders beside the loss
            assert run.train.pipeline_layout == DEEPSEEK_V3_LAYOUTS[chunks]
            assert run.train.pipeline_layout[-1] < run.train.pipeline_layout[0]
    assert any(run.train.pipeline_layout == (4,) * 15 + (1,) for run in runs)
    assert all(sum(layout) == 61 for layout in DEEPSEEK_V3_LAYOUTS.values())


def test_the_deepseek_v3_layouts_apply_to_that_model_only() -> None:
    from paraplan.specs.presets import model_preset
    from paraplan.validate.measured import _pipeline_split

    dsv3 = model_preset("deepseek-v3")
    assert _pipeline_split(dsv3, 4, 4, "deepseek-v3") == {"pipeline_layout": (4,) * 15 + (1,)}
    assert _pipeline_split(dsv3, 4, 4)["pipeline_layout"] != (4,) * 15 + (1,)  # any other model: spread evenly
    assert "pipeline_layout" in _pipeline_split(dsv3, 8, 4, "deepseek-v3")  # 32 chunks: no recipe layout, spread


def test_error_by_memory_tells_the_rows_that_cannot_fit_as_stated(tmp_path) -> None:
    header = ["id", "source", "model", "arch", "num_layers", "hidden", "ffn_hidden", "num_heads", "num_kv_heads", "vocab",
              "seq_len", "gpu_preset", "num_gpus", "gpus_per_node", "tp", "pp", "dp", "mbs", "gbs", "precision",
              "recompute", "zero", "framework", "metric", "value", "complete"]  # fmt: skip
    base = dict(source="S", arch="gpt", num_layers="12", hidden="1024", ffn_hidden="4096", num_heads="16",
                num_kv_heads="16", vocab="51200", seq_len="1024", gpu_preset="a100-sxm4-80gb", num_gpus="1",
                gpus_per_node="8", tp="1", pp="1", dp="1", mbs="1", gbs="8", precision="bf16", recompute="none",
                zero="0", framework="megatron-lm", metric="step_time_s", value="1.0", complete="1", model="m")  # fmt: skip
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, header)
        w.writeheader()
        w.writerow({**base, "id": "small"})
        w.writerow({**base, "id": "big", "num_layers": "48", "hidden": "8192", "ffn_hidden": "32768", "num_heads": "64",
                    "num_kv_heads": "64"})  # fmt: skip  # 39B parameters and their Adam states on one 80 GB GPU
    by_memory = validate_rows(read_rows(path)).mape_by("memory")
    assert {k: v["n"] for k, v in by_memory.items()} == {"exceeds HBM": 1, "fits": 1}
    by_use = validate_rows(read_rows(path)).mape_by("memory_use")
    assert {k: v["n"] for k, v in by_use.items()} == {"0-70% of HBM": 1, "over 100% of HBM": 1}


def test_nemo_and_bridge_rows_reduce_gradients_in_bf16_as_their_performance_scripts(public_csv) -> None:
    from paraplan.validate.measured import run_from_row

    rows = read_rows(public_csv)
    runs = [run_from_row(r) for r in rows if r["framework"] == "nemo-megatron" and r["complete"] == "1"]
    assert runs
    for run in runs:
        assert not run.train.grad_reduce_in_fp32 and run.train.grad_reduce_bytes == 2
        assert ("grad_reduce_in_fp32", "False") in {(d.key, d.value) for d in run.defaults_used}


def test_megatron_lm_2020_rows_use_the_batch_per_model_instance(public_csv) -> None:
    """Megatron-LM's 2020 README leaves the micro-batch unstated (complete=0): before v2.0 there was no gradient
    accumulation, so the batch of one model instance is gbs / dp. Rows of other frameworks that leave it out stay
    unprojected."""
    rows = read_rows(public_csv)
    mlm = [r for r in rows if r["source"] == "MegatronLM_README_2020"]
    assert mlm and all(r["complete"] == "0" and not r["mbs"] for r in mlm)
    for row in mlm:
        run = run_from_row(row)
        assert run.train.mbs == int(row["gbs"]) // int(row["dp"]) and run.train.num_microbatches == 1
        assert any(d.key == "mbs" and d.value == "gbs/dp" for d in run.defaults_used)
    other = {**mlm[0], "framework": "nemo-megatron"}
    with pytest.raises(ConfigError, match="missing mbs"):
        run_from_row(other)
    report = validate_rows(mlm)
    assert len(report.rows) == len(mlm) and not report.skipped


def test_rows_table_says_which_defaults_were_assumed(public_csv) -> None:
    result = runner.invoke(
        app, ["validate", "--data", str(public_csv), "--source", "MegatronLM_README_2020", "--rows"], terminal_width=200
    )
    assert result.exit_code == 0, result.output
    assert "mbs=gbs/dp" in result.output and "recompute_granularity=full" in result.output


def test_report_carries_the_shipped_held_out_errors(public_csv) -> None:
    from paraplan.cost.calibration import fitted_table

    held = fitted_table()["held_out_mape_pct"]
    result = runner.invoke(
        app, ["validate", "--data", str(public_csv), "--report", "--source", "NeMo_perf_summary_24.07"]
    )
    assert result.exit_code == 0, result.output
    assert "| held-out MAPE % |" in result.output
    assert f"| **{held['NeMo_perf_summary_24.07']:.2f}** |" in result.output


def test_a_part_announced_after_the_source_is_replaced_by_its_earlier_variant() -> None:
    from datetime import date

    from paraplan.specs.presets import variant_on

    assert variant_on("a100-sxm4-80gb", date(2020, 9, 11))[0] == "a100-sxm4-40gb"
    assert variant_on("A100-SXM4-80GB", date(2021, 4, 9)) == ("a100-sxm4-80gb", "")
    assert variant_on("a100-sxm4-40gb", date(2019, 1, 1)) == ("a100-sxm4-40gb", "")  # no earlier variant
    assert variant_on("h100-sxm5-80gb", date(2020, 1, 1)) == ("h100-sxm5-80gb", "")  # no date shipped


def test_megatron_lm_2020_a100_rows_ran_on_the_40gb_part(public_csv) -> None:
    """Megatron-LM's README of 2020-09-11 names DGX A100, which then had only the 40 GB A100 (the 80 GB part was
    announced on 2020-11-16): those rows are projected on it, and say so. Rows without a date, or dated after
    the announcement, keep the preset they name. On the 40 GB part (1.56 instead of 2.04 TB/s of HBM) the rows'
    mean error is within 3% of zero; on the 80 GB part it was -5.7%."""
    rows = read_rows(public_csv)
    a100 = [r for r in rows if r["source"] == "MegatronLM_README_2020" and r["gpu_preset"] == "a100-sxm4-80gb"]
    assert len(a100) == 8
    for row in a100:
        run = run_from_row(row)
        assert run.system.gpu.name == "a100-sxm4-40gb"
        assert any(
            str(d).startswith("gpu_preset=a100-sxm4-40gb (a100-sxm4-80gb was announced") for d in run.defaults_used
        )
        undated = run_from_row({**row, "source_ref": "no date"})
        assert undated.system.gpu.name == "a100-sxm4-80gb" and not any(
            d.key == "gpu_preset" for d in undated.defaults_used
        )
    later = [r for r in rows if r["source"] == "llm-foundry_MPT_benchmarks" and r["gpu_preset"] == "a100-sxm4-80gb"]
    assert later and all(run_from_row(r).system.gpu.name == r["gpu_preset"] for r in later)
    report = validate_rows(a100)
    mean = sum(r.error_pct for r in report.rows) / len(report.rows)
    assert abs(mean) < 3.0, mean
