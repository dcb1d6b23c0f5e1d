import random

from paraplan.errors import ConfigError
from paraplan.projection import project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.validate import check
from paraplan.tune.candidate import TuneProblem, to_training
from paraplan.tune.memfilter import MemoryFilter, estimate_peak_bytes
from paraplan.tune.space import SearchSpace

TOLERANCE = 0.02  # the estimate tracks the core's memory model; it may drift a little as the core evolves


def _sample(problem: TuneProblem, n: int, seed: int = 0):
    space = SearchSpace(problem)
    rng = random.Random(seed)
    structures = list(space.structures())
    for base in rng.sample(structures, min(n, len(structures))):
        for c in space.recompute_chain(base):
            train = to_training(problem, c)
            system = problem.system(c.num_gpus)
            try:
                train = check(problem.model, system, train)
            except ConfigError:
                continue
            yield system, train


def test_estimate_tracks_the_projection_memory() -> None:
    problems = [
        TuneProblem(model_preset("llama3.1-70b"), (system_preset("h100-sxm5-80gb", 256),), 256, 8192),
        TuneProblem(model_preset("mixtral-8x7b"), (system_preset("h100-sxm5-80gb", 64),), 256, 4096),
        TuneProblem(model_preset("deepseek-v3"), (system_preset("h200-sxm-141gb", 512),), 512, 4096),
    ]
    worst, checked = 0.0, 0
    for problem in problems:
        for system, train in _sample(problem, 60):
            actual = project_specs(problem.model, system, train).memory.peak.total_bytes
            estimate = estimate_peak_bytes(problem.model, system, train)
            worst = max(worst, abs(estimate / actual - 1))
            checked += 1
    print(f"memory pre-filter: {checked} configurations, worst relative error {worst:.4f}")
    assert checked > 300
    assert worst < TOLERANCE


def test_filter_never_rejects_what_fits(dense_problem) -> None:
    memory_filter = MemoryFilter()
    rejected_fitting = rejected = 0
    problem = TuneProblem(model_preset("llama3.1-70b"), (system_preset("h100-sxm5-80gb", 64),), 64, 8192)
    for system, train in _sample(problem, 120, seed=3):
        if memory_filter.admits(problem.model, system, train):
            continue
        rejected += 1
        rejected_fitting += project_specs(problem.model, system, train).memory.fits
    assert rejected > 50
    assert rejected_fitting == 0
