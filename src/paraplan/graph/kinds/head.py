"""Final norm, LM head (vocab-parallel) and cross-entropy on the last model stage."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec


def _ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.head_ops(model, shard, L.padded_vocab(model, shard.tp))


KIND = LayerKind(name="head", placement=Placement.LAST, ops=_ops, count=lambda model: 1, holds_layer=False)
