"""Which datacenters to use: a poorly connected one can make training slower (examples/geo/three-datacenters)."""

import pytest
from geo_paths import EXAMPLES

from paraplan.geo import plan_geo


@pytest.mark.slow  # several whole geo plans (~15 s)
def test_a_poorly_connected_datacenter_slows_training(config_with):
    cfg = config_with(
        EXAMPLES / "three-datacenters.yaml",
        placements={"flow_sweep": [64], "pipeline_sweep": [1], "simulate_top": 1},
    )
    report = plan_geo(cfg)
    steps = {frozenset(row.datacenters): row.step_time_s for row in report.selection}
    assert len(steps) == 7  # every subset is connected
    best = report.selection[0]
    assert set(best.datacenters) == {"virginia", "ohio"}
    assert steps[frozenset({"virginia", "ohio", "dublin"})] > 2 * best.step_time_s  # more GPUs, slower
    assert steps[frozenset({"virginia", "ohio"})] < steps[frozenset({"virginia"})]  # a good link does help
    assert report.atlas.plan.dc_order in (("virginia", "ohio"), ("ohio", "virginia"))
    assert set(report.atlas_all.best.plan.dc_order) == {"virginia", "ohio", "dublin"}
