"""The tuner's memory pre-filter is the projection's memory model: the same verdict, to the byte, on every
candidate of a tuner's search space."""

import pytest

from paraplan.memory.activations import layer_modes
from paraplan.memory.model import states_floor_bytes
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check
from paraplan.tune.candidate import TuneProblem, to_training
from paraplan.tune.evaluate import Evaluator, evaluation_of
from paraplan.tune.legality import candidate_problems
from paraplan.tune.memfilter import GroupMemory, MemoryFilter, StageCache, estimate_peak_bytes
from paraplan.tune.space import SearchSpace, parse_constraints

FAST = ProjectionOptions(breakdown=False)

# (model, GPU count, gbs, seq, the space's limits): small tuner runs, every schedule and sharding the space holds
RUNS = {
    "llama3.1-8b x16": ("llama3.1-8b", 16, 64, 4096, {"mbs": 2}),
    "mixtral-8x7b x32": ("mixtral-8x7b", 32, 128, 4096, {"mbs": 1, "pp": 4, "cp": 1}),
    # torchtitan under PP: the memory of the schedule's worst moment (`memory.model.moment_peak`)
    "llama3.1-8b x16 torchtitan": ("llama3.1-8b", 16, 64, 4096, {"mbs": 1, "cp": 1}),
    # FP8 under megatron-core: TE's quantised weight copies, a state in the floor (`memory.model.state_bytes`)
    "llama3.1-8b x16 fp8": ("llama3.1-8b", 16, 64, 4096, {"mbs": 1, "cp": 1}),
}
BASES = {"torchtitan": TrainingSpec(framework="torchtitan"), "fp8": TrainingSpec(precision="fp8")}


def _candidates(problem: TuneProblem, space: SearchSpace):
    """Every legal candidate of the space (each structure with each recompute variant), as the tuner builds it (the
    stages shared by all structures, as the evaluator shares them)."""
    stages = StageCache(problem.model)
    for base in space.structures():
        base_train = to_training(problem, base)
        if candidate_problems(problem, base, base_train):
            continue
        system = problem.system(base.num_gpus)
        memory = GroupMemory(problem.model, system, base_train, stages)
        for c in space.recompute_chain(base):
            yield c, system, memory, to_training(problem, c)


# the MoE run projects ~1,000 candidates (~20 s): slow; the dense one stays in the default run
@pytest.mark.parametrize(
    "run", [pytest.param(r, marks=pytest.mark.slow) if r.startswith("mixtral") else r for r in RUNS]
)
def test_the_filter_and_the_projection_agree_on_every_candidate(run: str) -> None:
    model_name, gpus, gbs, seq, limits = RUNS[run]
    base = BASES.get(run.rsplit(" ", 1)[-1], TrainingSpec())
    problem = TuneProblem(model_preset(model_name), (system_preset("h100-sxm5-80gb", gpus),), gbs, seq, base)
    space = SearchSpace(problem, parse_constraints([], limits))
    memory_filter = MemoryFilter()
    checked = fitting = 0
    disagree = []
    for c, system, memory, train in _candidates(problem, space):
        projected = project_specs(problem.model, system, train, FAST).memory
        group_verdict = memory.fits(c.recompute, c.recompute_layers)  # the tuner's group path
        screen_verdict = memory_filter.admits(problem.model, system, check(problem.model, system, train))
        peak = memory.peak_bytes(c.recompute, c.recompute_layers)
        # every rank's every part, to the byte: the projection of a candidate that fits takes the filter's memory
        same = memory.memory(c.recompute, c.recompute_layers) == projected
        if not (same and group_verdict == screen_verdict == projected.fits and peak == projected.peak.total_bytes):
            disagree.append(f"{c}: filter {group_verdict}/{screen_verdict} {peak}, core {projected.fits}")
        checked += 1
        fitting += projected.fits
    print(f"{run}: {checked} candidates, {fitting} fit")
    assert not disagree, "\n".join(disagree[:10])
    assert checked > 300 and 0 < fitting < checked  # both verdicts occur


def test_the_evaluator_projects_only_what_fits() -> None:
    problem = TuneProblem(model_preset("llama3.1-70b"), (system_preset("h100-sxm5-80gb", 64),), 64, 8192)
    space = SearchSpace(problem, parse_constraints([], {"mbs": 1, "cp": 2}))
    evaluator = Evaluator(problem, space)
    evaluated = rejected = 0
    for base in list(space.structures())[:150]:
        for c in space.recompute_chain(base):
            evaluation, reason = evaluator.evaluate(c, "test")
            if evaluation is not None:
                evaluated += 1
                assert evaluation.fits, c
            elif reason.startswith("memory"):
                rejected += 1
    assert evaluated > 20 and rejected > 20


def _every_third_group(problem: TuneProblem, space: SearchSpace):
    """(structure, its GroupMemory) of every third legal structure of the space, the stages shared."""
    stages = StageCache(problem.model)
    for base in list(space.structures())[::3]:
        base_train = to_training(problem, base)
        if not candidate_problems(problem, base, base_train):
            yield base, GroupMemory(problem.model, problem.system(base.num_gpus), base_train, stages)


