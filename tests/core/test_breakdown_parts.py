"""The breakdown's parts are named once (`BreakdownPart`), keep their JSON keys, and sum to the step time with the
pipeline bubble defined as the rest of the step."""

from __future__ import annotations

import json

import pytest

from paraplan.geo.geosim import GeoBreakdownPart
from paraplan.projection import project_specs
from paraplan.result import BreakdownPart
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

KEYS = (
    "forward_compute", "backward_compute", "recompute", "host_launch_bound", "comm_interference", "tp_comm_exposed",
    "cp_comm_exposed", "ep_comm_exposed", "pp_p2p_exposed", "fsdp_exposed", "dp_param_gather_wait", "pipeline_bubble",
    "dp_grad_reduce_exposed", "optimizer", "dp_param_gather_exposed", "framework_overhead", "straggler_wait",
)  # fmt: skip


def test_the_enumeration_keeps_the_json_keys_in_the_breakdowns_order() -> None:
    assert tuple(BreakdownPart) == KEYS
    docs = [part.__doc__ for part in BreakdownPart]
    assert len(set(docs)) == len(docs) and BreakdownPart.__doc__ not in docs  # each part says what it holds
    assert BreakdownPart.comm_exposed("tp") is BreakdownPart.TP_COMM_EXPOSED
    assert BreakdownPart.comm_exposed("etp") == "etp_comm_exposed"  # a kind the simulator passes through
    assert set(GeoBreakdownPart) >= {"forward", "pipeline_bubble_and_wan_wait", "framework_overhead"}


@pytest.mark.parametrize(
    "values",
    [
        dict(tp=2, gbs=64, seq=2048),
        dict(tp=2, pp=4, vpp=4, gbs=64, seq=2048, pipeline_schedule="interleaved", sequence_parallel=True),
        dict(pp=4, gbs=32, seq=2048, pipeline_schedule="zb-h1", recompute_granularity="full"),
        dict(gbs=32, seq=2048, fsdp=True),
    ],
)
def test_every_part_is_named_and_the_parts_sum_to_the_step(values: dict) -> None:
    train = TrainingSpec().with_values(**values)
    result = project_specs(model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", 16), train)
    breakdown = result.breakdown
    assert all(isinstance(part, BreakdownPart) for part in breakdown)
    assert list(breakdown) == [part for part in BreakdownPart if part in breakdown]  # the enumeration's order
    # the bubble is the rest of the step: the sum holds to rounding, and the bubble is no rounding sink
    assert sum(breakdown.values()) == pytest.approx(result.step_time_s, rel=1e-14)
    assert breakdown[BreakdownPart.PIPELINE_BUBBLE] >= -1e-12 * result.step_time_s
    assert set(json.loads(json.dumps(result.to_dict()))["breakdown"]) == {str(part) for part in breakdown}
