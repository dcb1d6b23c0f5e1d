"""Token embedding on the first model stage: a vocab-parallel lookup (a weight without a GEMM)."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec


def _ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.embedding_ops(model, shard)


def _table_params(model: ModelSpec, shard: L.Shard) -> int:
    """The lookup table on this rank: V/tp x h (Megatron's padded vocabulary)."""
    return L.padded_vocab(model, shard.tp) // shard.tp * model.hidden_size


KIND = LayerKind(
    name="embedding",
    placement=Placement.FIRST,
    ops=_ops,
    count=lambda model: 1,
    table_params=_table_params,
    tied_to="head",
    holds_layer=False,
)
