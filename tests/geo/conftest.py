"""Shared fixtures: the shipped example configs, planned once per session."""

from pathlib import Path

import pytest
from geo_paths import EXAMPLES, TINY, TRACES

from paraplan.geo import load_geo_config, parse_geo_config, plan_geo


@pytest.fixture(scope="session")
def two_dc_report():
    """examples/geo/two-datacenters.yaml: Llama 3.1 70B, 2 x 256 H100, 200 Gb/s, RTT 30 ms, 16 MiB windows."""
    return plan_geo(load_geo_config(EXAMPLES / "two-datacenters.yaml"))


@pytest.fixture(scope="session")
def tiny_report():
    return plan_geo(load_geo_config(TINY))


@pytest.fixture
def traces() -> Path:
    if not (TRACES / "AzureLLMInferenceTrace_conv.csv").exists():
        pytest.skip(f"Azure inference traces not found under {TRACES} (set PARAPLAN_SHARED)")
    return TRACES


@pytest.fixture
def config_with():
    """A config file with some top-level sections replaced (to trim what a test does not need)."""
    import yaml

    def load(path: Path, **sections):
        data = yaml.safe_load(path.read_text())
        data.update(sections)
        return parse_geo_config(data, str(path))

    return load
