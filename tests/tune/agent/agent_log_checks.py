"""The checks every agent run's log must pass (the shipped-recipe runs and the production-knob runs): its structure,
and every kept step passing the one validator and the memory model again, independently of the agent's record."""

from paraplan.projection import project_specs
from paraplan.specs.validate import check
from paraplan.tune.agent import AgentResult
from paraplan.tune.agent.changes import spec_from_json
from paraplan.tune.agent.record import KINDS, STATUSES
from paraplan.tune.candidate import TuneProblem


def check_log_structure(name: str, run: AgentResult) -> None:
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
        if (step.changes or {}).get("moe_pad_expert_input_to_capacity") == [False, True]:  # drops tokens: said
            assert any(a.startswith("TRAINING SEMANTICS CHANGE") for a in step.adjustments), (name, step)
    lines = "\n".join(run.log_lines())
    for word in ("why:", "check: validator passed; memory fits"):
        assert word in lines, name
    if run.path:
        assert "change:" in lines


def check_kept_steps(name: str, run: AgentResult, problem: TuneProblem) -> None:
    """Every kept step passes the validator and the memory model, is faster (or leaner) than the incumbent it was
    judged against, and its logged change is the change made."""
    system = problem.systems[0]
    previous = run.start
    for step in run.path:
        assert step.validator_passed and step.memory_fits, (name, step)
        assert step.changes, (name, step)  # a kept step changed something, and says what
        assert step.incumbent_step_time_s == previous.step_time_s  # judged against the incumbent of its round
        assert (
            previous.memory_fits is False
            or step.step_time_s < previous.step_time_s
            or (step.peak_gib < previous.peak_gib)
        )
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
