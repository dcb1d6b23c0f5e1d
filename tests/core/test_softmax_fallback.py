"""Megatron's fused scale-mask-softmax and its eager fp32 fallback (`paraplan.graph.layers._softmax`,
`paraplan.graph.kernels`)."""

from __future__ import annotations

from collections import defaultdict

from paraplan.graph import layers as L
from paraplan.graph.backward import backward_ops
from paraplan.graph.kernels import fused_softmax_available
from paraplan.specs.model import ModelSpec
from paraplan.specs.training import TrainingSpec
from paraplan.validate.measured import read_rows
from paraplan.validate.report import validate_rows

GPT = ModelSpec(
    name="g", num_layers=2, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16, vocab_size=51200,
    activation="gelu", norm="layernorm", position="learned", attention_bias=True, dropout=True,
)  # fmt: skip


def softmax_op(tp: int, mbs: int, fused: bool = True):
    train = TrainingSpec().with_values(
        tp=tp, mbs=mbs, gbs=mbs, seq=1024, attention_backend="unfused", kernel_fusion=fused, dp=1
    )
    ops = {op.name: op for op in L.decoder_layer_ops(GPT, L.Shard.of(train), moe=False)}
    return ops["attn_softmax"]


def test_kernel_availability_follows_megatron() -> None:
    assert fused_softmax_available(attn_batches=4, seq_q=1024, seq_kv=1024)
    assert not fused_softmax_available(attn_batches=2, seq_q=1024, seq_kv=1024)  # b x np not a multiple of 4
    assert not fused_softmax_available(attn_batches=8, seq_q=8192, seq_kv=8192)  # sk > 4096
    assert not fused_softmax_available(attn_batches=8, seq_q=16, seq_kv=16)  # sk <= 16
    assert not fused_softmax_available(attn_batches=8, seq_q=1022, seq_kv=1022)  # not a multiple of 4


def test_fallback_is_the_eager_fp32_chain() -> None:
    elems = 1 * 2 * 1024 * 1024  # mbs 1, 16 heads / tp 8
    fallback = softmax_op(tp=8, mbs=1)
    assert fallback.host_ops == 5  # .float(), scale, masked_fill, softmax, .half()
    assert fallback.bytes_moved == 37 * elems
    assert fallback.saved_bytes == 4 * elems  # the fp32 softmax output
    (backward,) = backward_ops(fallback)
    assert backward.bytes_moved == 41 * elems
    fused = softmax_op(tp=8, mbs=2)  # b x np = 4: the fused kernel
    assert fused.host_ops == 1 and fused.bytes_moved == 2 * 2 * (2 * elems)
    assert softmax_op(tp=8, mbs=2, fused=False).host_ops == 5  # --no-masked-softmax-fusion


def test_vtrain_micro_batch_one_at_tp8_is_no_longer_an_outlier(public_csv) -> None:
    """vTrain's single-node GPTs have 16 heads: at tp 8 and micro-batch 1 Megatron-DeepSpeed cannot use the fused
    softmax. Without the fallback these cells were projected 28-31% too fast against 12-18% at micro-batch 2 and
    4; the gap between them is what the fallback has to explain."""
    rows = [r for r in read_rows(public_csv) if r["source"] == "vTrain_MICRO24_single" and r["tp"] == "8"]
    micro_batch_one = {x["id"] for x in rows if x["mbs"] == "1"}
    errors: dict[bool, list[float]] = defaultdict(list)
    for r in validate_rows(rows).rows:
        errors[r.id in micro_batch_one].append(r.error_pct)
    mean = {k: sum(v) / len(v) for k, v in errors.items()}
    print(mean)
    assert abs(mean[True] - mean[False]) < 8.0


def test_fp32_training_runs_the_eager_chain_without_casts() -> None:
    train = TrainingSpec().with_values(
        tp=1, mbs=4, gbs=4, seq=1024, attention_backend="unfused", precision="fp32", dp=1
    )
    op = {o.name: o for o in L.decoder_layer_ops(GPT, L.Shard.of(train), moe=False)}["attn_softmax"]
    elems = 4 * 16 * 1024 * 1024
    assert op.host_ops == 3 and op.bytes_moved == 25 * elems
    assert backward_ops(op)[0].bytes_moved == 29 * elems
