"""Dense decoder layer: attention (GQA/MQA, or MLA) and a dense MLP; the default decoder layer."""

from __future__ import annotations

from paraplan.graph import dsa
from paraplan.graph import layers as L
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec


def _ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.decoder_layer_ops(model, shard, moe=False, attention_core=dsa.attention_core(model))


KIND = LayerKind(name="dense", placement=Placement.LAYER, ops=_ops)
