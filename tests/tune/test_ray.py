"""The Ray executor on a local Ray instance (CI installs ray for this test; skipped without it)."""

import pytest

from paraplan.tune.tuner import TuneOptions, tune

ray = pytest.importorskip("ray", reason="ray is not installed (the 'distributed' extra)")
pytestmark = pytest.mark.slow  # starts a local Ray instance (worker processes)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def test_ray_executor_finds_what_the_local_search_finds(local_ray, dense_problem, dense_limits) -> None:
    serial = tune(dense_problem, dense_limits, TuneOptions(executor="serial", top_k=3, seed_planner=False))
    spread = tune(dense_problem, dense_limits, TuneOptions(executor="ray", top_k=3, seed_planner=False))
    assert [e.candidate for e in spread.top] == [e.candidate for e in serial.top]
    assert spread.evaluated == serial.evaluated
