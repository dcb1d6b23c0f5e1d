"""How often the model orders two layouts of one job right, by how far apart it projects them."""

import json
import math
from dataclasses import dataclass

import yaml
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.cost.calibration import fitted_table
from paraplan.validate.calibrate import CrossValidation, FitResult, provenance_table
from paraplan.validate.ranking import GapBin, bin_for, bins_from_table, order_agreement, summary_line

runner = CliRunner()


@dataclass(frozen=True)
class Run:
    source: str
    measured_step_s: float
    predicted_step_s: float
    gbs: int = 64
    model: str = "m"

    def group_key(self, fixed_batch: bool = False) -> tuple:
        return (self.model, "gpu", 8, self.gbs) if fixed_batch else (self.model, "gpu", 8)


def test_pairs_are_binned_by_projected_gap_and_scored_by_measured_order() -> None:
    runs = [
        Run("S", 1.00, 1.000),
        Run("S", 0.99, 1.005),  # 0.5% slower projected, measured faster: a miss
        Run("S", 1.30, 1.150),  # 15% / 14.4% slower projected, measured slower: right
        Run("S", 5.00, 1.000, gbs=128),  # another job: no pair with the runs above
        Run("T", 1.10, 1.010),  # another source: no pair with the runs above
    ]
    bins = order_agreement(runs)
    assert [(b.low_pct, b.high_pct, b.pairs, b.agree_pct) for b in bins] == [(0.0, 1.0, 1, 0.0), (10.0, 20.0, 2, 100.0)]
    assert bins[1].sources == {"S": 2} and bins[0].label == "0-1%"
    assert bin_for(0.5, bins) is bins[0] and bin_for(3.0, bins) is None
    # a tie in either time says nothing
    ties = [Run("S", 1.0, 1.0), Run("S", 1.0, 2.0), Run("S", 1.0, 1.0, gbs=128), Run("S", 2.0, 1.0, gbs=128)]
    assert order_agreement(ties) == []
    assert "3 pairs (S 100%)" in summary_line(bins) and summary_line([]) == ""


def test_the_last_bin_is_open_and_survives_the_calibration_file() -> None:
    bins = order_agreement([Run("S", 1.0, 1.0), Run("S", 2.0, 3.0)])
    assert math.isinf(bins[0].high_pct) and bins[0].label == ">= 20%"
    table = yaml.safe_load(yaml.safe_dump({"ranking_resolution": {"bins": [b.to_dict() for b in bins]}}))
    assert bins_from_table(table) == bins
    assert bin_for(1e6, bins_from_table(table)) == bins[0]
    assert bins_from_table({}) == [] and bins_from_table(None) == []


def test_calibrate_ships_the_held_out_bins() -> None:
    fit = FitResult(table={"family": {}}, train_mape_pct=1.0, per_source_train={})
    ranking = [GapBin(0.0, 1.0, 10, 55.0, {"S": 10})]
    table = provenance_table(CrossValidation({"S": 2.0}, {"S": 1.0}, fit, {}, ranking), "runs.csv")
    assert bins_from_table(table) == ranking
    assert "held-out" in table["ranking_resolution"]["source"]
    assert "ranking_resolution" not in provenance_table(CrossValidation({"S": 2.0}, {"S": 1.0}, fit), "runs.csv")


def test_projections_further_apart_are_ordered_right_more_often(public_report) -> None:
    bins = order_agreement(public_report.rows)
    print([(b.label, b.pairs, round(b.agree_pct)) for b in bins])
    assert sum(b.pairs for b in bins) > 1000
    assert bins[-1].agree_pct >= 90.0  # runs projected 20% apart: the order is real
    assert bins[0].agree_pct < bins[-1].agree_pct - 20.0  # within 1% the model cannot tell


def test_the_shipped_calibration_scores_its_held_out_ordering() -> None:
    bins = bins_from_table(fitted_table())
    assert bins, "calibration.yaml ships no ranking_resolution: refit with `paraplan calibrate`"
    assert bins[0].low_pct == 0.0 and math.isinf(bins[-1].high_pct)
    assert bins[-1].agree_pct > bins[0].agree_pct


def test_validate_prints_and_emits_the_bins(public_csv) -> None:
    args = ["validate", "--data", str(public_csv), "--source", "vTrain_MICRO24_multi"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "of runs of one job" in result.output and "apart" in result.output
    out = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert out["ranking_resolution"] and set(out["ranking_resolution"][0]) >= {"low_pct", "pairs", "agree_pct"}


def test_tune_says_how_sure_its_ordering_is() -> None:
    # a small space (36 candidates, not 943): the column and its fields are what is checked, not the search
    args = ["tune", "--model", "llama3.1-8b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--gbs", "64", "--seq", "2048",
            "--max-pp", "1", "--max-cp", "1", "--max-mbs", "2"]  # fmt: skip
    result = runner.invoke(app, [*args, "--top", "3"])
    assert result.exit_code == 0, result.output
    assert "vs #1" in result.output and "coin toss" in result.output
    top = json.loads(runner.invoke(app, [*args, "--top", "3", "--json"]).stdout)["top"]
    assert top[0]["gap_to_best_pct"] == 0.0 and top[0]["best_measured_faster_pct"] is None
    assert top[1]["gap_to_best_pct"] >= 0.0 and 0.0 <= top[1]["best_measured_faster_pct"] <= 100.0


def test_tune_scores_the_order_only_against_runs_on_the_best_ones_gpu_count() -> None:
    from types import SimpleNamespace

    from paraplan.cli.tune import _order_vs_best

    def ev(gpus: int, tokens_per_sec: float) -> SimpleNamespace:
        return SimpleNamespace(candidate=SimpleNamespace(num_gpus=gpus), tokens_per_sec=tokens_per_sec)

    best, same, other = ev(16, 1000.0), ev(16, 990.0), ev(8, 980.0)
    result = SimpleNamespace(top=[best, same, other])
    bins = [GapBin(0.0, 5.0, 10, 55.0, {"S": 10})]
    gap, order = _order_vs_best(result, same, bins)
    assert abs(gap - 100 * (1000 / 990 - 1)) < 1e-12 and order is bins[0]  # throughput gap = step-time gap
    gap, order = _order_vs_best(result, other, bins)
    assert 2.0 < gap < 2.1 and order is None  # another GPU count is another job: the pairs say nothing of it
