import random

import pytest

from paraplan.errors import ConfigError
from paraplan.projection import project_specs
from paraplan.specs.validate import layout_problems
from paraplan.tune.candidate import from_training, to_training
from paraplan.tune.space import SearchSpace, parse_constraints


def test_constraints_parse_and_restrict(dense_problem) -> None:
    limits = parse_constraints(["tp=2", "recompute=none,full:2", "sharding=zero1,fsdp", "sp=true"], {"pp": 2})
    space = SearchSpace(dense_problem, limits)
    structures = list(space.structures())
    assert structures
    assert {c.tp for c in structures} == {2}
    assert max(c.pp for c in structures) <= 2
    assert {c.sharding for c in structures} == {"dist_opt", "fsdp"}
    assert all(c.sp for c in structures)
    options = space.recompute_options(structures[0])
    assert options == [("none", None), ("full", 2)]


def test_bad_constraints_are_one_line_each() -> None:
    with pytest.raises(ConfigError) as err:
        parse_constraints(["tp=abc", "colour=red", "novalue", "recompute=partial"], {"pp": 0})
    problems = err.value.problems
    assert len(problems) == 5
    assert any("tp" in p and "abc" in p for p in problems)
    assert any("colour" in p for p in problems)
    assert any("--max-pp" in p for p in problems)


def test_space_covers_every_axis(moe_problem, moe_limits) -> None:
    structures = list(SearchSpace(moe_problem, moe_limits).structures())
    assert {c.schedule for c in structures} >= {"1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev", "dualpipe"}
    assert {c.sharding for c in structures} == {"dist_opt", "zero2", "fsdp"}  # ddp only when asked for
    assert len({c.ep for c in structures}) > 2 and len({c.etp for c in structures}) > 1
    assert {c.sp for c in structures if c.tp > 1} == {True}  # plain TP only when asked for
    assert any(c.vpp > 1 for c in structures)


def test_candidate_round_trips_through_training_spec(dense_problem, dense_limits) -> None:
    space = SearchSpace(dense_problem, dense_limits)
    for base in list(space.structures())[::50]:
        for c in space.recompute_chain(base):
            assert from_training(dense_problem, to_training(dense_problem, c), c.num_gpus) == c


def test_overlap_flags_never_hurt(dense_problem, moe_problem) -> None:
    """The space searches these overlaps 'on' only: the core must agree that on is never slower nor bigger."""
    rng = random.Random(1)
    checked = 0
    for problem in (dense_problem, moe_problem):
        space = SearchSpace(problem)
        structures = [c for c in space.structures() if c.tp > 1 or c.dp > 1]
        for c in rng.sample(structures, 60):
            system = problem.system(c.num_gpus)
            if layout_problems(problem.model, system, to_training(problem, c)):
                continue
            on = project_specs(problem.model, system, to_training(problem, c))
            for flag in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap"):
                if not getattr(c, flag):
                    continue
                off = project_specs(problem.model, system, to_training(problem, c.with_axes(**{flag: False})))
                # at most 1% slower: hidden collectives slow the compute beside them (overlap_interference) and
                # bucketed reduces pay a latency each; where a rank's gradients finish at the step's end (DualPipeV
                # holds the first and the last stage) little is left to hide them behind
                assert on.step_time_s <= off.step_time_s * 1.01, (c.describe(), flag)
                assert on.memory.peak_gib <= off.memory.peak_gib + 1e-9
                checked += 1
    assert checked > 50


def test_candidate_from_mapping(dense_problem) -> None:
    space = SearchSpace(dense_problem)
    c = space.candidate_from_mapping({"tp": 2, "pp": 2, "vpp": 2, "mbs": 1, "recompute": "full:1", "zero": "zero1"})
    assert (c.tp, c.pp, c.vpp, c.schedule, c.dp, c.recompute_layers, c.sharding) == (
        2,
        2,
        2,
        "interleaved",
        2,
        1,
        "dist_opt",
    )
    with pytest.raises(ConfigError):
        space.candidate_from_mapping({"tp": 2, "dp": 3})
    with pytest.raises(ConfigError):
        space.candidate_from_mapping({"warp": 9})


def test_distributed_optimizer_dominates_ddp(dense_problem, moe_problem) -> None:
    """DDP is left out of the default space: the core must agree it is never faster nor smaller."""
    rng = random.Random(2)
    checked = 0
    for problem in (dense_problem, moe_problem):
        space = SearchSpace(problem)
        for c in rng.sample([c for c in space.structures() if c.sharding == "dist_opt" and c.dp > 1], 40):
            system = problem.system(c.num_gpus)
            if layout_problems(problem.model, system, to_training(problem, c)):
                continue
            sharded = project_specs(problem.model, system, to_training(problem, c))
            ddp = project_specs(
                problem.model, system, to_training(problem, space.normalize(c.with_axes(sharding="ddp")))
            )
            assert sharded.step_time_s <= ddp.step_time_s * (1 + 1e-12), c.describe()
            assert sharded.memory.peak_gib <= ddp.memory.peak_gib + 1e-9
            checked += 1
    assert checked > 40
    with_ddp = SearchSpace(dense_problem, parse_constraints(["sharding=ddp,dist_opt"], {}))
    assert {c.sharding for c in with_ddp.structures()} == {"ddp", "dist_opt"}


def test_sequence_parallel_dominates_plain_tp(dense_problem, moe_problem) -> None:
    """Plain TP is left out of the default space: the core must agree SP (with its TP overlap) is never worse."""
    rng = random.Random(3)
    checked = 0
    for problem in (dense_problem, moe_problem):
        space = SearchSpace(problem)
        for c in rng.sample([c for c in space.structures() if c.tp > 1 and c.ep == 1], 40):
            system = problem.system(c.num_gpus)
            if layout_problems(problem.model, system, to_training(problem, c)):
                continue
            with_sp = project_specs(problem.model, system, to_training(problem, c))
            plain = project_specs(problem.model, system, to_training(problem, space.normalize(c.with_axes(sp=False))))
            assert with_sp.step_time_s <= plain.step_time_s * (1 + 1e-12), c.describe()
            assert with_sp.memory.peak_gib <= plain.memory.peak_gib + 1e-9
            checked += 1
    assert checked > 40
    both = SearchSpace(dense_problem, parse_constraints(["sp=true,false"], {}))
    assert {c.sp for c in both.structures() if c.tp > 1} == {True, False}
