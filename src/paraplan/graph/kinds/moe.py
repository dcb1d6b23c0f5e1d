"""MoE decoder layer: attention and a routed-expert MLP (`first_k_dense_replace`, `moe_layer_freq` choose which
layers: `ModelSpec.is_moe_layer`)."""

from __future__ import annotations

from paraplan.graph import dsa
from paraplan.graph import layers as L
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec


def _ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.decoder_layer_ops(model, shard, moe=True, attention_core=dsa.attention_core(model))


def _claims(model: ModelSpec, layer: int) -> bool:
    # a hybrid pattern's E block is `moe_mlp`; other mixers with experts are their own kinds (`gdn_moe`, `moe_local`)
    return not model.is_hybrid and model.is_moe_layer(layer) and model.mixer_of(layer) == "attention"


def _present(model: ModelSpec) -> bool:
    return not model.is_hybrid and model.is_moe  # `ModelSpec.is_moe_layer`


KIND = LayerKind(name="moe", placement=Placement.LAYER, ops=_ops, claims=_claims, present=_present)
