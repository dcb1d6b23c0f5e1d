"""megatron-core's unfused attention keeps its baddbmm input in the global memory buffer for the run
(`memory.model.attention_score_buffer_bytes`): b x heads per TP rank x s x s 16-bit elements, once per GPU."""

from __future__ import annotations

import pytest

from paraplan.api import memory
from paraplan.memory.model import ALLOCATED_PARTS

ARGS = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=8, tp=2, mbs=2, gbs=8, seq=2048)


def test_unfused_megatron_attention_holds_one_layer_of_scores() -> None:
    parts = memory(**ARGS, attention_backend="unfused", framework="megatron-lm").peak.parts
    heads_per_rank = 32 // 2
    assert parts["attention_score_buffer"] == 2 * 2 * heads_per_rank * 2048 * 2048  # bf16, mbs 2


@pytest.mark.parametrize(
    "extra",
    [
        {"attention_backend": "flash", "framework": "megatron-lm"},  # flash kernels take no score buffer
        {"attention_backend": "unfused", "framework": "deepspeed"},  # not megatron-core's DotProductAttention
    ],
)
def test_no_score_buffer_elsewhere(extra: dict) -> None:
    assert memory(**ARGS, **extra).peak.parts["attention_score_buffer"] == 0.0


def test_the_buffer_is_allocated_memory() -> None:
    """Peak allocated (what `max_memory_allocated` reports) counts it: a tensor, not the allocator's cache."""
    assert "attention_score_buffer" in ALLOCATED_PARTS
    peak = memory(**ARGS, attention_backend="unfused", framework="megatron-lm").peak
    without = sum(v for k, v in peak.parts.items() if k in ALLOCATED_PARTS and k != "attention_score_buffer")
    assert peak.allocated_bytes == pytest.approx(without + peak.parts["attention_score_buffer"])
