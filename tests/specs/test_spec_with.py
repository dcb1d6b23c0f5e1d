"""`spec_with`: dataclasses.replace of a TrainingSpec, built positionally, must give the very same spec."""

import random
from dataclasses import fields, replace

import pytest

from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec, spec_with
from paraplan.tune.candidate import Candidate, TuneProblem
from paraplan.tune.legality import candidate_problems
from paraplan.tune.space import SearchSpace, parse_constraints


def test_every_field_is_an_init_field() -> None:
    """spec_with passes every field positionally: a field left out of __init__ would shift the others."""
    assert all(f.init for f in fields(TrainingSpec))


def test_spec_with_is_replace() -> None:
    rng = random.Random(35)
    base = TrainingSpec(tensor_model_parallel_size=4, pipeline_model_parallel_size=2, sequence_parallel=True)
    names = [f.name for f in fields(TrainingSpec)]
    for _ in range(200):
        changes = {name: getattr(TrainingSpec(), name) for name in rng.sample(names, rng.randint(0, 6))}
        changes |= {"recompute_granularity": rng.choice(["none", "selective", "full"]), "micro_batch_size": 2}
        built, expected = spec_with(base, changes), replace(base, **changes)
        assert built == expected and repr(built) == repr(expected)
    assert spec_with(base, {}) == base


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(TypeError, match="no field 'tp'"):
        spec_with(TrainingSpec(), {"tp": 2})


def test_candidates_built_positionally_are_the_replaced_ones_and_illegal_ones_are_refused() -> None:
    """The tuner's candidates (Candidate.of, with_axes, to_training, all by spec_with) are those dataclasses.replace
    builds, and the one validator still refuses what the space holds but the model cannot run."""
    problem = TuneProblem(model_preset("llama3.1-8b"), (system_preset("h100-sxm5-80gb", 16),), 64, 4096)
    space = SearchSpace(problem, parse_constraints([], {"mbs": 2}))
    for base in list(space.structures())[:300]:
        for c in space.recompute_chain(base):
            assert c.train == replace(
                base.train, recompute_granularity=c.recompute, recompute_num_layers=c.recompute_layers
            )
    bad = Candidate.of(
        16, precision="bf16", tp=3, cp=1, pp=1, vpp=1, schedule="1f1b", ep=1, etp=3, mbs=1, sp=False,
        sharding="dist_opt", recompute="none", recompute_layers=None, overlap_grad_reduce=False,
        overlap_param_gather=False, tp_comm_overlap=False, ep_overlap=False,
    )  # fmt: skip
    assert candidate_problems(problem, bad)  # tp 3 divides neither the heads nor the GPUs
