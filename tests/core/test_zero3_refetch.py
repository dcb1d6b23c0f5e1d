"""DeepSpeed ZeRO-3 under full recompute: the backward gathers again what the recomputed forward released."""

import pytest
from gpt_model import gpt

import paraplan
from paraplan.cost.block import refetched_params, weight_params
from paraplan.formats.chakra import export_chakra
from paraplan.formats.chakra_pb import read_trace
from paraplan.graph import layers as L
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check


def _layer_ops(model: ModelSpec) -> list:
    return L.decoder_layer_ops(model, L.Shard.of(TrainingSpec()), moe=False)


def test_weights_reused_within_the_distance_stay() -> None:
    ops = _layer_ops(gpt(12288))  # GPT-3 175B's layer: QKV 3h^2, out h^2, up 4h^2, down 4h^2
    h2 = 12288**2
    weights = [weight_params(op) for op in ops if weight_params(op)]
    assert weights == [3 * h2, h2, 4 * h2, 4 * h2]
    # down is used again at once; up after 2 x 4h^2 = 1.2e9 > 1e9 parameters: all but down are fetched again
    assert refetched_params(ops) == 8 * h2
    assert refetched_params(ops, max_reuse_params=1.3e9) == 4 * h2  # up stays too: only QKV and out go
    assert refetched_params(_layer_ops(gpt(2048))) == 0  # a small layer fits in the reuse distance
    assert refetched_params([]) == 0


def _fsdp_comm(framework: str, recompute: str) -> float:
    system = system_preset("a100-sxm4-80gb", 64)
    train = TrainingSpec(precision="fp16", framework=framework, zero_stage=3, grad_reduce_in_fp32=False).with_values(
        dp=64, mbs=1, gbs=64, seq=2048, recompute=recompute
    )
    return paraplan.project(gpt(12288), system, train=train).pipeline.comm_total_s["fsdp"]


def test_deepspeed_zero3_gathers_again_under_full_recompute_only() -> None:
    full, selective = _fsdp_comm("deepspeed", "full"), _fsdp_comm("deepspeed", "selective")
    # gather, gather, reduce-scatter (16-bit: equal cost) plus 2/3 of a gather for the layers (not the embedding)
    assert full / selective == pytest.approx((3 + 2 / 3) / 3, rel=0.03)
    assert full > selective
    # torch FSDP keeps what the recomputed forward gathered for the backward right after it
    assert _fsdp_comm("llm-foundry", "full") == pytest.approx(_fsdp_comm("llm-foundry", "selective"))


def test_chakra_trace_has_the_refetch_before_each_backward(tmp_path) -> None:
    system = system_preset("a100-sxm4-80gb", 8)
    model = gpt(8192, layers=2)
    train = TrainingSpec(precision="fp16", framework="deepspeed", zero_stage=3).with_values(
        dp=8, mbs=1, gbs=16, seq=256, recompute="full"
    )
    out = export_chakra(model, system, check(model, system, train), tmp_path, prefix="z3")
    names = [node.name for node in read_trace(out.paths[0])[1]]
    assert sum(".fsdp_refetch." in name for name in names) == 2  # one per backward (2 micro-batches)
    assert sum(".fsdp_gather." in name for name in names) == 4


def test_deepspeed_zero3_holds_its_kept_tail_not_two_whole_layers() -> None:
    """At the loss DeepSpeed ZeRO-3 holds the LM head (reused at once) and the modules before it whose backward
    comes within `stage3_max_reuse_distance` (1e9) parameters, plus the prefetch bucket (5e7); torch FSDP two
    layers. GPT-3 175B's layer (4 of them, vocabulary 1000 padded to 1024): the head (12.6M) stays, the last MLP down
    (4 h^2 = 604M) is 2 x 12.6M away: stays, the MLP up is 2 x 616M > 1e9 away: released."""
    from paraplan.cost.block import gathered_params
    from paraplan.graph.layers import Shard
    from paraplan.memory.model import zero3_live_params
    from paraplan.memory.zero3 import ZERO3_PREFETCH_PARAMS
    from paraplan.tune.memfilter import estimate_peak_bytes

    model, system = gpt(12288), system_preset("a100-sxm4-80gb", 64)
    h2 = 12288**2  # a layer holds 12 h^2 = 1.8e9 parameters

    def weights_bytes(framework: str) -> float:
        train = TrainingSpec(precision="fp16", framework=framework, zero_stage=3, grad_reduce_in_fp32=False)
        train = train.with_values(dp=64, mbs=1, gbs=64, seq=2048, recompute="full")
        projection = paraplan.project(model, system, train=train)
        assert estimate_peak_bytes(model, system, train) == pytest.approx(projection.memory.peak.total_bytes)
        return projection.memory.peak.parts["weights"]

    train = TrainingSpec(precision="fp16", zero_stage=3)
    head = 12288 * 1024
    assert zero3_live_params(model, Shard.of(train)) == head + 4 * h2 + ZERO3_PREFETCH_PARAMS
    assert gathered_params(train.with_values(framework="megatron-lm"), 12 * h2) == 24 * h2
    assert gathered_params(TrainingSpec(), 12 * h2) == 0.0  # parameters not sharded
    params = 12 * h2 * model.num_layers + 2 * head
    torch_fsdp, deepspeed = weights_bytes("megatron-lm"), weights_bytes("deepspeed")
    # torch FSDP: fp32 shards and the fp16 units; DeepSpeed: fp16 partitions (its fp32 ones are the optimizer's)
    assert torch_fsdp == pytest.approx(4 * params / 64 + 2 * 24 * h2, rel=1e-3)
    assert deepspeed == pytest.approx(2 * params / 64 + 2 * (head + 4 * h2 + ZERO3_PREFETCH_PARAMS), rel=1e-3)