def test_a_structure_the_floor_rejects_has_no_variant_that_fits() -> None:
    """`GroupMemory.cannot_fit` rejects a structure by its ranks' floors (`memory.model.states_floor_bytes`): each
    floor is at most that rank's total under every recompute variant, and a rejected structure has no variant that
    fits."""
    problem = TuneProblem(model_preset("llama3.1-70b"), (system_preset("h100-sxm5-80gb", 64),), 64, 8192)
    space = SearchSpace(problem, parse_constraints([], {"mbs": 1}))
    rejected = kept = 0
    for base, memory in _every_third_group(problem, space):
        base_train = memory.train
        floors = states_floor_bytes(
            problem.model, memory.shard, base_train, memory._stage_footprints(layer_modes(base_train)), memory.holder
        )
        cannot = memory.cannot_fit()
        for mode, layers in space.recompute_options(base):
            result = memory.memory(mode, layers)
            assert not (cannot and result.fits), (base, mode, layers)
            assert all(f <= rank.total_bytes for f, rank in zip(floors, result.ranks, strict=True)), (base, mode)
        rejected += cannot
        kept += not cannot
    assert rejected > 5 and kept > 5  # both occur


@pytest.mark.parametrize("framework", ["megatron-lm", "torchtitan"])
def test_a_variant_known_over_does_not_fit(framework: str) -> None:
    """`GroupMemory.surely_over` (after `cannot_fit`) rejects a variant without its memory per rank: every variant it
    rejects does not fit by that memory, it decides most variants that do not fit, and `fits` is the memory's verdict
    either way; under torchtitan with PP (memory moments) it never decides."""
    problem = TuneProblem(
        model_preset("llama3.1-70b"),
        (system_preset("h100-sxm5-80gb", 64),),
        64,
        8192,
        TrainingSpec(framework=framework),
    )
    space = SearchSpace(problem, parse_constraints([], {"mbs": 1}))
    over = not_fitting = 0
    for base, memory in _every_third_group(problem, space):
        if memory.cannot_fit():
            continue
        for mode, layers in space.recompute_options(base):
            known = memory.surely_over(mode, layers)
            verdict = memory.fits(mode, layers)
            result = memory.memory(mode, layers)
            assert verdict == result.fits and not (known and result.fits), (base, mode, layers)
            assert not (known and framework == "torchtitan" and base.pp > 1)
            over += known
            not_fitting += not result.fits
    assert not_fitting > 5 and (over > not_fitting // 2 if framework == "megatron-lm" else over >= 0)


def test_estimate_is_the_projection_peak() -> None:
    problem = TuneProblem(model_preset("deepseek-v3"), (system_preset("h200-sxm-141gb", 512),), 512, 4096)
    space = SearchSpace(problem, parse_constraints([], {"mbs": 1, "cp": 1}))
    checked = 0
    for base in list(space.structures())[::97][:12]:
        base_train = to_training(problem, base)
        if candidate_problems(problem, base, base_train):
            continue
        system = problem.system(base.num_gpus)
        train = check(problem.model, system, base_train)
        projected = project_specs(problem.model, system, train, FAST)
        assert estimate_peak_bytes(problem.model, system, train) == projected.memory.peak.total_bytes
        checked += 1
    assert checked >= 3


def test_a_projection_given_the_filters_memory_is_the_one_computing_it() -> None:
    """The tuner's group path hands the filter's memory to the projection: the whole projection (repr) must be the
    one the core computes on its own, for every candidate that fits."""
    problem = TuneProblem(model_preset("mixtral-8x7b"), (system_preset("h100-sxm5-80gb", 32),), 128, 4096)
    space = SearchSpace(problem, parse_constraints([], {"mbs": 1, "cp": 1}))
    evaluator = Evaluator(problem, space)
    compared = 0
    for base in list(space.structures())[::7][:40]:
        base_train = to_training(problem, base)
        if candidate_problems(problem, base, base_train):
            continue
        system = problem.system(base.num_gpus)
        memory = GroupMemory(problem.model, system, base_train)
        for c in space.recompute_chain(base):
            if not memory.fits(c.recompute, c.recompute_layers):
                continue
            train = memory.train_for(c.recompute, c.recompute_layers)
            given = evaluator.project(c, train, memory.memory(c.recompute, c.recompute_layers))
            assert repr(given) == repr(evaluator.project(c, train)), c
            compared += 1
    assert compared > 20


def test_a_screened_candidate_is_projected_with_the_screens_memory() -> None:
    """`Evaluator.evaluate` (the seed planner's, candidate lists') hands the screen's memory to the projection: the
    same evaluation as the core's projection computing its memory itself."""
    problem = TuneProblem(model_preset("mixtral-8x7b"), (system_preset("h100-sxm5-80gb", 32),), 128, 4096)
    space = SearchSpace(problem, parse_constraints([], {"mbs": 1, "cp": 1}))
    evaluator = Evaluator(problem, space)
    compared = 0
    for base in list(space.structures())[::11][:30]:
        for c in space.recompute_chain(base):
            evaluation, _ = evaluator.evaluate(c, "test")
            if evaluation is None:
                continue
            system = problem.system(c.num_gpus)
            train = check(problem.model, system, to_training(problem, c))
            alone = evaluation_of(c, evaluator.project(c, train), "test")
            assert repr(evaluation) == repr(alone), c
            compared += 1
    assert compared > 10
