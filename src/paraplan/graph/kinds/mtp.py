"""DeepSeek-V3 multi-token-prediction modules on the last model stage, after the head (`mtp_num_layers`)."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec


def _ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.mtp_ops(model, shard, L.padded_vocab(model, shard.tp))


def _count(model: ModelSpec) -> int:
    return model.mtp_num_layers


KIND = LayerKind(name="mtp", placement=Placement.LAST, ops=_ops, count=_count)
