"""Self-attention block of a hybrid model (* in `hybrid_layer_pattern`): norm, attention (GQA, or MLA), residual,
without an MLP (Megatron's hybrid TransformerLayer with an identity MLP)."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.hybrid_common import hybrid_kind
from paraplan.graph.ops import Op
from paraplan.specs.model import ATTENTION, ModelSpec


def _ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.mla_attention_ops(model, shard) if model.is_mla else L.attention_ops(model, shard)


KIND = hybrid_kind("attention", ATTENTION, _ops)
