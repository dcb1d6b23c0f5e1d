"""gpt-oss's eager kernels under megatron-core: YaRN RoPE outside TE's fused kernel, the GLU clamp in front of the
fused activation, and the experts' output bias added per expert (`graph.layers`)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from paraplan.graph import layers as L
from paraplan.graph.kernels import passes
from paraplan.memory.activations import recomputed_ops, saved_bytes
from paraplan.specs.presets import model_preset
from paraplan.specs.training import TrainingSpec

OSS = model_preset("gpt-oss-120b")
TRAIN = TrainingSpec().with_values(mbs=1, seq=4096, ep=8, etp=1, framework="nemo-megatron")


def _ops(model=OSS, train=TRAIN) -> dict[str, L.Op]:
    return {op.name: op for op in L.decoder_layer_ops(model, L.Shard.of(train), moe=True)}


def test_yarn_concentration_takes_rope_out_of_the_fused_kernel() -> None:
    assert OSS.rope_concentration == pytest.approx(0.1 * math.log(32) + 1)
    shard = L.Shard.of(TRAIN)
    elems = shard.tokens * (64 + 8) * 64  # query and key heads x head dim
    assert _ops()["rotary"].bytes_moved == passes("rotary", False) * 2 * elems
    plain = replace(OSS, yarn_rotary_scaling_factor=0.0)
    assert plain.rope_concentration == 1.0
    assert _ops(plain)["rotary"].bytes_moved == passes("rotary", True) * 2 * elems
    # a trainer outside megatron-core is not on that code path
    assert (
        _ops(train=TRAIN.with_values(framework="torchtitan"))["rotary"].bytes_moved
        == passes("rotary", True) * 2 * elems
    )


def test_clamp_and_expert_bias_cost_what_their_passes_move() -> None:
    ops = _ops()
    routed = 4096 * 4  # balanced: every token's top-4 copies stay on the ep group
    up_elems = routed * 2 * 2880  # the up-projection's output: gate and linear halves
    clamp = ops["expert_act_clamp"]
    assert clamp.bytes_moved == 4 * 2 * up_elems  # two half clamps and the concatenation, read and write
    assert clamp.saved_bytes == 2 * up_elems  # the clamps keep their input
    assert clamp.backward_bytes == (5 * 2 + 2) * up_elems
    bias = ops["expert_bias"]
    assert bias.bytes_moved == 6 * 2 * routed * 2880 and bias.backward_bytes == 8 * 2 * routed * 2880
    assert bias.host_ops == 2 * (128 // 8) + 1  # two kernels per local expert and the concatenation
    names = list(ops)
    assert names.index("expert_up") < names.index("expert_act_clamp") < names.index("expert_act")
    assert names.index("expert_down") < names.index("expert_bias") < names.index("unpermute")


def test_models_without_them_get_none() -> None:
    plain = replace(OSS, activation_func_clamp_value=0.0, moe_expert_linear_bias=False)
    assert not {"expert_act_clamp", "expert_bias"} & set(_ops(plain))
    assert not {"expert_act_clamp", "expert_bias"} & set(_ops(model_preset("qwen3-30b-a3b")))


def test_moe_act_recompute_keeps_the_up_projection_output_once() -> None:
    """megatron-core checkpoints the whole activation (clamps, concatenation, fused GLU) keeping its input: the
    clamped copy is not kept and the clamp is redone."""
    forward = list(_ops().values())
    clamp, act = (next(op for op in forward if op.name == n) for n in ("expert_act_clamp", "expert_act"))
    down = next(op for op in forward if op.name == "expert_down")
    kept_none = saved_bytes(forward, "none", 0.0)
    kept_moe_act = saved_bytes(forward, "selective:moe_act", 0.0)
    assert kept_none - kept_moe_act == act.saved_bytes + down.saved_bytes
    assert {op.name for op in recomputed_ops(forward, "selective:moe_act")} == {"expert_act_clamp", "expert_act"}
    assert clamp.saved_bytes == act.saved_bytes
