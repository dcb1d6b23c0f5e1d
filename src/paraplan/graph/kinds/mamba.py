"""Mamba-2 mixer block of a hybrid model (M in `hybrid_layer_pattern`): norm, in_proj, conv1d, SSD scan, gated norm,
out_proj, residual (`paraplan.graph.mamba`)."""

from __future__ import annotations

from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.kinds.hybrid_common import claims_symbol, present_symbol
from paraplan.graph.mamba import mamba_mixer_ops
from paraplan.specs.model import MAMBA

KIND = LayerKind(
    name="mamba",
    placement=Placement.LAYER,
    ops=mamba_mixer_ops,
    claims=claims_symbol(MAMBA),
    present=present_symbol(MAMBA),
)
