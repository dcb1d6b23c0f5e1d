"""Attention's rate against head dim: FlashAttention-2 runs head dim 64 slower per FLOP than 128 (fitted on the
A100/GH200 samples); the Triton kernel behind ALiBi attention (llm-foundry's MPT) does not."""

from dataclasses import replace

import pytest

from paraplan.cost.calibration import calibration_for
from paraplan.cost.compute import compute_time_s
from paraplan.graph.ops import AttentionShape, Op, OpKind, Phase
from paraplan.specs.presets import system_preset


def _rate(head_dim: int, alibi: bool) -> float:
    """FLOPs per second of one causal attention forward at 16k tokens (compute-bound)."""
    heads = 2048 // head_dim
    shape = AttentionShape(batch=1, seq_q=16384, seq_kv=16384, heads=heads, kv_heads=heads, head_dim_qk=head_dim,
                           head_dim_v=head_dim)  # fmt: skip
    flops = 2.0 * heads * 16384 * 16384 * 2 * head_dim
    op = Op(name="attn_core", kind=OpKind.ATTENTION, phase=Phase.FORWARD, flops=flops, attention=shape,
            tags=frozenset({"alibi"}) if alibi else frozenset())  # fmt: skip
    gpu = replace(system_preset("a100-sxm4-80gb", 8).gpu, exp_tera_per_s=0.0)  # the tensor-core part alone
    return flops / compute_time_s(op, gpu, calibration_for("a100-sxm4-80gb", "llm-foundry"))


def test_flash_attention_is_slower_at_head_dim_64() -> None:
    assert _rate(64, alibi=False) / _rate(128, alibi=False) == pytest.approx(0.5**0.26, rel=0.01)


def test_triton_alibi_kernel_keeps_its_rate_at_head_dim_64() -> None:
    assert _rate(64, alibi=True) / _rate(128, alibi=True) == pytest.approx(1.0, rel=0.01)
    assert _rate(128, alibi=True) < _rate(128, alibi=False)  # and it is the slower kernel
