"""The breakdown by layer kind: one row per kind the model has, shares that add up, and the blocks' sum equal to the
projection's model FLOPs."""

from __future__ import annotations

import pytest

from paraplan.by_kind import kind_costs
from paraplan.projection import project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec


def test_breakdown_by_kind_of_a_hybrid_model() -> None:
    model, system = model_preset("nemotron-h-8b"), system_preset("h100-sxm5-80gb", 64)
    train = TrainingSpec().with_values(tp=2, sp=True, gbs=256, seq=8192)
    rows = {row.kind: row for row in kind_costs(model, system, train)}
    assert set(rows) == {"embedding", "head", "mamba", "attention", "mlp"}
    assert (rows["mamba"].blocks, rows["attention"].blocks, rows["mlp"].blocks) == (24, 4, 24)
    assert sum(row.compute_share for row in rows.values()) == pytest.approx(1.0)
    assert rows["mlp"].forward_s > rows["mamba"].forward_s > rows["attention"].forward_s
    # the blocks' forward FLOPs add up to the projection's model FLOPs (x3 for forward and backward)
    projection = project_specs(model, system, train)
    per_gpu = sum(row.blocks * row.forward_tflop for row in rows.values()) * 1e12 * 3 * 2  # tp=2
    micro_batches = train.gbs // train.mbs
    assert per_gpu * micro_batches == pytest.approx(projection.model_flops_per_step, rel=1e-9)
