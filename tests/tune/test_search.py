import pytest

from paraplan.projection import project_specs
from paraplan.specs.validate import layout_problems
from paraplan.tune.candidate import to_training
from paraplan.tune.evaluate import Evaluator
from paraplan.tune.seed import seed_plan
from paraplan.tune.space import SearchSpace, parse_constraints
from paraplan.tune.tuner import TuneOptions, pareto_front, score, tune

NO_OPTUNA = "optuna is not installed (paraplan's 'tune' extra): the tpe and nsga2 searches need it"


def _assert_legal_and_fits(problem, evaluations) -> None:
    assert evaluations
    for e in evaluations:
        train = e.train or to_training(problem, e.candidate)
        system = problem.system(e.candidate.num_gpus)
        assert layout_problems(problem.model, system, train) == [], e.candidate.describe()
        projection = project_specs(problem.model, system, train)
        assert projection.memory.fits, e.candidate.describe()
        assert abs(projection.step_time_s - e.step_time_s) <= 1e-12 * e.step_time_s


def test_exhaustive_returns_legal_fitting_configurations(dense_problem, dense_limits) -> None:
    result = tune(dense_problem, dense_limits, TuneOptions(executor="serial", top_k=10))
    assert result.method == "exhaustive"
    assert len(result.top) == 10
    _assert_legal_and_fits(dense_problem, result.top)
    assert [score(e) for e in result.top] == sorted((score(e) for e in result.top), reverse=True)
    best_fitting = max(score(e) for e in result.evaluations if e.fits)
    assert score(result.top[0]) == best_fitting
    assert result.memory_rejected > 0 and result.dominated > 0 and result.illegal > 0


def test_dominance_pruning_loses_nothing(moe_problem) -> None:
    """Skipping dominated recompute variants must not change the winner (the assumption pruning rests on)."""
    limits = parse_constraints([], {"pp": 2, "cp": 1, "mbs": 1})
    pruned = tune(moe_problem, limits, TuneOptions(executor="serial", top_k=3))
    full = tune(moe_problem, limits, TuneOptions(executor="serial", top_k=3, objectives=("throughput", "memory")))
    assert full.dominated == 0 and pruned.dominated > 0
    best_everything = max((e for e in full.evaluations if e.fits), key=score)
    assert abs(score(pruned.top[0]) - score(best_everything)) <= 1e-9 * score(best_everything)
    _assert_legal_and_fits(moe_problem, pruned.top)


def test_seed_planner_is_deterministic_and_not_better_than_the_search(dense_problem, dense_limits) -> None:
    space = SearchSpace(dense_problem, dense_limits)
    first, _ = seed_plan(space, Evaluator(dense_problem, space), score)
    second, _ = seed_plan(space, Evaluator(dense_problem, space), score)
    assert [e.candidate for e in first] == [e.candidate for e in second]
    seed_best = max((e for e in first if e.fits), key=score)
    result = tune(dense_problem, dense_limits, TuneOptions(executor="serial", top_k=1))
    assert score(result.top[0]) >= score(seed_best)
    assert len(first) < 200


def test_local_pool_matches_serial(dense_problem, dense_limits, dense_serial_top5) -> None:
    serial = dense_serial_top5
    pooled = tune(dense_problem, dense_limits, TuneOptions(executor="local", workers=2, top_k=5, seed_planner=False))
    assert [e.candidate for e in pooled.top] == [e.candidate for e in serial.top]
    assert pooled.evaluated == serial.evaluated


