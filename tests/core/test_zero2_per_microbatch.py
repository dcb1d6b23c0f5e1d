"""ZeRO-2 (partitioned gradients, replicated parameters) reduce-scatters its gradients every micro-batch, in the
backward, not once per step: DeepSpeed's stage_1_and_2.py reduces gradient buckets in the backward hooks of each
micro-step (its engine's `no_sync` refuses ZeRO-2/3) and torch FSDP's SHARD_GRAD_OP reduce-scatters each backward
without `no_sync`. The updated parameters are all-gathered once per step, as under ZeRO-1."""

from __future__ import annotations

import pytest

from paraplan.api import project, resolve_model, resolve_system
from paraplan.cost.calibration import calibration_for
from paraplan.projection import _dp_times, group_placements
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check

COMMON = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=16, mbs=1, seq=4096)


def _dp(zero_stage: int, units: int) -> tuple[float, float, float, float]:
    model, system = resolve_model("llama3.1-8b"), resolve_system("h100-sxm5-80gb", 16)
    train = check(model, system, TrainingSpec(zero_stage=zero_stage, global_batch_size=64, seq_length=4096))
    cal = calibration_for(system.gpu.name, train.framework)
    return _dp_times(7e9, 0.0, train, system, cal, group_placements(train, system), units)


def test_zero2_moves_the_step_reduce_scatter_to_each_micro_batch() -> None:
    """One unit: ZeRO-2's per-micro-batch reduce-scatter is ZeRO-1's per-step one, its per-step all-gather the
    same; in more units the same bytes cost at least as much (each a collective's latency)."""
    grad1, gather1, fsdp_gather1, rs1 = _dp(1, 1)
    grad2, gather2, fsdp_gather2, rs2 = _dp(2, 1)
    assert (grad2, fsdp_gather2, rs1, fsdp_gather1) == (0.0, 0.0, 0.0, 0.0)
    assert rs2 == pytest.approx(grad1)
    assert gather2 == pytest.approx(gather1) and gather1 > 0
    assert _dp(2, 32)[3] >= rs2


def test_zero2_reduce_scatters_once_per_micro_batch() -> None:
    """The step's ZeRO-2 reduce-scatter total grows with the micro-batches (8 -> 8x one micro-batch's), its
    per-step all-gather does not; with gradient accumulation ZeRO-2 is slower than ZeRO-1 (the extra
    reduce-scatters), and the breakdown still adds up."""
    one = project(**COMMON, zero_stage=2, gbs=16)
    eight = project(**COMMON, zero_stage=2, gbs=128)
    assert eight.pipeline.comm_total_s["fsdp"] == pytest.approx(8 * one.pipeline.comm_total_s["fsdp"])
    assert eight.pipeline.comm_total_s["dp"] == pytest.approx(one.pipeline.comm_total_s["dp"])
    zero1 = project(**COMMON, zero_stage=1, gbs=128)
    assert zero1.pipeline.comm_total_s.get("fsdp", 0.0) == 0.0
    assert eight.step_time_s > zero1.step_time_s
    for p in (one, eight):
        assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s)
        for kind, exposed in p.pipeline.comm_exposed_s.items():
            assert exposed <= p.pipeline.comm_total_s[kind] * (1 + 1e-9)
