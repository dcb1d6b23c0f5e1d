"""torch FSDP2's compute-stream copies (`cost.fsdp_copies`): the all-gather's copy-out and the reduce-scatter's
copy-in, in closed form, only for FSDP2 frameworks, and in a projection where its collectives put them."""

from __future__ import annotations

import pytest

from paraplan.api import project
from paraplan.cost import fsdp_copies
from paraplan.cost.calibration import Calibration
from paraplan.cost.fsdp_copies import fsdp2_copies
from paraplan.graph.params import model_params
from paraplan.specs.presets import system_preset
from paraplan.specs.training import TrainingSpec

H100 = system_preset("h100-sxm5-80gb", 8).gpu
CAL = Calibration()


def test_copies_read_and_write_each_unit_once_per_collective() -> None:
    train = TrainingSpec(framework="torchtitan", fsdp=True, grad_reduce_in_fp32=True, data_parallel_size=8)
    params, units = 1e9, 32
    copies = fsdp2_copies(params, train, H100, CAL, units)
    bandwidth = H100.hbm_bytes_per_s * CAL.memory_efficiency
    # copy-out: read the gathered bf16 buffer, write the bf16 parameters
    assert copies.copy_out_s == pytest.approx(4 * params / bandwidth + units * CAL.kernel_launch_s)
    # copy-in: read the bf16 gradients, write the fp32 reduce-scatter input
    assert copies.copy_in_s == pytest.approx(6 * params / bandwidth + units * CAL.kernel_launch_s)
    bf16_reduce = fsdp2_copies(params, train.with_values(grad_reduce_in_fp32=False), H100, CAL, units)
    assert bf16_reduce.copy_in_s == pytest.approx(4 * params / bandwidth + units * CAL.kernel_launch_s)


@pytest.mark.parametrize(
    "values",
    [
        {"framework": "llm-foundry", "fsdp": True},  # FSDP1: the flat parameter's views, no copy
        {"framework": "megatron-lm", "fsdp": True},  # Megatron-FSDP: views of its buckets
        {"framework": "deepspeed", "zero_stage": 3},  # ZeRO-3: its bucket copy runs on its reduce stream
        {"framework": "torchtitan"},  # no sharded parameters or gradients: no FSDP collective
        {"framework": "torchtitan", "zero_stage": 1, "use_distributed_optimizer": True},
    ],
)
def test_no_copies_outside_fsdp2_sharding(values: dict) -> None:
    copies = fsdp2_copies(1e9, TrainingSpec(data_parallel_size=8, **values), H100, CAL, 32)
    assert copies.copy_out_s == copies.copy_in_s == 0.0


def test_projection_puts_the_copies_on_the_compute_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fully sharded, every micro-batch gathers before its forward and its backward and reduce-scatters after its
    backward: the forward grows by one copy-out a micro-batch, the backward by a copy-out and a copy-in."""
    args = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=8, seq=8192, mbs=1, gbs=16, framework="torchtitan")
    with_copies = project(**args, fsdp=True)
    # one stage holds every parameter (its norms and vocabulary padding aside: rel 1e-2)
    params = model_params(with_copies.model).total
    cal = with_copies.calibration
    assert isinstance(cal, Calibration)
    copies = fsdp2_copies(params, with_copies.train, with_copies.system.gpu, cal, 32)
    monkeypatch.setattr(fsdp_copies, "FSDP2_FRAMEWORKS", frozenset())
    without = project(**args, fsdp=True)
    microbatches = 16 // 8
    parts = {str(k.value): v for k, v in with_copies.breakdown.items()}
    base = {str(k.value): v for k, v in without.breakdown.items()}
    assert parts["forward_compute"] - base["forward_compute"] == pytest.approx(
        microbatches * copies.copy_out_s, rel=1e-2
    )
    assert parts["backward_compute"] - base["backward_compute"] == pytest.approx(
        microbatches * (copies.copy_out_s + copies.copy_in_s), rel=1e-2
    )
    assert with_copies.step_time_s > without.step_time_s
