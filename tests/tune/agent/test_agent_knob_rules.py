"""The production-knob rules (issue 36): each fires on a diagnosis built to need it, with a hypothesis that reads the
breakdown, and its proposals pass the validator; agent runs on a host-launch-bound and a memory-bound job keep a
CUDA-graph and an offload step, every kept step checked again (`agent_log_checks`)."""

from dataclasses import replace
from pathlib import Path

import pytest
from agent_log_checks import check_kept_steps, check_log_structure

from paraplan.sim.breakdown import BreakdownPart as P
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check, resolve_dp
from paraplan.tune.agent import AgentOptions, StartPoint, run_agent
from paraplan.tune.agent.changes import apply_changes
from paraplan.tune.agent.diagnosis import Diagnosis, diagnose
from paraplan.tune.agent.proposers.rules import RULES, RulesProposer
from paraplan.tune.agent.starts import recipe_start
from paraplan.tune.candidate import TuneProblem

NEW_RULES = (
    "cuda_graphs", "moe_drop_and_pad", "optimizer_offload", "activation_offload", "precision_aware_optimizer",
    "recompute_modules", "recompute_block", "recompute_layers",
)  # fmt: skip


def _problem(model: str, gpus: int, **values: object) -> tuple[TuneProblem, TrainingSpec]:
    m, system = model_preset(model), system_preset("h100-sxm5-80gb", gpus)
    train = check(m, system, resolve_dp(TrainingSpec().with_values(**values), system))
    return TuneProblem(m, (system,), train.gbs, train.seq, train), train


def host_bound() -> tuple[TuneProblem, TrainingSpec]:
    """Llama-3.1-8B over tp 8 at 1K tokens, one sequence a step: small GEMMs, the host's launches show."""
    return _problem("llama3.1-8b", 8, tp=8, sp=True, tp_comm_overlap=True, seq=1024, mbs=1, gbs=1)


def memory_bound() -> tuple[TuneProblem, TrainingSpec]:
    """Llama-3.1-8B on one H100: 16 bytes per parameter of weights, gradients and Adam states alone are over 80 GB."""
    return _problem("llama3.1-8b", 1, seq=4096, mbs=1, gbs=8)


def _fired(name: str, d: Diagnosis) -> list[tuple[str, dict]]:
    found = RULES[name].propose(d, []) if RULES[name].history else RULES[name].propose(d)
    assert found, f"{name} did not fire"
    for hypothesis, changes in found:
        assert hypothesis.strip() and changes
    return found


def _judged(problem: TuneProblem, d: Diagnosis, changes: dict) -> tuple[Diagnosis, list[str]]:
    """The proposal applied as the agent applies it and projected: the validator (inside `diagnose`) must pass."""
    train, notes = apply_changes(d.model, d.system, d.train, changes)
    return diagnose(problem, train), notes


def test_every_new_knob_has_its_rule() -> None:
    assert set(NEW_RULES) <= set(RULES)


def test_cuda_graphs_layer_then_full_iteration() -> None:
    problem, train = host_bound()
    d = diagnose(problem, train)
    assert d.share(P.HOST_LAUNCH_BOUND) >= 0.02
    ((hypothesis, changes),) = _fired("cuda_graphs", d)
    assert changes == {"cuda_graph_scope": "layer"} and "kernel launches for" in hypothesis
    graphed, _ = _judged(problem, d, changes)
    assert graphed.step_time_s < d.step_time_s and graphed.share(P.HOST_LAUNCH_BOUND) < d.share(P.HOST_LAUNCH_BOUND)
    full = diagnose(problem, replace(train, recompute_granularity="full"))  # layer scope refused with full recompute
    ((_, changes),) = _fired("cuda_graphs", full)
    assert changes == {"cuda_graph_scope": "full_iteration"}
    _judged(problem, full, changes)
    assert not RULES["cuda_graphs"].propose(diagnose(problem, replace(train, cuda_graph_scope="full_iteration")))


def test_drop_and_pad_says_it_changes_the_training(mixtral_recipe: Path) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    d = diagnose(problem, start.train)
    found = _fired("moe_drop_and_pad", d)
    assert [c["moe_expert_capacity_factor"] for _, c in found] == [1.0, 1.25]
    for hypothesis, changes in found:
        assert "CHANGES THE TRAINING SEMANTICS" in hypothesis and "dropped" in hypothesis
        padded, notes = _judged(problem, d, changes)
        assert padded.train.moe_pad_expert_input_to_capacity and not padded.train.moe_host_sync
        assert any(n.startswith("TRAINING SEMANTICS CHANGE") for n in notes)  # the step's log says so
    graphs = diagnose(problem, replace(start.train, recompute_granularity="selective", recompute_num_layers=None))
    ((hypothesis, _),) = _fired("cuda_graphs", graphs)
    assert "stay eager from the router" in hypothesis  # dropless MoE under graphs


