"""The named parts of the step: exposed communication is named apart, never counted as compute."""

import pytest

from paraplan.cost.calibration import calibration_for
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec


def test_slower_nvlink_grows_the_exposed_tp_communication_not_the_forward_compute() -> None:
    model, system = model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", 8)
    train = TrainingSpec(seq_length=8192, global_batch_size=32).with_values(tp=8)
    # without the interference of hidden collectives with compute, which slower NVLink rightly grows
    cal = calibration_for(system.gpu.name).with_values(overlap_interference=0.0)
    fast, slow = (
        project_specs(model, system, train, ProjectionOptions(calibration=cal.with_values(scale_up_efficiency=e)))
        for e in (0.8, 0.4)
    )
    assert slow.breakdown["tp_comm_exposed"] > 1.5 * fast.breakdown["tp_comm_exposed"] > 0
    for part in ("forward_compute", "backward_compute"):
        assert slow.breakdown[part] == pytest.approx(fast.breakdown[part], rel=1e-6)


def test_a_host_bound_recomputed_step_names_no_part_negative() -> None:
    """A small model at tp 8 with full recompute is host-bound in every phase: the recompute's host waits are
    reported once (inside "recompute"), so no part goes negative and the parts add up to the step (counted in
    "host_launch_bound" as well, they took the forward and backward compute to 0 here and the bubble of this pp 1
    job to -12% of the step; 48 of vTrain's single-node rows showed one of -2% to -7%)."""
    model = model_preset("llama3.1-8b").with_overrides(
        num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16, num_query_groups=16
    )
    system = system_preset("a100-sxm4-80gb", 8)
    train = TrainingSpec(seq_length=1024, global_batch_size=8, micro_batch_size=1, recompute_granularity="full")
    cal = calibration_for(system.gpu.name).with_values(host_launch_s=150e-6)
    result = project_specs(model, system, train.with_values(tp=8), ProjectionOptions(calibration=cal))
    parts = result.breakdown
    assert parts["host_launch_bound"] > 0 and parts["recompute"] > 0 and parts["forward_compute"] > 0
    assert min(parts.values()) >= -1e-9 * result.step_time_s
    assert sum(parts.values()) == pytest.approx(result.step_time_s, rel=1e-9)
