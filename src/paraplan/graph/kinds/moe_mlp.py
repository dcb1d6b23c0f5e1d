"""MoE block of a hybrid model (E in `hybrid_layer_pattern`): norm, router, routed and shared experts, residual,
without attention."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.kinds.hybrid_common import claims_symbol, present_symbol
from paraplan.specs.model import MOE

KIND = LayerKind(
    name="moe_mlp", placement=Placement.LAYER, ops=L.moe_ops, claims=claims_symbol(MOE), present=present_symbol(MOE)
)