def test_tpe_and_nsga2(dense_problem, dense_limits) -> None:
    pytest.importorskip("optuna", reason=NO_OPTUNA)
    tpe = tune(dense_problem, dense_limits, TuneOptions(executor="serial", method="tpe", budget=120, top_k=5))
    assert tpe.method == "tpe" and tpe.top
    _assert_legal_and_fits(dense_problem, tpe.top)
    nsga = tune(
        dense_problem,
        dense_limits,
        TuneOptions(executor="serial", method="nsga2", budget=120, objectives=("throughput", "memory")),
    )
    assert nsga.method == "nsga2" and nsga.pareto
    _assert_legal_and_fits(dense_problem, nsga.pareto)
    front = nsga.pareto
    for a in front:  # no point of the front is dominated by another evaluated point
        assert not any(
            e.fits
            and e.tokens_per_sec >= a.tokens_per_sec
            and e.peak_gib <= a.peak_gib
            and (e.tokens_per_sec > a.tokens_per_sec or e.peak_gib < a.peak_gib)
            for e in nsga.evaluations
        )
    assert pareto_front(front, ("throughput", "memory")) == front


def test_several_gpu_counts_trade_throughput_for_gpus(dense_problem, dense_limits) -> None:
    from dataclasses import replace

    from paraplan.specs.presets import system_preset

    problem = replace(dense_problem, systems=(system_preset("h100-sxm5-80gb", 4), system_preset("h100-sxm5-80gb", 8)))
    limits = parse_constraints([], {"pp": 2, "cp": 2, "mbs": 2})
    result = tune(problem, limits, TuneOptions(executor="serial", objectives=("throughput", "gpus")))
    assert {e.candidate.num_gpus for e in result.pareto} == {4, 8}
    _assert_legal_and_fits(problem, result.pareto)


def test_candidates_mode_ranks_only_the_given(dense_problem) -> None:
    space = SearchSpace(dense_problem)
    given = [
        space.candidate_from_mapping({"tp": 1, "pp": 1, "mbs": 1, "sharding": "fsdp"}),
        space.candidate_from_mapping({"tp": 2, "pp": 2, "mbs": 1}),
        space.candidate_from_mapping({"tp": 8, "pp": 1, "mbs": 2}),
        space.candidate_from_mapping({"tp": 1, "pp": 1, "mbs": 16, "sharding": "ddp"}),  # does not fit
        space.candidate_from_mapping({"tp": 3, "pp": 1}),  # illegal
    ]
    result = tune(dense_problem, options=TuneOptions(executor="serial"), candidates=given)
    assert result.method == "candidates"
    assert {e.candidate for e in result.top} <= set(given[:3])
    assert len(result.top) == 3
    assert any("illegal" in n for n in result.notes)
    _assert_legal_and_fits(dense_problem, result.top)


def test_auto_enumerates_when_the_space_allows() -> None:
    from paraplan.tune.tuner import EXHAUSTIVE_MAX_GROUPS, _choose_method

    assert _choose_method(TuneOptions(), 1_000, 2, 0.005) == "exhaustive"
    assert _choose_method(TuneOptions(method="exhaustive"), EXHAUSTIVE_MAX_GROUPS + 1, 2, 0.001) == "exhaustive"


def test_auto_samples_with_optuna_when_the_space_is_large() -> None:
    pytest.importorskip("optuna", reason=NO_OPTUNA)
    from paraplan.tune.tuner import EXHAUSTIVE_MAX_GROUPS, _choose_method

    assert _choose_method(TuneOptions(time_limit_s=1), 100_000, 2, 0.005) == "tpe"
    multi = TuneOptions(objectives=("throughput", "memory"), time_limit_s=1)
    assert _choose_method(multi, 100_000, 2, 0.005) == "nsga2"
    assert _choose_method(TuneOptions(), EXHAUSTIVE_MAX_GROUPS + 1, 2, 0.001) == "tpe"


def test_auto_enumerates_a_large_space_without_optuna(monkeypatch) -> None:
    from paraplan.tune import tuner

    monkeypatch.setattr(tuner, "optuna_available", lambda: False)
    assert tuner._choose_method(TuneOptions(), tuner.EXHAUSTIVE_MAX_GROUPS + 1, 2, 0.001) == "exhaustive"
