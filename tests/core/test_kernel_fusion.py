"""Eager PyTorch against fused kernels (`TrainingSpec.kernel_fusion`, `paraplan.graph.kernels`)."""

from __future__ import annotations

import pytest

import paraplan
from paraplan.graph import layers as L
from paraplan.graph.backward import backward_ops
from paraplan.graph.kernels import EAGER_PASSES, FUSED_PASSES, SPLIT_GRAD_PASSES
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec
from paraplan.specs.training import TrainingSpec

MODEL = ModelSpec(
    name="t", num_layers=2, hidden_size=512, ffn_hidden_size=1408, num_attention_heads=8, num_query_groups=2,
    vocab_size=1024,
)  # fmt: skip


def layer_ops(fused: bool) -> dict[str, Op]:
    """One Llama-style layer's forward ops by name (tests/cost/test_profile.py uses them too)."""
    shard = L.Shard.of(TrainingSpec(micro_batch_size=2, global_batch_size=2, seq_length=128, kernel_fusion=fused))
    return {op.name: op for op in L.decoder_layer_ops(MODEL, shard, moe=False)}


def test_eager_ops_move_the_passes_of_their_kernels() -> None:
    fused, eager = layer_ops(True), layer_ops(False)
    assert eager["attn_norm"].bytes_moved == fused["attn_norm"].bytes_moved * EAGER_PASSES["rmsnorm"] / 2
    assert eager["rotary"].bytes_moved == fused["rotary"].bytes_moved * EAGER_PASSES["rotary"] / 2
    assert eager["mlp_act"].bytes_moved == pytest.approx(
        fused["mlp_act"].bytes_moved * EAGER_PASSES["swiglu"] / FUSED_PASSES["swiglu"]
    )
    assert eager["attn_residual"] == fused["attn_residual"]  # one kernel either way
    assert "qkv_split" not in fused and "mlp_up_split" not in fused


def test_split_gradients_cost_only_in_backward() -> None:
    eager = layer_ops(False)
    split = eager["qkv_split"]
    assert split.bytes_moved == 0.0 and split.host_ops == 0
    tokens, width = 2 * 128, (8 + 2 * 2) * 64
    (backward,) = backward_ops(split)
    assert backward.bytes_moved == SPLIT_GRAD_PASSES * 2 * tokens * width  # bf16 gradients, read and written
    assert backward.host_ops == 1  # one concatenation kernel
    from paraplan.cost.calibration import Calibration
    from paraplan.cost.compute import compute_time_s
    from paraplan.specs.presets import system_preset

    gpu = system_preset("h100-sxm5-80gb", 8).gpu
    assert compute_time_s(split, gpu, Calibration()) == 0.0  # a view: no kernel, no launch floor
    assert compute_time_s(backward, gpu, Calibration()) > Calibration().kernel_launch_s
    (act_backward,) = backward_ops(eager["mlp_act"])
    assert act_backward.bytes_moved == pytest.approx(1.5 * eager["mlp_act"].bytes_moved)


def test_eager_training_projects_slower_and_says_so() -> None:
    kwargs = dict(gpus=8, tp=1, dp=8, mbs=1, gbs=64, seq=4096)
    fused = paraplan.project("llama3.1-8b", "h100-sxm5-80gb", **kwargs)
    eager = paraplan.project("llama3.1-8b", "h100-sxm5-80gb", kernel_fusion=False, **kwargs)
    assert 1.03 < eager.step_time_s / fused.step_time_s < 1.30
    assert eager.to_dict()["config"]["kernel_fusion"] is False


def test_bias_dropout_add_is_one_kernel_when_fused() -> None:
    """A model with dropout: Megatron's fused bias-dropout-add reads the sublayer's output and the residual and writes
    the sum and the 1-byte mask (7 bytes per element in 16 bits); its backward reads the gradient and the mask, writes
    the sublayer's gradient and sums the residual stream's two gradients (11). Eager: a dropout kernel, then an add."""
    gpt = MODEL.with_overrides(dropout=True)
    shard = L.Shard.of(TrainingSpec(micro_batch_size=2, global_batch_size=2, seq_length=128))
    elems = 2 * 128 * 512
    fused = {op.name: op for op in L.decoder_layer_ops(gpt, shard, moe=False)}
    residual = fused["mlp_residual"]
    assert "mlp_residual_dropout" not in fused
    assert residual.bytes_moved == 7 * elems and residual.host_ops == 1
    (backward,) = backward_ops(residual)
    assert backward.bytes_moved == 11 * elems
    eager_shard = L.Shard.of(TrainingSpec(micro_batch_size=2, global_batch_size=2, seq_length=128, kernel_fusion=False))
    eager = {op.name: op for op in L.decoder_layer_ops(gpt, eager_shard, moe=False)}
    assert eager["mlp_residual_dropout"].bytes_moved + eager["mlp_residual"].bytes_moved == 10 * elems
