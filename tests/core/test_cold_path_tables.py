"""The tables the cold projection builds once (issue 35) hold what the per-call code computed: the decoder layer kinds
once per model, a block's operators and backward once per (kind, model, shard), the stages alike shared."""

from __future__ import annotations

import pytest

from paraplan.cost.block import backward_phases
from paraplan.cost.calibration import at_scale, calibration_for
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.kinds import LayerKind, Placement
from paraplan.graph.partition import pipeline_split, split_stages
from paraplan.memory.activations import layer_modes
from paraplan.projection import (
    _cached_block,
    _layout_parts,
    _stage_parts,
    block_context,
    block_ops_of,
    project_specs,
)
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

MODELS = ("llama3.1-8b", "deepseek-v3", "nemotron-h-8b", "qwen3-next-80b-a3b", "llama4-scout", "gpt-oss-20b")


@pytest.mark.parametrize("name", MODELS)
def test_decoder_kind_names_are_the_per_layer_lookup(name: str) -> None:
    model = model_preset(name)
    assert K.decoder_kind_names(model) == tuple(K.decoder_kind_of(model, i).name for i in range(model.num_layers))


def test_a_kind_not_present_claims_no_layer() -> None:
    """`LayerKind.present` False means `claims` is False for every layer, on every preset (the pruned lookup in
    `decoder_kind_names` leaves nothing out), and each test is true for some preset."""
    from paraplan.specs.presets import model_names

    seen_present = set()
    for name in model_names():
        model = model_preset(name)
        for kind in K.layer_kinds():
            if kind.present is None:
                continue
            claimed = any(kind.claims(model, i) for i in range(model.num_layers))
            if kind.present(model):
                seen_present.add(kind.name)
            else:
                assert not claimed, (name, kind.name)
        assert K.decoder_kind_names(model) == tuple(K.decoder_kind_of(model, i).name for i in range(model.num_layers))
    assert seen_present == {k.name for k in K.layer_kinds() if k.present is not None}


def test_registering_a_kind_renews_the_decoder_kind_names() -> None:
    model = model_preset("llama3.1-8b")
    first = LayerKind(name="first_only", placement=Placement.LAYER, ops=L.mlp_ops, claims=lambda m, i: i == 0)
    assert K.decoder_kind_names(model)[0] == "dense"
    with K.registered(first):
        assert K.decoder_kind_names(model)[:2] == ("first_only", "dense")
    assert K.decoder_kind_names(model)[0] == "dense"


def _train(**values: object) -> TrainingSpec:
    return TrainingSpec().with_values(gbs=256, seq=4096, mbs=1, **values)


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("llama3.1-405b", {"tp": 8, "pp": 16, "vpp": 8, "sp": True, "pipeline_schedule": "interleaved"}),
        ("llama3.1-70b", {"tp": 4, "pp": 4, "recompute": "full", "recompute_num_layers": 3}),
        ("deepseek-v3", {"tp": 2, "pp": 8, "ep": 8}),
        ("nemotron-h-8b", {"tp": 2, "pp": 4}),
    ],
)
def test_layout_parts_are_each_stages_parts(name: str, values: dict) -> None:
    """Stages that differ only in where they start share one `_stage_parts` call: the same parts as asking for each."""
    model = model_preset(name)
    train = _train(**values)
    split = pipeline_split(train)
    modes = layer_modes(train)
    stage_parts, distinct = _layout_parts(model, split, *modes)
    each = tuple(
        _stage_parts(model, s.first_layer, s.num_layers, s.has_embedding, s.has_head, *modes)
        for s in split_stages(model, split)
    )
    assert stage_parts == each
    assert sum(n for _, n in distinct) == len(each)


def test_block_ops_are_built_once_and_shared_by_every_context() -> None:
    model = model_preset("llama3.1-70b")
    system = system_preset("h100-sxm5-80gb", 1024)
    train = _train(tp=4, pp=4, sp=True)
    shard = L.Shard.of(train)
    ops = block_ops_of("dense", model, shard)
    forward = tuple(K.layer_kind("dense").ops(model, shard))
    b_ops, w_ops = backward_phases(forward)
    assert (ops.forward, ops.backward_input, ops.backward_weight) == (forward, tuple(b_ops), tuple(w_ops))
    assert w_ops and all(op.phase != forward[0].phase for op in b_ops + w_ops)
    # the typical chip's context and the slowest chip's cost the same operators, built once
    base = calibration_for(system.gpu.name, train.framework)
    typical = _cached_block("dense", model, shard, "none", block_context(system, train, base))
    slowest = _cached_block("dense", model, shard, "none", block_context(system, train, at_scale(base, 1024)))
    assert slowest.forward_s > typical.forward_s
    assert block_ops_of.cache_info().currsize >= 1 and block_ops_of("dense", model, shard) is ops
    assert project_specs(model, system, train).step_time_s > 0


def test_backward_ops_are_what_dataclasses_replace_built() -> None:
    """`graph.backward._op_with` builds positionally what `dataclasses.replace` did, for every field of every op."""
    from dataclasses import fields, replace

    from paraplan.graph.backward import _op_with, backward_ops, is_weightless_gemm
    from paraplan.graph.ops import GemmShape, Phase

    model = model_preset("deepseek-v3")
    shard = L.Shard.of(_train(tp=2, ep=8, sp=True))
    ops = [op for kind in ("moe", "dense", "head") for op in K.layer_kind(kind).ops(model, shard)]
    for op in ops:
        changes = {f.name: getattr(op, f.name) for f in fields(op) if f.name in ("phase", "flops", "tags", "expert")}
        changes |= {"saved_bytes": 1.5, "flops": op.flops * 2 + 1, "host_ops": op.host_ops + 3}
        assert _op_with(op, **changes) == replace(op, **changes)
        assert _op_with(op) == op
        if op.gemm is not None:  # `_gemm_grad`: a GEMM's gradients, field by field as `replace` built them
            g = op.gemm
            second = Phase.BACKWARD_INPUT if is_weightless_gemm(op) else Phase.BACKWARD_WEIGHT
            expected = [
                replace(op, phase=Phase.BACKWARD_INPUT, gemm=GemmShape(g.m, g.k, g.n, g.count), saved_bytes=0.0),
                replace(op, phase=second, gemm=GemmShape(g.k, g.n, g.m, g.count), saved_bytes=0.0),
            ]
            assert backward_ops(op) == expected
    # every kind of op (GEMMs, flash and unfused attention, elementwise, collectives, a scan): `backward_ops` as the
    # `_op_with` it builds positionally stands for
    hybrid = model_preset("nemotron-h-8b")
    unfused = L.Shard.of(_train(tp=2, cp=2, sp=True, attention_backend="unfused", kernel_fusion=False))
    others = [op for kind in ("mamba", "attention", "mlp") for op in K.layer_kind(kind).ops(hybrid, unfused)]
    for op in ops + others:
        for grad in backward_ops(op):
            kept = ("kind", "attention", "scan", "precision", "backward_bytes", "expert")
            assert all(getattr(grad, name) == getattr(op, name) for name in kept), op.name
            assert grad.phase is not Phase.FORWARD and grad.name.startswith(op.name) and grad.tags >= op.tags
            assert (grad.gemm is None) == (op.gemm is None) and (grad.comm is None) == (op.comm is None)
            assert grad.saved_bytes == (op.saved_bytes if op.comm is not None else 0.0)
