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


def test_deepspeed_zero3_holds_its_live_parameters_not_two_whole_layers() -> None:
    from paraplan.cost.block import ZERO3_MAX_LIVE_PARAMS, ZERO3_PREFETCH_PARAMS, gathered_params
    from paraplan.tune.memfilter import estimate_peak_bytes

    model, system = gpt(12288), system_preset("a100-sxm4-80gb", 64)
    h2 = 12288**2  # GPT-3 175B: a layer holds 12 h^2 = 1.8e9 parameters, its largest module (the MLP up) 4 h^2

    def weights_bytes(framework: str) -> tuple[float, float]:
        train = TrainingSpec(precision="fp16", framework=framework, zero_stage=3, grad_reduce_in_fp32=False)
        train = train.with_values(dp=64, mbs=1, gbs=64, seq=2048, recompute="full")
        projection = paraplan.project(model, system, train=train)
        assert estimate_peak_bytes(model, system, train) == pytest.approx(projection.memory.peak.total_bytes)
        return projection.memory.peak.parts["weights"], gathered_params(train, 12 * h2, lambda: _layer_ops(model))

    torch_fsdp, torch_gathered = weights_bytes("megatron-lm")
    deepspeed, deepspeed_gathered = weights_bytes("deepspeed")
    assert torch_gathered == 24 * h2  # the layer computed and the one prefetched
    assert deepspeed_gathered == max(ZERO3_MAX_LIVE_PARAMS, 4 * h2) + ZERO3_PREFETCH_PARAMS
    assert torch_fsdp - deepspeed == pytest.approx(2 * (torch_gathered - deepspeed_gathered))  # fp16 weights
    assert gathered_params(TrainingSpec(), 12 * h2, lambda: []) == 0.0  # parameters not sharded
