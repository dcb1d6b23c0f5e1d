"""What a measured row leaves unstated: its framework's defaults of the row's era, a family for a framework name
outside paraplan's list, the architecture's shape defaults and bf16; and no complete row of public.csv is skipped
for a reason a user would not accept."""

from __future__ import annotations

import re
from datetime import date

import pytest

from paraplan.errors import ConfigError
from paraplan.validate.measured import read_rows, release_date, run_from_row
from paraplan.validate.report import validate_rows

# Why a complete row may stay unprojected: its model's shape is unknown (no preset and no layers / hidden / heads),
# or its layout breaks a rule the framework itself enforces, named with its numbers.
ACCEPTED_SKIPS = (
    re.compile(r"missing (?:num_layers|hidden|num_heads)\b"),  # unknown model shape
    re.compile(r"needs a model preset .* no preset matches"),  # a shape the columns cannot state, and no preset has
    re.compile(r"must divide .* \(Megatron expert grid\)"),  # a refused layout, with its rule
)


def _row(rows: list[dict[str, str]], row_id: str) -> dict[str, str]:
    return next(r for r in rows if r["id"] == row_id)


def test_no_complete_row_is_skipped_for_a_reason_a_user_would_not_accept(public_csv) -> None:
    rows = read_rows(public_csv)
    complete = [r for r in rows if (r.get("complete") or "1").strip() != "0"]
    skipped = []
    for row in complete:
        try:
            run_from_row(row)
        except Exception as exc:  # noqa: BLE001 - every reason is checked below
            skipped.append((row["id"], str(exc)))
    unaccepted = [(i, why) for i, why in skipped if not any(p.search(why) for p in ACCEPTED_SKIPS)]
    assert not unaccepted
    assert not skipped  # p1827 (etp unstated) projects with the expert TP its grid admits


def test_unstated_expert_tp_is_the_one_the_expert_grid_admits(public_csv) -> None:
    """Megatron's default expert TP (= tp) cannot have run tp2 pp2 ep4 on 8 GPUs (etp*ep = 8 does not divide
    tp*cp*dp = 4); the run ran, so it used etp 1 (the test's name says so too: ..._ep4_etp1_...)."""
    run = run_from_row(_row(read_rows(public_csv), "p1827"))
    assert run.train.etp == 1
    assert any(d.key == "expert_tensor_parallel_size" and "expert grid" in d.why for d in run.defaults_used)
    fits = {**_row(read_rows(public_csv), "p1827"), "ep": "2", "dp": "2"}  # etp = tp = 2: 4 divides 4
    assert run_from_row(fits).train.etp == 2


def test_a_row_takes_the_defaults_of_its_era_and_says_which(public_csv) -> None:
    rows = read_rows(public_csv)
    functional = next(r for r in rows if r["source"] == "megatron_lm_functional_golden" and r["arch"] == "gpt")
    # without its notes (which state the attention backend: validate.measured reads them), the row's era decides
    functional = {**functional, "notes": ""}
    run = run_from_row(functional)  # undated Megatron-LM test of 2025: today's Megatron-core, not the 2020 papers'
    assert run.train.attention_backend == "flash"
    why = {d.key: d.why for d in run.defaults_used}
    assert "Megatron-core" in why["attention_backend"] and "no source date" in why["attention_backend"]
    as_2020 = run_from_row(functional, framework_version=date(2020, 9, 1))  # the user names the release instead
    assert as_2020.train.attention_backend == "unfused" and not as_2020.train.tp_async_backward
    sc21 = run_from_row(_row(rows, "p0000"))  # a dated row keeps its own era whatever the user names
    assert run_from_row(_row(rows, "p0000"), framework_version=date(2025, 1, 1)).train == sc21.train
    assert sc21.train.attention_backend == "unfused" and not sc21.train.tp_async_backward


def test_release_date_reads_the_container_release_from_the_source() -> None:
    assert release_date({"source": "MegatronBridge_perf_summary_26.02", "source_ref": "x (2026-08-22)"}) == date(
        2026, 2, 1
    )
    assert release_date({"source": "Korthikanti2022_Table5", "source_ref": "arXiv 2205.05198"}) == date(2022, 5, 1)


def test_unknown_framework_projects_as_its_family_with_a_recorded_warning(public_csv) -> None:
    rows = read_rows(public_csv)
    base = _row(rows, "p0062")  # Megatron-Bridge 25.11 Llama 3 8B on GB200
    for name, family in (("primus", "megatron-lm"), ("nemo-automodel", "torchtitan"), ("pytorch-fsdp", "torchtitan")):
        run = run_from_row({**base, "framework": name})
        assert run.train.framework == family
        warning = next(d for d in run.defaults_used if d.key == "framework")
        assert name in warning.why
    report = validate_rows([{**base, "framework": "primus"}])
    assert not report.skipped and "framework=megatron-lm (framework 'primus'" in "; ".join(
        report.assumed_by_source()[base["source"]]
    )


