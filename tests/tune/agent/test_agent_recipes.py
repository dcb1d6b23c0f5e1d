"""The rules agent, with no network, against the published recipes shipped in tests/formats/data: it must improve
on at least three, every kept step must pass the validator and the memory model (checked again here, independently
of the agent's own record), and the log must explain each step."""

from pathlib import Path

from paraplan.projection import project_specs
from paraplan.specs.validate import check
from paraplan.tune.agent import AgentResult
from paraplan.tune.agent.changes import spec_from_json
from paraplan.tune.agent.record import KINDS, STATUSES
from paraplan.tune.agent.starts import recipe_start

IMPROVED_PCT = 1.0
"""A gain the log has to explain (not a rounding)."""


def test_improves_at_least_three_published_recipes(recipe_runs: dict[str, AgentResult]) -> None:
    improved = {name: r.gain_pct for name, r in recipe_runs.items() if r.gain_pct >= IMPROVED_PCT}
    assert len(improved) >= 3, {name: r.gain_pct for name, r in recipe_runs.items()}
    for run in recipe_runs.values():
        assert run.gain_pct >= 0.0  # never worse than the recipe: the start stays the incumbent otherwise
        assert run.start.source.startswith("recipe ")


def test_the_log_has_its_structure(recipe_runs: dict[str, AgentResult]) -> None:
    for name, run in recipe_runs.items():
        assert [s.index for s in run.steps] == list(range(len(run.steps))), name
        assert run.steps[0].kind == "start" and run.steps[0].status == "kept"
        assert [s.round for s in run.steps] == sorted(s.round for s in run.steps)
        for step in run.steps:
            assert step.kind in KINDS and step.status in STATUSES, (name, step)
            assert step.hypothesis.strip() and step.source and step.reason, (name, step)
            if step.kind == "proposal":
                assert step.requested, (name, step)
                assert step.incumbent_step_time_s is not None
            if step.status == "dropped" and step.validator == "passed":
                assert step.step_time_s is not None and step.memory
        lines = "\n".join(run.log_lines())
        for word in ("why:", "check: validator passed; memory fits"):
            assert word in lines, name
        if run.path:
            assert "change:" in lines


def test_every_kept_step_passed_the_validator_and_the_memory_model(
    recipe_runs: dict[str, AgentResult], recipes: list, formats_data: Path
) -> None:
    for name, gpu, gpus in recipes:
        run = recipe_runs[name]
        problem, _ = recipe_start(formats_data / name, gpu=gpu, num_gpus=gpus)
        system = problem.systems[0]
        previous = run.start
        for step in run.path:
            assert step.validator_passed and step.memory_fits, (name, step)
            assert step.changes, (name, step)  # a kept step changed something, and says what
            assert step.incumbent_step_time_s == previous.step_time_s  # judged against the incumbent of its round
            assert step.step_time_s < previous.step_time_s or step.peak_gib < previous.peak_gib
            train = spec_from_json(step.spec)
            assert check(problem.model, system, train) == train  # the one validator, again
            projection = project_specs(problem.model, system, train)
            assert projection.memory.fits, (name, step.index)
            assert abs(projection.step_time_s - step.step_time_s) <= 1e-9 * step.step_time_s
            before_spec = spec_from_json(previous.spec)
            for field, (before, after) in step.changes.items():  # the log's change is the change made
                assert before != after
                assert getattr(train, field) == (tuple(after) if isinstance(after, list) else after)
                assert getattr(before_spec, field) == (tuple(before) if isinstance(before, list) else before)
            previous = step
        assert run.best is previous


def test_dropped_steps_say_why(recipe_runs: dict[str, AgentResult]) -> None:
    reasons = [s.reason for run in recipe_runs.values() for s in run.steps if s.status == "dropped"]
    assert any(r.startswith("slower") for r in reasons)
    assert any(r == "over the usable memory" for r in reasons)
    assert any("improves more" in r for r in reasons)
