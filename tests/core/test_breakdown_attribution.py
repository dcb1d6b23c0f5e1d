"""The named parts of the step: exposed communication is named apart, never counted as compute."""

import pytest

from paraplan.cost.calibration import calibration_for
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec


def test_slower_nvlink_grows_the_exposed_tp_communication_not_the_forward_compute() -> None:
    model, system = model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", 8)
    train = TrainingSpec(seq_length=8192, global_batch_size=32).with_values(tp=8)
    cal = calibration_for(system.gpu.name)
    fast, slow = (
        project_specs(model, system, train, ProjectionOptions(calibration=cal.with_values(scale_up_efficiency=e)))
        for e in (0.8, 0.4)
    )
    assert slow.breakdown["tp_comm_exposed"] > 1.5 * fast.breakdown["tp_comm_exposed"] > 0
    for part in ("forward_compute", "backward_compute"):
        assert slow.breakdown[part] == pytest.approx(fast.breakdown[part], rel=1e-6)
