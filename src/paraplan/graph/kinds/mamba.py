"""Mamba-2 mixer block of a hybrid model (M in `hybrid_layer_pattern`): norm, in_proj, conv1d, SSD scan, gated norm,
out_proj, residual (`paraplan.graph.mamba`)."""

from __future__ import annotations

from paraplan.graph.kinds.hybrid_common import hybrid_kind
from paraplan.graph.mamba import mamba_mixer_ops
from paraplan.specs.model import MAMBA

KIND = hybrid_kind("mamba", MAMBA, mamba_mixer_ops)
