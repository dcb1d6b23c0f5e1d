"""Dense MLP block of a hybrid model (- in `hybrid_layer_pattern`): norm, MLP, residual, without attention."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.kinds.hybrid_common import claims_symbol, present_symbol
from paraplan.specs.model import MLP

KIND = LayerKind(
    name="mlp", placement=Placement.LAYER, ops=L.mlp_ops, claims=claims_symbol(MLP), present=present_symbol(MLP)
)
