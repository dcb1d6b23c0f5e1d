"""The loop's parts: applying changes, the cost-balanced layout, the rules registry, budgets, resume, starts."""

from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.api import tune_agent
from paraplan.errors import ConfigError
from paraplan.sim.breakdown import BreakdownPart
from paraplan.specs.presets import model_preset, system_preset
from paraplan.tune.agent import AgentOptions, StartPoint, run_agent
from paraplan.tune.agent.changes import apply_changes
from paraplan.tune.agent.diagnosis import LayerCosts, diagnose
from paraplan.tune.agent.layout import balanced, move_one_layer
from paraplan.tune.agent.proposers import rules as rules_module
from paraplan.tune.agent.proposers.rules import RULES, RulesProposer, rule
from paraplan.tune.agent.starts import recipe_start
from paraplan.tune.space import parse_constraints
from paraplan.tune.tuner import TuneOptions


def test_changes_keep_the_job_and_adjust_what_follows(mixtral_recipe: Path) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    model, system, train = problem.model, problem.systems[0], start.train
    with pytest.raises(ConfigError, match="global_batch_size"):
        apply_changes(model, system, train, {"gbs": 512})
    with pytest.raises(ConfigError, match="colour"):
        apply_changes(model, system, train, {"colour": "red"})
    with pytest.raises(ConfigError, match="changes nothing"):
        apply_changes(model, system, train, {})
    changed, notes = apply_changes(model, system, train, {"pp": 2})
    assert changed.dp == 2 * train.dp and any("dp 16 -> 32" in n for n in notes)
    assert any("pipeline split for 16 model stages" in n for n in notes)
    changed, notes = apply_changes(model, system, train, {"recompute": "selective"})
    assert changed.recompute_granularity == "selective" and changed.dp == train.dp and not notes
    layout = (2,) * 16
    changed, _ = apply_changes(model, system, train, {"pipeline_layout": list(layout)})
    assert changed.pipeline_layout == layout  # a JSON list becomes the spec's tuple


def test_tp_one_drops_the_flags_that_need_tp() -> None:
    model, system = model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", 8)
    from paraplan.specs.training import TrainingSpec

    train = TrainingSpec().with_values(tp=2, sp=True, tp_comm_overlap=True, gbs=16, seq=4096, dp=4)
    changed, notes = apply_changes(model, system, train, {"tp": 1})
    assert not changed.sequence_parallel and not changed.tp_comm_overlap and changed.dp == 8
    assert any("tp = 1" in n for n in notes)


def test_balanced_layout_minimises_the_heaviest_stage() -> None:
    costs = LayerCosts(layers_s=(1.0,) * 10, embedding_s=0.0, head_s=2.0)
    assert balanced(costs, 4) == (3, 3, 3, 1)  # the head's stage takes one layer: heaviest stage 3.0
    assert max(costs.stage_s((3, 3, 3, 1))) == 3.0
    assert balanced(costs, 11) is None
    assert move_one_layer(costs, (3, 2, 2, 3)) == (3, 2, 3, 2)
    assert move_one_layer(LayerCosts((1.0,) * 4, 0.0, 0.0), (1, 1, 1, 1)) is None


def test_stage_costs_match_the_projection_layout(mixtral_recipe: Path) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    d = diagnose(problem, start.train)
    assert len(d.layout) == 32 and sum(d.layout) == problem.model.num_layers
    busy = d.stage_busy_s
    assert busy[-1] > busy[1]  # the head and loss make the last stage heaviest
    parts = d.parts
    assert abs(sum(parts.values()) - d.step_time_s) < 1e-9 * d.step_time_s
    assert d.share(BreakdownPart.RECOMPUTE) > 0.1


def test_a_new_knob_is_one_rule(mixtral_recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rules_module, "RULES", dict(RULES))

    @rule("test_no_fusion", BreakdownPart.FORWARD_COMPUTE)
    def no_fusion(d):  # noqa: ANN001, ANN202
        return [("eager kernels are slower: check that the agent drops this", {"kernel_fusion": False})]

    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    result = run_agent(problem, [start], proposer=RulesProposer(["test_no_fusion"]))
    (step,) = [s for s in result.steps if s.kind == "proposal"]
    assert step.source == "test_no_fusion" and step.status == "dropped" and step.reason.startswith("slower")
    assert result.stopped == "no rule's proposal improves on the incumbent"
    with pytest.raises(ConfigError, match="unknown agent rule"):
        RulesProposer(["nope"])


