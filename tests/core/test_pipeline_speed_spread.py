"""Chip-to-chip speed spread in a pipelined job: the steady state runs at the pace of the slowest stage (the one with
the job's slowest chip), the fill and drain at the chips' typical speed (step = sum of the stage times + (m - 1) x the
slowest's), so the spread costs a pipeline with few micro-batches less than running every stage at the slowest chip's
speed would."""

import pytest

from paraplan.cost.calibration import at_scale, calibration_for
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec


def _spread_share(pp: int, microbatches: int) -> float:
    """How much of the cost of running every stage at the slowest chip's speed the spread costs."""
    # 30 layers, the embedding and the loss: 4 layer slots per stage at pp 8
    model = model_preset("llama3.1-8b").with_overrides(num_layers=30)
    system = system_preset("h100-sxm5-80gb", 1024)
    dp = 1024 // pp
    train = TrainingSpec(seq_length=4096, micro_batch_size=1, global_batch_size=dp * microbatches)
    train = train.with_values(pp=pp, dp=dp, account_for_embedding_in_pipeline_split=True)
    train = train.with_values(account_for_loss_in_pipeline_split=True)
    typical = calibration_for(system.gpu.name).with_values(gpu_speed_cv=0.0, step_overhead_s=0.0)
    spread = typical.with_values(gpu_speed_cv=0.05)
    every_stage_slow = at_scale(spread, 1024)  # the slowest chip's speed everywhere (its own spread is 0)
    assert every_stage_slow.compute_slowdown > 1.1
    typical_s, spread_s, slow_s = (
        project_specs(model, system, train, ProjectionOptions(calibration=cal, breakdown=False)).step_time_s
        for cal in (typical, spread, every_stage_slow)
    )
    return (spread_s - typical_s) / (slow_s - typical_s)


def test_one_stage_runs_at_the_slowest_chips_pace() -> None:
    assert _spread_share(pp=1, microbatches=4) == pytest.approx(1.0)


def test_a_short_pipeline_pays_the_spread_in_its_steady_state_only() -> None:
    # 4 micro-batches through 8 stages: the slowest chip paces 4 of the 11 stage slots of the critical path (4/11 with
    # equal stages; the last stage, LM head and loss, is heavier here). Every stage at the slowest pace would be 1.
    assert _spread_share(pp=8, microbatches=4) == pytest.approx(4 / 11, abs=0.08)
    # many micro-batches: the steady state is nearly all of the step
    assert _spread_share(pp=8, microbatches=64) > 0.85
