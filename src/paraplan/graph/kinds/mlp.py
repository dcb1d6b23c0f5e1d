"""Dense MLP block of a hybrid model (- in `hybrid_layer_pattern`): norm, MLP, residual, without attention."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.hybrid_common import hybrid_kind
from paraplan.specs.model import MLP

KIND = hybrid_kind("mlp", MLP, L.mlp_ops)
