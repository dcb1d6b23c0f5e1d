"""GPT activation memory per layer equals Korthikanti et al. 2022 exactly."""

import pytest

from paraplan.graph.layers import ACT_BYTES, Shard, decoder_layer_ops
from paraplan.memory.activations import saved_bytes
from paraplan.specs.model import ModelSpec

s, b, h, a = 2048, 4, 6144, 48
GPT = ModelSpec(
    name="gpt", num_layers=1, hidden_size=h, ffn_hidden_size=4 * h, num_attention_heads=a, vocab_size=51200,
    activation="gelu", norm="layernorm", position="learned", dropout=True,
)  # fmt: skip


def layer_bytes(t: int, sp: bool, recompute: str) -> float:
    shard = Shard(batch=b, seq=s, seq_full=s, tp=t, sp=sp, cp=1, ep=1, etp=1, precision="fp16", flash=False)
    ops = decoder_layer_ops(GPT, shard, moe=False)
    return saved_bytes(ops, recompute, ACT_BYTES * s * b * h / (t if sp else 1))


def test_no_parallelism_no_recompute() -> None:
    assert layer_bytes(1, False, "none") == s * b * h * (34 + 5 * a * s / h)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_parallel(t: int) -> None:
    assert layer_bytes(t, False, "none") == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_and_sequence_parallel(t: int) -> None:
    assert layer_bytes(t, True, "none") == pytest.approx(s * b * h / t * (34 + 5 * a * s / h), rel=1e-12)


@pytest.mark.parametrize("t", [2, 8])
def test_selective_recompute_with_sequence_parallel(t: int) -> None:
    assert layer_bytes(t, True, "selective") == pytest.approx(34 * s * b * h / t, rel=1e-12)


def test_full_recompute() -> None:
    assert layer_bytes(1, False, "full") == 2 * s * b * h
    assert layer_bytes(8, False, "full") == 2 * s * b * h
