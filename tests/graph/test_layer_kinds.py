"""The layer-kind registry (`paraplan.graph.kinds`) drives every dispatch on layer kinds: a kind declared and
registered in a test alone is projected, filtered for memory and counted like the built-in ones."""

from __future__ import annotations

import ast
import inspect
from dataclasses import replace

import pytest

import paraplan
from paraplan.errors import ConfigError
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.kinds import LayerKind, Placement
from paraplan.graph.ops import Op, OpKind
from paraplan.projection import model_flops_per_sequence
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import model_preset
from paraplan.specs.training import TrainingSpec
from paraplan.tune.memfilter import estimate_peak_bytes

BUILTIN = (
    "dense",
    "moe",
    "embedding",
    "head",
    "mtp",
    "mamba",
    "attention",
    "mlp",
    "moe_mlp",
    "gdn",
    "gdn_moe",
    "dense_local",
    "moe_local",
)
TOY_MODEL = "toy-double-mlp-llama"


def _toy_ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    """A made-up decoder layer: attention, then two MLPs in a row."""
    return L.attention_ops(model, shard) + L.mlp_ops(model, shard) + L.mlp_ops(model, shard)


def _toy_claims(model: ModelSpec, layer: int) -> bool:
    return model.name == TOY_MODEL and layer % 2 == 1  # every second layer of the toy model only


TOY = LayerKind(name="toy_double_mlp", placement=Placement.LAYER, ops=_toy_ops, claims=_toy_claims)


def _models() -> tuple[ModelSpec, ModelSpec]:
    """The same 4-layer Llama twice: the toy model (layers 1 and 3 are the toy kind) and the plain one."""
    plain = replace(model_preset("llama3.1-8b"), name="plain-4-layer-llama", num_layers=4)
    return replace(plain, name=TOY_MODEL), plain


def _matmul_flops(ops: list[Op]) -> float:
    return sum(op.flops for op in ops if op.kind in (OpKind.GEMM, OpKind.ATTENTION))


def test_builtin_kinds_are_registered_in_order() -> None:
    assert tuple(k.name for k in K.layer_kinds()) == BUILTIN
    assert [k.name for k in K.edge_kinds(Placement.FIRST)] == ["embedding"]
    assert [k.name for k in K.edge_kinds(Placement.LAST)] == ["head", "mtp"]


def test_every_kind_resolves_its_ops_and_counts() -> None:
    model = model_preset("deepseek-v3")
    shard = L.Shard.of(TrainingSpec().with_values(tp=2, ep=8))
    for kind in K.layer_kinds():
        ops = kind.ops(model, shard)
        assert ops and all(isinstance(op, Op) for op in ops), kind.name
        assert K.layer_kind(kind.name) is kind
    assert K.block_counts(model) == {"dense": 3, "moe": 58, "embedding": 1, "head": 1, "mtp": 1}
    assert K.block_counts(model_preset("llama3.1-8b")) == {"dense": 32, "embedding": 1, "head": 1}
    assert [k.name for k in K.decoder_kinds(model)] == ["dense", "moe"]
    assert K.decoder_kind_of(model, 2).name == "dense" and K.decoder_kind_of(model, 3).name == "moe"


def test_expert_ops_are_marked_by_the_builder() -> None:
    """`Op.expert` marks exactly the routed experts' ops (the names the consumers used to match)."""
    model = model_preset("deepseek-v3")
    shard = L.Shard.of(TrainingSpec().with_values(tp=2, ep=8))
    ops = [op for kind in K.layer_kinds() for op in kind.ops(model, shard)]
    for op in ops:
        assert op.expert == op.name.removeprefix("mtp_").startswith("expert_"), op.name
    assert any(op.expert for op in ops) and any(op.expert and op.name.startswith("mtp_") for op in ops)


def test_unknown_kind_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown layer kind 'mamba2'.*dense, moe, embedding, head, mtp"):
        K.layer_kind("mamba2")


def test_registration_rules() -> None:
    with pytest.raises(ValueError, match="registered already"):
        K.register(replace(TOY, name="dense"))
    with pytest.raises(ValueError, match="needs `claims`"):
        K.register(replace(TOY, claims=None))
    with pytest.raises(ValueError, match="counted by `claims`"):
        LayerKind(name="bad", placement=Placement.LAYER, ops=_toy_ops, count=lambda model: 1)
    with pytest.raises(ValueError, match="needs `count`"):
        LayerKind(name="bad", placement=Placement.LAST, ops=_toy_ops)
    greedy = LayerKind(name="greedy", placement=Placement.LAYER, ops=_toy_ops, claims=lambda model, i: True)
    with K.registered(greedy):
        with pytest.raises(ValueError, match="claimed by layer kinds 'moe' and 'greedy'"):
            K.decoder_kind_of(model_preset("deepseek-v3"), 3)
    assert "greedy" not in {k.name for k in K.layer_kinds()}


def test_a_kind_registered_in_a_test_is_projected_through_the_normal_path() -> None:
    toy_model, plain = _models()
    gpus, training = 8, {"tp": 2, "pp": 2, "mbs": 1, "gbs": 16, "seq": 2048}
    shard = L.Shard(batch=1, seq=2048, seq_full=2048, tp=1, sp=False, cp=1, ep=1, etp=1, precision="bf16", flash=True)
    with K.registered(TOY):
        assert K.block_counts(toy_model) == {"dense": 2, "toy_double_mlp": 2, "embedding": 1, "head": 1}
        assert K.block_counts(plain) == {"dense": 4, "embedding": 1, "head": 1}
        toy = paraplan.project(toy_model, "h100-sxm5-80gb", gpus, **training)
        base = paraplan.project(plain, "h100-sxm5-80gb", gpus, **training)
        # model FLOPs: two more MLPs (one per toy layer), forward and backward
        extra = 3 * 2 * _matmul_flops(L.mlp_ops(plain, shard))
        assert model_flops_per_sequence(toy_model, 2048) == pytest.approx(model_flops_per_sequence(plain, 2048) + extra)
        assert toy.model_flops_per_step == pytest.approx(base.model_flops_per_step + extra * 16)
        # time and memory grow with the extra MLPs, in the projection and in the tuner's memory pre-filter
        assert toy.step_time_s > base.step_time_s
        assert toy.memory.peak.total_bytes > base.memory.peak.total_bytes
        train = TrainingSpec().with_values(**training, dp=2)
        system = paraplan.api.resolve_system("h100-sxm5-80gb", gpus)
        assert estimate_peak_bytes(toy_model, system, train) > estimate_peak_bytes(plain, system, train)
    assert "toy_double_mlp" not in {k.name for k in K.layer_kinds()}


def _kind_name_literals(module: object) -> list[str]:
    """String constants equal to a built-in kind's name in a module's code (its docstrings excluded)."""
    tree = ast.parse(inspect.getsource(module))
    return [
        f"line {n.lineno}: {n.value!r}" for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in BUILTIN
    ]


def test_dispatch_has_no_kind_name_branches() -> None:
    """The modules that dispatch on layer kinds read the registry: no built-in kind's name appears in their code."""
    import paraplan.formats.chakra
    import paraplan.geo.prefill
    import paraplan.measure.hybrid.plan
    import paraplan.measure.hybrid.straggler
    import paraplan.projection
    import paraplan.tune.memfilter

    modules = (
        paraplan.projection,
        paraplan.tune.memfilter,
        paraplan.formats.chakra,
        paraplan.measure.hybrid.plan,
        paraplan.measure.hybrid.straggler,
        paraplan.geo.prefill,
    )
    for module in modules:
        assert _kind_name_literals(module) == [], module.__name__
