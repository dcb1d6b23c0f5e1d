"""`paraplan calibrate`'s generalization splits: a GPU generation, a framework, or the later releases held out of the
fit and scored, on the leave-one-source-out machinery (`validate.calibrate.split_jobs`)."""

from __future__ import annotations

import math

import pytest

from paraplan.cost.calibration import family_of
from paraplan.validate.measured import read_rows, run_from_row
from paraplan.validate.sources import REPORT_ONLY_SOURCES

pytest.importorskip("scipy", reason="scipy is not installed (the 'fit' extra)")

from paraplan.validate.calibrate import (  # noqa: E402 - after the scipy check
    FORWARD_FROM,
    generalization_splits,
    provenance_table,
    split_jobs,
)

TAKE = {
    "Korthikanti2022_Table5": 3,
    "Narayanan2021_SC21_Table1": 3,
    "llm-foundry_MPT_benchmarks": 3,
    "MegatronBridge_perf_summary_25.11": 4,
    "MegatronBridge_perf_summary_26.02": 2,
    "torchtitan_benchmarks_202412": 1,  # memory rows take no part in a step-time split
}


@pytest.fixture
def subset(public_csv) -> list[dict[str, str]]:
    rows = read_rows(public_csv)
    return [r for source, n in TAKE.items() for r in [r for r in rows if r["source"] == source][:n]]


def test_each_group_is_held_out_of_its_fit(subset) -> None:
    for split, key in (
        ("gpu_generation", lambda run: family_of(run.system.gpu.name)),
        ("framework", lambda run: run.train.framework),
        ("source", lambda run: run.source),
    ):
        jobs = split_jobs(subset, split, max_evaluations=1)
        assert len(jobs) >= 2, split
        for group, (train, test, _) in jobs:
            assert test and train
            assert all(key(run_from_row(r)) == group for r in test)
            assert all(key(run_from_row(r)) != group for r in train)
            assert not {r["source"] for r in test} & set(REPORT_ONLY_SOURCES)  # the forward set is never scored here
            assert all(r["metric"] != "memory_gib" for r in train + test)


def test_forward_split_fits_on_earlier_releases_and_scores_megatron_bridge_26_02(subset) -> None:
    ((group, (train, test, _)),) = split_jobs(subset, "forward", max_evaluations=1)
    assert group == f"from {FORWARD_FROM.isoformat()}"
    assert {r["source"] for r in test} == {"MegatronBridge_perf_summary_26.02"}
    assert "MegatronBridge_perf_summary_26.02" not in {r["source"] for r in train}
    assert "MegatronBridge_perf_summary_25.11" in {r["source"] for r in train}


def test_splits_score_every_group_and_ship_in_the_provenance(subset) -> None:
    scores = generalization_splits(subset, ("gpu_generation", "forward"), max_evaluations=2)
    fitted_families = {
        family_of(run_from_row(r).system.gpu.name)
        for r in subset
        if r["metric"] != "memory_gib" and r["source"] not in REPORT_ONLY_SOURCES
    }
    assert set(scores["gpu_generation"].held_out) == fitted_families and len(fitted_families) >= 2
    forward = scores["forward"]
    assert set(forward.per_source()) == {"MegatronBridge_perf_summary_26.02"} and math.isfinite(forward.mape_pct)
    out = forward.to_dict()
    assert out["groups"][f"from {FORWARD_FROM.isoformat()}"]["per_source"]
    from paraplan.validate.calibrate import CrossValidation, FitResult

    cv = CrossValidation({"S": 2.0}, {"S": 1.0}, FitResult({}, 1.0, {}))
    table = provenance_table(cv, "runs.csv", scores)
    assert set(table["generalization_mape_pct"]) == {"gpu_generation", "forward"}


def test_unknown_split_is_refused(subset) -> None:
    from paraplan.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown split"):
        generalization_splits(subset, ("by_moon_phase",), max_evaluations=1)