def test_budget_time_limit_and_resume(mixtral_recipe: Path, tmp_path: Path) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    study = str(tmp_path / "study.db")
    first = run_agent(problem, [start], AgentOptions(budget=3, study_path=study))
    assert first.proposals == 3 and first.stopped == "budget of 3 proposals"
    again = run_agent(problem, [start], AgentOptions(budget=3, study_path=study))
    assert again.resumed == len(first.steps) and again.proposals == 3 and len(again.steps) == len(first.steps)
    more = run_agent(problem, [start], AgentOptions(budget=40, study_path=study))
    fresh = run_agent(problem, [start], AgentOptions(budget=40))
    assert more.proposals > 3 and more.best.step_time_s <= first.best.step_time_s
    assert abs(more.best.step_time_s - fresh.best.step_time_s) <= 0.02 * fresh.best.step_time_s
    tried = [s.spec for s in more.steps if s.spec is not None]
    assert len({str(sorted(s.items())) for s in tried}) == len(tried)  # nothing judged twice across the runs
    quick = run_agent(problem, [start], AgentOptions(budget=40, time_limit_s=1e-9))
    assert quick.stopped.startswith("time limit") and quick.proposals == 0


def test_starts_choose_the_fastest_fitting_and_refuse_none_legal(mixtral_recipe: Path) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    slower = replace(start.train, recompute_num_layers=None, recompute_granularity="full", micro_batch_size=1,
                     pipeline_model_parallel_size=8, virtual_pipeline_model_parallel_size=4, data_parallel_size=8)  # fmt: skip
    illegal = replace(start.train, tensor_model_parallel_size=3)
    result = run_agent(problem, [StartPoint("b", slower), StartPoint("a", start.train), StartPoint("x", illegal)],
                       AgentOptions(budget=1))  # fmt: skip
    starts = result.steps[:3]
    assert [s.status for s in starts] == ["dropped", "kept", "skipped"] and result.start.source == "a"
    assert "divisible by tp 3" in starts[2].validator
    with pytest.raises(ConfigError, match="no starting point passes the validator"):
        run_agent(problem, [StartPoint("x", illegal)])


def test_an_oom_start_is_rescued_by_the_memory_rules(mixtral_recipe: Path) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    oom = replace(start.train, recompute_granularity="none", micro_batch_size=4, use_distributed_optimizer=False,
                  pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=1, pipeline_schedule="1f1b",
                  data_parallel_size=64)  # fmt: skip
    assert not diagnose(problem, oom).fits
    result = run_agent(problem, [StartPoint("oom", oom)], AgentOptions(budget=20))
    assert result.path and result.path[0].source == "memory_pressure" and result.path[0].reason.startswith("fits")
    assert all(s.memory_fits for s in result.path)


def test_tune_then_agent_from_the_search_and_seed_best() -> None:
    search = TuneOptions(executor="serial", workers=1)
    limits = parse_constraints([], {"pp": 2, "cp": 1, "mbs": 2})
    result, agent = tune_agent("llama3.1-8b", "h100-sxm5-80gb", 8, 16, 4096, AgentOptions(budget=5),
                               search=search, limits=limits)  # fmt: skip
    starts = [s for s in agent.steps if s.kind == "start"]
    assert starts[0].source.startswith("search best") and starts[0].step_time_s == result.top[0].step_time_s
    assert agent.best.step_time_s <= result.top[0].step_time_s


def test_the_rules_agent_touches_no_network(mixtral_recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import urllib.request

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the rules agent opened a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setenv("PARAPLAN_LLM_URL", "http://127.0.0.1:9/v1")  # configured, but not the chosen proposer
    monkeypatch.setenv("PARAPLAN_LLM_MODEL", "m")
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    result = run_agent(problem, [start], AgentOptions(budget=10))
    assert result.proposer == "rules" and result.path
