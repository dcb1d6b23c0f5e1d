"""Self-attention block of a hybrid model (* in `hybrid_layer_pattern`): norm, attention (GQA, or MLA), residual,
without an MLP (Megatron's hybrid TransformerLayer with an identity MLP)."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.kinds.hybrid_common import claims_symbol, present_symbol
from paraplan.graph.ops import Op
from paraplan.specs.model import ATTENTION, ModelSpec


def _ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.mla_attention_ops(model, shard) if model.is_mla else L.attention_ops(model, shard)


KIND = LayerKind(
    name="attention",
    placement=Placement.LAYER,
    ops=_ops,
    claims=claims_symbol(ATTENTION),
    present=present_symbol(ATTENTION),
)
