"""`paraplan tune --profile`: the fitted profile reaches every candidate's projection, in this process and in the
pool's workers, and the winner's reproducing command (`paraplan project ... --profile auto`) gives its step time."""

from __future__ import annotations

import json
import pickle

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.cost.profiled import ProfileRef, profile_for, shipped_ref
from paraplan.errors import ConfigError
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.tune.candidate import TuneProblem, to_training
from paraplan.tune.evaluate import Evaluator
from paraplan.tune.space import SearchSpace, parse_constraints
from paraplan.tune.tuner import TuneOptions, tune

runner = CliRunner()
A100 = ["tune", "--model", "llama3.1-8b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--gbs", "16", "--seq", "2048",
        "--max-pp", "2", "--max-cp", "1", "--max-mbs", "2", "--executor", "serial", "--json", "--top", "3"]  # fmt: skip


def _tune(*extra: str) -> dict:
    result = runner.invoke(app, [*A100, *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _project(command: str, *extra: str) -> dict:
    result = runner.invoke(app, [*command.split()[1:], *extra, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_tune_with_the_shipped_profile_ranks_by_profiled_times_and_its_command_reproduces_them() -> None:
    profiled, analytic = _tune("--profile", "auto"), _tune()
    assert _tune("--analytic")["top"] == analytic["top"]  # no profile is the default on the A100
    assert profiled["evaluated"] == analytic["evaluated"]
    assert [e["step_time_s"] for e in profiled["top"]] != [e["step_time_s"] for e in analytic["top"]]
    best = profiled["top"][0]
    assert best["command"].endswith(" --profile auto")
    projected = _project(best["command"])
    assert projected["cost_sources"]["profiled_fraction"] > 0.5
    assert projected["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-12)
    # the same configuration costed analytically is another time: the tuner's were the profile's
    without = _project(best["command"].removesuffix(" --profile auto"))
    assert without["cost_sources"]["profiled_fraction"] == 0.0
    assert abs(without["step_time_s"] / best["step_time_s"] - 1) > 1e-3


def test_tune_profile_for_a_gpu_without_one_is_bad_input() -> None:
    result = runner.invoke(app, [*A100[:4], "b200", *A100[5:], "--profile", "auto"])
    assert result.exit_code == 2
    assert "no profile is shipped for b200" in result.output


def test_profile_ref_is_a_value_that_pickles_and_reloads() -> None:
    ref = profile_for("auto", "a100-sxm4-80gb")
    assert ref == shipped_ref("a100-sxm4-80gb") and isinstance(ref, ProfileRef)
    copy = pickle.loads(pickle.dumps(ref))
    assert copy == ref and hash(copy) == hash(ref) and len(pickle.dumps(ref)) < 300  # two strings, not the model
    assert ProfileRef(ref.location, "0" * 64) != ref  # another content is another profile
    assert profile_for(None, "a100-sxm4-80gb") is None and profile_for("auto", "a100-sxm4-80gb", analytic=True) == ref


def test_profile_file_by_path_is_keyed_by_content(tmp_path) -> None:
    shipped = shipped_ref("gh200")
    assert shipped is not None
    path = tmp_path / "gh200.json"
    path.write_text("{not a profile")
    with pytest.raises(ConfigError, match="not a paraplan profile"):
        profile_for(str(path), "gh200")
    shipped.profile.save(path)
    ref = profile_for(str(path), "gh200")
    assert ref is not None and ref.location == str(path.resolve()) and ref.option == str(path.resolve())
    model, system = model_preset("llama3.1-8b"), system_preset("gh200", 8)
    problem = TuneProblem(model, (system,), 16, 2048, profile=ref)
    train = to_training(problem, next(iter(SearchSpace(problem, parse_constraints([], {"pp": 1})).structures())))
    by_path = project_specs(model, system, train, ProjectionOptions(profile=ref))
    by_shipped = project_specs(model, system, train, ProjectionOptions(profile=shipped))
    assert by_path.pipeline.profiled_fraction > 0.5
    assert by_path.step_time_s == pytest.approx(by_shipped.step_time_s, rel=1e-9)  # the same regressors


def test_the_profile_reaches_the_pool_workers() -> None:
    """A search in two worker processes gives the in-process search's profiled times (fork), and an evaluator
    pickled as a spawned worker or Ray would receive it projects with the profile loaded again by reference."""
    ref = shipped_ref("a100-sxm4-80gb")
    problem = TuneProblem(model_preset("llama3.1-8b"), (system_preset("a100-sxm4-80gb", 8),), 16, 2048, profile=ref)
    limits = parse_constraints([], {"pp": 2, "cp": 1, "mbs": 2})
    serial = tune(problem, limits, TuneOptions(executor="serial", top_k=3, seed_planner=False))
    pooled = tune(problem, limits, TuneOptions(executor="local", workers=2, top_k=3, seed_planner=False))
    assert [e.step_time_s for e in pooled.top] == [e.step_time_s for e in serial.top]
    evaluator = pickle.loads(pickle.dumps(Evaluator(problem, SearchSpace(problem, limits))))
    assert evaluator.problem.profile == ref
    best = serial.top[0]
    projected = evaluator.project(best.candidate, to_training(problem, best.candidate))
    assert projected.step_time_s == pytest.approx(best.step_time_s, rel=1e-12)
    assert projected.pipeline.profiled_fraction > 0.5
