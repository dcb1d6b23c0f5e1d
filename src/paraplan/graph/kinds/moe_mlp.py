"""MoE block of a hybrid model (E in `hybrid_layer_pattern`): norm, router, routed and shared experts, residual,
without attention."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.hybrid_common import hybrid_kind
from paraplan.specs.model import MOE

KIND = hybrid_kind("moe_mlp", MOE, L.moe_ops)