def test_memory_savers_before_recompute() -> None:
    problem, train = memory_bound()
    d = diagnose(problem, train)
    assert not d.fits and train.recompute_granularity == "none"
    ((hypothesis, changes),) = _fired("optimizer_offload", d)
    assert changes["optimizer_cpu_offload"] is True and 0 < changes["optimizer_offload_fraction"] <= 1
    assert "over the usable" in hypothesis and "without recomputing" in hypothesis
    offloaded, _ = _judged(problem, d, changes)
    assert offloaded.fits and offloaded.peak_gib < d.peak_gib
    ((hypothesis, changes),) = _fired("precision_aware_optimizer", d)
    assert changes == {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}
    offloaded_all = diagnose(problem, replace(train, optimizer_cpu_offload=True))
    assert not RULES["precision_aware_optimizer"].propose(offloaded_all)  # no state left on the GPU to shrink
    lean, notes = _judged(problem, d, changes)
    assert d.peak_gib - lean.peak_gib == pytest.approx(d.projection.memory.peak.parts["optimizer"] / 3 / 2**30)
    assert any(n.startswith("NUMERICS CHANGE") for n in notes)
    found = _fired("activation_offload", d)
    for _, changes in found:
        moved, _ = _judged(problem, d, changes)
        assert moved.projection.memory.peak.parts["activations"] < d.projection.memory.peak.parts["activations"]
    modules = _fired("recompute_modules", d)
    assert [c["recompute_modules"] for _, c in modules][-1] == ("layernorm", "mlp")
    for _, changes in modules:
        _judged(problem, d, changes)


def test_near_the_limit_savers_pay_for_less_recompute() -> None:
    problem, train = _problem("llama3.1-8b", 8, seq=8192, mbs=1, gbs=8, dist_opt=True, recompute="full")
    d = diagnose(problem, train)
    memory = d.projection.memory  # the same job on a GPU whose usable HBM leaves 5% free at this peak
    capacity = memory.peak.total_bytes / 0.95 / (1 - memory.headroom)
    near = replace(d, projection=replace(d.projection, memory=replace(memory, capacity_bytes=capacity)))
    assert near.fits and near.headroom_share < 0.1
    for name in ("optimizer_offload", "activation_offload", "precision_aware_optimizer"):
        found = _fired(name, near)
        paid = [h for h, c in found if c.get("recompute_granularity") in ("selective", "none")]
        assert paid and all("recomputation is" in h for h in paid), name  # it reads the recompute share
        for _, changes in found:
            _judged(problem, d, changes)


def test_partial_recompute(mixtral_recipe: Path) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    d = diagnose(problem, start.train)
    assert start.train.recompute_granularity == "full" and d.fits
    found = _fired("recompute_modules", d)
    assert found[0][1] == {"recompute_granularity": "selective", "recompute_modules": ("layernorm", "moe_act")}
    for hypothesis, changes in found:
        assert "full recomputation is" in hypothesis
        lighter, _ = _judged(problem, d, changes)
        assert lighter.share(P.RECOMPUTE) < d.share(P.RECOMPUTE)
    problem, train = _problem("llama3.1-8b", 8, seq=4096, mbs=1, gbs=8, dist_opt=True, recompute="full",
                              recompute_method="uniform", recompute_num_layers=4)  # fmt: skip
    uniform = diagnose(problem, train)  # every layer recomputed, in runs of 4
    found = _fired("recompute_block", uniform)
    assert [c["recompute_num_layers"] for _, c in found] == [31, 16]
    for _, changes in found:
        assert changes["recompute_method"] == "block"
        block, _ = _judged(problem, uniform, changes)
        assert block.step_time_s < uniform.step_time_s
    assert not any("recompute_num_layers" in c for _, c in RULES["recompute_less"].propose(uniform))
    _, notes = apply_changes(uniform.model, uniform.system, uniform.train, {"recompute": "none"})
    assert any("recompute_method back to block" in n for n in notes)  # the validator refuses uniform without full


def test_recompute_by_layer_fills_each_stage(formats_data: Path) -> None:
    """DeepSeek-V3's Megatron recipe recomputes 2 layers on each of its 16 stages; the later stages hold fewer
    micro-batches in flight, so recompute by layer index keeps more of their activations."""
    problem, start = recipe_start(formats_data / "megatron/deepseek_v3_args.txt", gpu="h100-sxm5-80gb", num_gpus=1024)
    d = diagnose(problem, start.train)
    assert (start.train.pp, start.train.recompute_num_layers) == (16, 2)
    found = _fired("recompute_layers", d)
    for hypothesis, changes in found:
        assert "layers per stage" in hypothesis and len(changes["recompute_layer_ids"]) < 16 * 2
        by_layer, _ = _judged(problem, d, changes)
        assert by_layer.train.recompute_layer_ids == changes["recompute_layer_ids"]
        assert by_layer.share(P.RECOMPUTE) < d.share(P.RECOMPUTE)
    fills, _ = _judged(problem, d, found[0][1])
    assert fills.fits and fills.step_time_s < d.step_time_s and fills.peak_gib > d.peak_gib


def test_agent_keeps_a_cuda_graph_step_when_launch_bound() -> None:
    problem, train = host_bound()
    run = run_agent(problem, [StartPoint("launch bound", train)], AgentOptions(budget=30))
    assert any(s.source == "cuda_graphs" for s in run.path), [(s.source, s.reason) for s in run.steps]
    check_log_structure("host bound", run)
    check_kept_steps("host bound", run, problem)
    assert run.best_train.cuda_graph_scope != "none"


def test_agent_keeps_an_offload_step_when_memory_bound() -> None:
    problem, train = memory_bound()
    run = run_agent(problem, [StartPoint("memory bound", train)], AgentOptions(budget=30))
    first = run.path[0]
    assert first.source in ("optimizer_offload", "activation_offload", "precision_aware_optimizer"), first
    assert first.reason.startswith("fits")
    check_log_structure("memory bound", run)
    check_kept_steps("memory bound", run, problem)


def test_rules_subset_runs_the_knob_rules_alone() -> None:
    problem, train = host_bound()
    run = run_agent(problem, [StartPoint("x", train)], proposer=RulesProposer(["cuda_graphs"]))
    assert [s.source for s in run.path] == ["cuda_graphs"]
