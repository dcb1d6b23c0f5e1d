"""Gated DeltaNet decoder layers (Qwen3-Next's linear-attention layers, `ModelSpec.linear_attention_freq`): the Gated
DeltaNet mixer (`paraplan.graph.gdn`) in place of attention, then a dense MLP (`gdn`) or an MoE (`gdn_moe`)."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.gdn import gdn_mixer_ops
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec


def _dense_ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return gdn_mixer_ops(model, shard) + L.mlp_ops(model, shard)


def _moe_ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return gdn_mixer_ops(model, shard) + L.moe_ops(model, shard)


def _claims_dense(model: ModelSpec, layer: int) -> bool:
    return model.mixer_of(layer) == "gdn" and not model.is_moe_layer(layer)


def _claims_moe(model: ModelSpec, layer: int) -> bool:
    return model.mixer_of(layer) == "gdn" and model.is_moe_layer(layer)


def _present(model: ModelSpec) -> bool:
    return model.linear_attention_freq > 0  # `ModelSpec.is_linear_attention_layer`


KIND = LayerKind(name="gdn", placement=Placement.LAYER, ops=_dense_ops, claims=_claims_dense, present=_present)
MOE_KIND = LayerKind(name="gdn_moe", placement=Placement.LAYER, ops=_moe_ops, claims=_claims_moe, present=_present)