def test_gpt_row_without_ffn_kv_heads_or_precision_takes_the_architecture_defaults(public_csv) -> None:
    rows = read_rows(public_csv)
    base = _row(rows, "p0000")  # SC21 GPT 1.7B, hidden 2304, 24 heads, ffn 9216 = 4h
    stated = run_from_row(base)
    bare = run_from_row({**base, "ffn_hidden": "", "num_kv_heads": "", "precision": ""})
    assert bare.model.ffn_hidden_size == stated.model.ffn_hidden_size == 4 * 2304
    assert bare.model.num_query_groups in (None, 24) and bare.train.precision == "bf16"
    keys = {d.key: d for d in bare.defaults_used}
    assert {"ffn_hidden", "num_kv_heads", "precision"} <= set(keys)
    assert "4 x hidden" in keys["ffn_hidden"].why
    # a Llama-style row has no FFN rule: its unstated FFN size is still a missing field
    llama = {**_row(rows, "p0062"), "model_preset": "", "ffn_hidden": ""}
    try:
        run_from_row(llama)
    except Exception as exc:  # noqa: BLE001
        assert "ffn_hidden" in str(exc)
    else:
        raise AssertionError("a Llama row without its FFN size was projected")


def test_validate_prints_the_era_it_assumed_and_takes_a_framework_version(public_csv) -> None:
    from typer.testing import CliRunner

    from paraplan.cli.main import app

    runner = CliRunner()
    args = ["validate", "--data", str(public_csv), "--source", "Korthikanti2022_Table5"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Framework defaults assumed, Korthikanti2022_Table5: Megatron-LM 2022-23" in " ".join(result.output.split())
    bad = runner.invoke(app, [*args, "--framework-version", "core_r0.12"])
    assert bad.exit_code == 2 and "framework version 'core_r0.12'" in bad.output


def test_project_takes_the_defaults_of_a_named_release_and_maps_an_unknown_framework() -> None:
    from typer.testing import CliRunner

    from paraplan.cli.main import app

    runner = CliRunner()
    base = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--gbs", "64", "--json"]
    old = runner.invoke(app, [*base, "--framework", "megatron-lm", "--framework-version", "2020-09"])
    assert old.exit_code == 0, old.output
    assert "defaults of Megatron-LM 2020-21 papers" in " ".join(old.output.split())
    stated = runner.invoke(app, [*base, "--framework-version", "2020-09", "--recompute", "none"])
    assert stated.exit_code == 0 and "recompute_granularity=full" not in stated.output  # what the user set stays
    primus = runner.invoke(app, [*base, "--framework", "primus"])
    assert primus.exit_code == 0, primus.output
    assert "projected as megatron-lm" in " ".join(primus.output.split())


def test_a_row_whose_architecture_the_columns_cannot_state_takes_the_preset_of_its_shape(public_csv) -> None:
    """GPT-OSS rows state 64 heads over a hidden of 2,880: built from the columns, the heads would be 45 wide and the
    attention as wide as the hidden; the one preset whose shape matches (64 x 64, sliding windows, sinks) is taken,
    and recorded. A shape no preset has is refused with the architecture named, never projected from columns."""
    gpt_oss = next(r for r in read_rows(public_csv) if r["arch"] == "gpt-oss")
    run = run_from_row({**gpt_oss, "model_preset": ""})
    assert run.model.name == "gpt-oss-120b" and run.model.kv_channels == 64 and run.model.window_size == 127
    assert any(d.key == "model preset" and "matches" in d.why for d in run.defaults_used)
    with pytest.raises(ConfigError, match="architecture 'gpt-oss' needs a model preset .* no preset matches"):
        run_from_row({**gpt_oss, "model_preset": "", "num_layers": "37"})
    llama = next(r for r in read_rows(public_csv) if r["arch"] == "llama" and not r["model_preset"].strip())
    assert not any(d.key == "model preset" for d in run_from_row(llama).defaults_used)  # the columns state it


def test_a_row_its_notes_flag_is_projected_and_shown_but_never_scored(public_csv) -> None:
    """public.csv's p1797 (Megatron-Bridge 26.02, H100 Qwen3-30B-A3B) carries "CAUTION: the 26.02.01 patch release
    lists 9058 tokens/s/GPU for the identical configuration": it is projected, listed with its error and the flag's
    words, and left out of every MAPE (and so of the fit)."""
    from paraplan.validate.report import source_flag

    rows = [r for r in read_rows(public_csv) if r["source"] == "MegatronBridge_perf_summary_26.02"]
    flagged_ids = {r["id"] for r in rows if source_flag(r["notes"])}
    report = validate_rows(rows)
    assert {r.id for r, _ in report.flagged} == flagged_ids and flagged_ids
    assert not flagged_ids & {r.id for r in report.rows}
    assert all("26.02.01" in why for _, why in report.flagged)
    assert report.per_source()["MegatronBridge_perf_summary_26.02"]["n"] == len(rows) - len(flagged_ids)
    assert source_flag("cfg=x; CAUTION: a regression; see y") == "a regression" and source_flag("fine") == ""


def test_deepseek_v3_recipe_takes_the_precision_aware_optimizer(public_csv) -> None:
    """NeMo's and Megatron-Bridge's DeepSeek-V3 recipe (`specs.frameworks.MODEL_RECIPES`): bf16 main gradients and
    Adam moments, an assumption each; another framework, or another model, keeps fp32 states."""
    rows = read_rows(public_csv)
    dsv3 = next(r for r in rows if r["framework"] == "nemo-megatron" and r["model_preset"] == "deepseek-v3")
    run = run_from_row(dsv3)
    t = run.train
    assert (
        t.use_precision_aware_optimizer and (t.main_grads_dtype, t.exp_avg_dtype, t.exp_avg_sq_dtype) == ("bf16",) * 3
    )
    assert t.main_params_dtype == "fp32"
    recipe = {a.key: a for a in run.defaults_used if "DeepSeek-V3 recipe" in a.why}
    assert set(recipe) == {
        "use_precision_aware_optimizer", "main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
    }  # fmt: skip
    assert not run_from_row({**dsv3, "framework": "megatron-lm"}).train.use_precision_aware_optimizer
    llama = next(r for r in rows if r["framework"] == "nemo-megatron" and r["model_preset"] == "llama3.1-70b")
    assert not run_from_row(llama).train.use_precision_aware_optimizer


def test_megatron_bridge_moe_rows_with_tp_take_no_tp_overlap_and_dense_ones_do(public_csv) -> None:
    """The recipes' TP communication overlap (`specs.frameworks`): off for a MoE model (every MoE performance recipe
    with TP of megatron-bridge 0.6.2), on for a dense one at TP > 1 outside NVFP4; an assumption either way, and a
    row that states nothing of it is the only kind that takes it."""
    rows = [r for r in read_rows(public_csv) if r["source"].startswith("MegatronBridge_perf_summary")]
    with_tp = [(r, run_from_row(r)) for r in rows if int(r["tp"] or 1) > 1]
    moe = [run for _, run in with_tp if run.model.is_moe]
    dense = [run for r, run in with_tp if not run.model.is_moe and r["precision"] != "nvfp4"]
    assert moe and dense
    assert not any(run.train.tp_comm_overlap for run in moe)
    assert all(run.train.tp_comm_overlap for run in dense)
    for run in moe + dense:
        assert any(a.key == "tp_comm_overlap" for a in run.defaults_used)


def test_qwen3_235b_h100_recipe_hides_the_all_to_all_where_megatron_admits_it(public_csv) -> None:
    """Megatron-Bridge's H100 recipe of Qwen3-235B-A22B overlaps the EP all-to-all (`specs.frameworks.MODEL_RECIPES`,
    megatron-bridge 0.6.2): its rows take EP overlap as an assumption; the model's rows on other GPUs, a row of
    another framework, and a layout Megatron refuses it on (pp > 1 without a virtual pipeline) do not."""
    rows = [r for r in read_rows(public_csv) if r["model_preset"] == "qwen3-235b-a22b" and r["metric"] != "memory_gib"]
    h100 = [r for r in rows if r["framework"] == "nemo-megatron" and r["gpu_preset"] == "h100-sxm5-80gb"]
    others = [r for r in rows if r["framework"] == "nemo-megatron" and r["gpu_preset"] != "h100-sxm5-80gb"]
    assert h100 and others
    for row in h100:
        run = run_from_row(row)
        assert run.train.moe_ep_overlap
        assert any(a.key == "moe_ep_overlap" and "H100 recipe" in a.why for a in run.defaults_used)
    assert not any(run_from_row(r).train.moe_ep_overlap for r in others)
    assert not run_from_row({**h100[0], "framework": "megatron-lm"}).train.moe_ep_overlap
    refused = run_from_row({**h100[0], "vpp": ""})
    assert not refused.train.moe_ep_overlap
    assert any(a.key.endswith("not taken") and "virtual pipeline" in a.why for a in refused.defaults_used)
