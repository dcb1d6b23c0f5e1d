import pytest

from paraplan.specs.presets import model_preset, system_preset
from paraplan.tune.candidate import TuneProblem
from paraplan.tune.space import SpaceLimits, parse_constraints
from paraplan.tune.tuner import TuneOptions, TuneResult, tune


@pytest.fixture(scope="session")
def dense_problem() -> TuneProblem:
    """llama3.1-8b on 8 H100, gbs 16, seq 4096: about 1,400 structures, a second of search."""
    return TuneProblem(
        model_preset("llama3.1-8b"),
        (system_preset("h100-sxm5-80gb", 8),),
        16,
        4096,
        model_ref="llama3.1-8b",
        gpu_ref="h100-sxm5-80gb",
    )


@pytest.fixture(scope="session")
def dense_limits() -> SpaceLimits:
    return parse_constraints([], {"pp": 4, "cp": 2, "mbs": 4})


@pytest.fixture(scope="session")
def dense_serial_top5(dense_problem: TuneProblem, dense_limits: SpaceLimits) -> TuneResult:
    """The serial exhaustive search of the dense problem (top 5, no seed planner): the reference the pooled runs
    of tests/tune/test_search.py and test_workers.py must reproduce (computed once, read only)."""
    return tune(dense_problem, dense_limits, TuneOptions(executor="serial", top_k=5, seed_planner=False))


@pytest.fixture(scope="session")
def moe_problem() -> TuneProblem:
    return TuneProblem(model_preset("mixtral-8x7b"), (system_preset("h100-sxm5-80gb", 16),), 32, 2048)


@pytest.fixture(scope="session")
def moe_limits() -> SpaceLimits:
    return parse_constraints([], {"pp": 2, "cp": 1, "mbs": 2})
