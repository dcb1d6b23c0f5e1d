"""The rules agent, with no network, against the published recipes shipped in tests/formats/data: it must improve
on at least three, every kept step must pass the validator and the memory model (checked again here, independently
of the agent's own record), and the log must explain each step."""

from pathlib import Path

from agent_log_checks import check_kept_steps, check_log_structure

from paraplan.tune.agent import AgentResult
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
        check_log_structure(name, run)
    padded = recipe_runs["nemo/mixtral_8x7b_nemo2.yaml"]  # keeps drop-and-pad: its log line says what it drops
    assert "adjusted: TRAINING SEMANTICS CHANGE: drop-and-pad MoE" in "\n".join(padded.log_lines())


def test_every_kept_step_passed_the_validator_and_the_memory_model(
    recipe_runs: dict[str, AgentResult], recipes: list, formats_data: Path
) -> None:
    for name, gpu, gpus in recipes:
        problem, _ = recipe_start(formats_data / name, gpu=gpu, num_gpus=gpus)
        check_kept_steps(name, recipe_runs[name], problem)


def test_dropped_steps_say_why(recipe_runs: dict[str, AgentResult]) -> None:
    reasons = [s.reason for run in recipe_runs.values() for s in run.steps if s.status == "dropped"]
    assert any(r.startswith("slower") for r in reasons)
    assert any(r == "over the usable memory" for r in reasons)
    assert any("improves more" in r for r in reasons)
