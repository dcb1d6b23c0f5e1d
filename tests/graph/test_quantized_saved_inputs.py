"""Transformer Engine's linears keep the input of a low-precision GEMM quantised for its weight gradient (FP8 1 byte
an element, MXFP8 1 + 1/32, NVFP4 0.5 + 1/16), not the 16-bit copy; the tensors other ops need stay 16-bit (the
norm's input, Q, K, V and the output a flash kernel reads back, the activation function's input). torchtitan's float8
keeps the high-precision input."""

from __future__ import annotations

import pytest

from paraplan.api import memory
from paraplan.graph import layers as L
from paraplan.specs.presets import model_preset
from paraplan.specs.training import TrainingSpec

MODEL = model_preset("llama3.1-8b")
TOKENS = 4096


def _layer_saved(precision: str, framework: str = "megatron-lm", **training: object) -> float:
    train = TrainingSpec(seq_length=TOKENS, precision=precision, framework=framework, **training)
    ops = L.decoder_layer_ops(MODEL, L.Shard.of(train), moe=False)
    return sum(op.saved_bytes for op in ops)


@pytest.mark.parametrize(("precision", "element_bytes"), [("fp8_cs", 1.0), ("mxfp8", 1 + 1 / 32), ("nvfp4", 0.5625)])
def test_gemm_inputs_are_kept_quantised_and_the_attention_output_in_16_bits(
    precision: str, element_bytes: float
) -> None:
    """Per token: the inputs of QKV (h), of the MLP's up-projection (h) and of its down-projection (ffn) shrink from
    2 bytes to the recipe's element; the output projection's input (h) is kept quantised beside the 16-bit output
    the flash kernel reads back."""
    h, ffn = MODEL.hidden_size, MODEL.ffn_hidden_size
    heads_width = MODEL.num_attention_heads * MODEL.head_dim
    expected = _layer_saved("bf16") - TOKENS * ((2 - element_bytes) * (2 * h + ffn) - element_bytes * heads_width)
    assert _layer_saved(precision) == pytest.approx(expected)


def test_under_tensor_and_sequence_parallelism_every_term_divides_by_tp() -> None:
    parallel = dict(tensor_model_parallel_size=4, sequence_parallel=True)
    assert _layer_saved("fp8_cs", **parallel) == pytest.approx(_layer_saved("fp8_cs") / 4, rel=1e-3)


def test_torchtitan_float8_keeps_the_16bit_inputs() -> None:
    assert _layer_saved("fp8", framework="torchtitan") == _layer_saved("bf16", framework="torchtitan")


def test_bf16_edge_layers_of_a_low_precision_run_keep_16bit_inputs() -> None:
    """`first_last_layers_bf16`: the first and the last layer run their linears in BF16 and keep 16-bit inputs."""
    common = dict(gpus=1, mbs=1, gbs=1, seq=TOKENS, precision="fp8_cs", recompute_granularity="none")

    def activations(**extra: object) -> float:
        return memory("llama3.1-8b", "b200", **common, **extra).peak.parts["activations"]

    edges = activations(first_last_layers_bf16=True, num_layers_at_start_in_bf16=1, num_layers_at_end_in_bf16=1)
    per_layer = _layer_saved("bf16") - _layer_saved("fp8_cs")
    assert edges - activations() == pytest.approx(2 * per_layer)
