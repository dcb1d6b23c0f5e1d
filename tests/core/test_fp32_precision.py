"""Plain fp32 training: a precision name whose activations, memory-bound ops and states are 4 bytes."""

import pytest

import paraplan
from paraplan.errors import ConfigError
from paraplan.graph import layers as L
from paraplan.graph.ops import OpKind
from paraplan.memory.model import state_bytes
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import system_preset
from paraplan.specs.training import PRECISIONS, TRAINING_PRECISIONS, TrainingSpec

LLAMA = ModelSpec(
    name="tiny-llama", num_layers=2, hidden_size=512, ffn_hidden_size=1408, num_attention_heads=8,
    num_query_groups=2, vocab_size=1024,
)  # fmt: skip


def _ops(precision: str) -> dict[str, object]:
    shard = L.Shard.of(TrainingSpec(micro_batch_size=4, seq_length=128, precision=precision))
    return {op.name: op for op in L.decoder_layer_ops(LLAMA, shard, moe=False) + L.head_ops(LLAMA, shard, 1024)}


def test_fp32_ops_move_twice_the_bytes_of_bf16_in_their_own_precision() -> None:
    fp32, bf16 = _ops("fp32"), _ops("bf16")
    assert L.Shard.of(TrainingSpec(precision="fp32")).act_bytes == 4
    assert L.Shard.of(TrainingSpec(precision="fp8")).act_bytes == 2  # FP8 GEMMs keep 16-bit activations
    for name in ("attn_norm", "rotary", "attn_residual", "mlp_act", "qkv", "mlp_up", "attn_core"):
        assert fp32[name].bytes_moved == pytest.approx(2 * bf16[name].bytes_moved), name
        if name != "attn_core":  # attention saves its fp32 log-sum-exp either way
            assert fp32[name].saved_bytes == pytest.approx(2 * bf16[name].saved_bytes), name
    for name, op in fp32.items():
        if op.kind is not OpKind.COMM:
            assert op.precision == "fp32", name
    assert {op.precision for op in bf16.values() if op.kind is OpKind.ELEMENTWISE} == {"bf16"}
    # cross-entropy: the logits in the activation precision, then fp32 twice (the convention of the profiles)
    logits = 4 * 128 * 1024
    # Megatron's eager loss (the default): fp32 logits need no cast; max, subtract, exp, sum and divide
    assert fp32["cross_entropy"].bytes_moved == pytest.approx(32 * logits)
    assert bf16["cross_entropy"].bytes_moved == pytest.approx((6 + 32) * logits)
    fused = L.head_ops(
        LLAMA, L.Shard.of(TrainingSpec(micro_batch_size=4, seq_length=128, cross_entropy_fusion=True)), 1024
    )
    assert next(op for op in fused if op.name == "cross_entropy").bytes_moved == pytest.approx((2 + 8) * logits)


def test_fp32_is_a_projection_precision_but_not_a_tuner_choice() -> None:
    assert "fp32" in TRAINING_PRECISIONS and "fp32" not in PRECISIONS
    kw = {"tp": 8, "mbs": 1, "gbs": 8, "seq": 4096}
    fp32 = paraplan.project("llama3.1-8b", "a100-sxm4-80gb", 8, precision="fp32", **kw)
    bf16 = paraplan.project("llama3.1-8b", "a100-sxm4-80gb", 8, precision="bf16", **kw)
    assert fp32.step_time_s > 1.05 * bf16.step_time_s  # same GEMM peak (fp16_tflops), twice the bytes
    parts = fp32.memory.ranks[0].parts
    assert parts["activations"] > bf16.memory.ranks[0].parts["activations"]
    with pytest.raises(ConfigError, match="fp32"):
        paraplan.project(LLAMA, "a100-sxm4-80gb", 1, mbs=1, gbs=1, seq=128, precision="fp64")


def test_fp32_states_and_gradient_reduction() -> None:
    train = TrainingSpec(precision="fp32", grad_reduce_in_fp32=False, data_parallel_size=2)
    states = state_bytes(1000.0, 0.0, train, 1, 0.0)
    # no separate master copy
    assert states == {"weights": 4000.0, "quantized_weight_copies": 0.0, "gradients": 4000.0, "optimizer": 8000.0}
    mixed = state_bytes(1000.0, 0.0, TrainingSpec(precision="bf16", grad_reduce_in_fp32=False), 1, 0.0)
    assert mixed == {"weights": 2000.0, "quantized_weight_copies": 0.0, "gradients": 2000.0, "optimizer": 12000.0}
    system = system_preset("a100-sxm4-80gb", 2)
    kw = {"dp": 2, "mbs": 4, "gbs": 8, "seq": 128, "grad_reduce_in_fp32": False}
    fp32 = paraplan.project(LLAMA, system, precision="fp32", **kw)
    bf16 = paraplan.project(LLAMA, system, precision="bf16", **kw)
    assert fp32.pipeline.comm_total_s["dp"] > 1.5 * bf16.pipeline.comm_total_s["dp"]  # 4-byte gradients


def test_sharded_data_parallel_moves_parameters_and_gradients_in_their_own_dtypes() -> None:
    from paraplan.cost.calibration import calibration_for
    from paraplan.projection import _dp_times, group_placements

    system = system_preset("a100-sxm4-80gb", 64)
    cal = calibration_for(system.gpu.name)

    def fsdp(**kw: object) -> tuple[float, float]:
        train = TrainingSpec(data_parallel_size=64, global_batch_size=64, zero_stage=3, fsdp=True, **kw)
        _, _, gather, reduce_scatter = _dp_times(1e9, 0.0, train, system, cal, group_placements(train, system))
        return gather, reduce_scatter

    gather, fp32_reduce = fsdp(precision="bf16", grad_reduce_in_fp32=True)
    _, bf16_reduce = fsdp(precision="bf16", grad_reduce_in_fp32=False)
    fp32_gather, _ = fsdp(precision="fp32")
    assert bf16_reduce < fp32_reduce  # torch FSDP reduce_dtype / DeepSpeed's fp16 regime: half the bytes
    assert bf16_reduce == pytest.approx(gather)  # same bytes, same ring: a 16-bit reduce-scatter costs an all-gather
    assert fp32_gather > gather  # fp32 training gathers 4-byte parameters
