"""`cost.compute.OpClock`: one clock shared by a block's ops (its peaks read once per precision) times each op as a
clock of its own does (issue 35), for every kind of compute op and mixed GEMM precisions."""

from __future__ import annotations

import pytest

from paraplan.cost.calibration import at_scale, calibration_for
from paraplan.cost.compute import OpClock
from paraplan.graph import layers as L
from paraplan.graph.backward import backward_ops
from paraplan.graph.kinds import layer_kind
from paraplan.graph.ops import OpKind
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

CASES = [
    ("llama3.1-8b", "h100-sxm5-80gb", "dense", {"tp": 2, "precision": "fp8"}),  # FP8 GEMMs beside 16-bit attention
    ("gpt3-175b", "a100-sxm4-80gb", "dense", {"tp": 8, "attention_backend": "unfused"}),  # unfused: batched GEMMs
    ("mixtral-8x7b", "h100-sxm5-80gb", "moe", {"tp": 2, "ep": 4}),  # grouped expert GEMMs
    ("nemotron-h-8b", "h100-sxm5-80gb", "mamba", {"tp": 1}),  # a chunked scan
]


@pytest.mark.parametrize(("model_name", "gpu", "kind", "knobs"), CASES)
def test_shared_clock_times_each_op_as_its_own_clock(model_name: str, gpu: str, kind: str, knobs: dict) -> None:
    model = model_preset(model_name)
    system = system_preset(gpu, 64)
    train = TrainingSpec().with_values(mbs=1, seq=4096, gbs=64, **knobs)
    forward = layer_kind(kind).ops(model, L.Shard.of(train))
    ops = [b for op in forward for b in (op, *backward_ops(op)) if b.kind is not OpKind.COMM]
    assert ops
    for cal in (calibration_for(gpu, "megatron-lm"), at_scale(calibration_for(gpu, "megatron-lm"), 4096)):
        shared = OpClock(system.gpu, cal)
        assert [shared(op) for op in ops] == [OpClock(system.gpu, cal)(op) for op in ops]
        assert all(t > 0 or op.bytes_moved <= 0 for op, t in zip(ops, map(shared, ops), strict=True))
