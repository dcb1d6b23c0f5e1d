"""What the hybrid blocks share: which decoder block of a hybrid-pattern model a symbol claims."""

from __future__ import annotations

from collections.abc import Callable

from paraplan.graph.kinds.base import LayerKind, OpsBuilder, Placement
from paraplan.specs.model import ModelSpec


def claims_symbol(symbol: str) -> Callable[[ModelSpec, int], bool]:
    """`LayerKind.claims` for the blocks of `ModelSpec.hybrid_layer_pattern` written `symbol`."""

    def claims(model: ModelSpec, layer: int) -> bool:
        return model.layer_symbol(layer) == symbol

    return claims


def present_symbol(symbol: str) -> Callable[[ModelSpec], bool]:
    """`LayerKind.present` for the blocks written `symbol`: the pattern holds one."""

    def present(model: ModelSpec) -> bool:
        return model.pattern_count(symbol) > 0

    return present


def hybrid_kind(name: str, symbol: str, ops: OpsBuilder) -> LayerKind:
    """The decoder layer kind of the hybrid blocks written `symbol` (`claims_symbol`, `present_symbol`)."""
    return LayerKind(
        name=name, placement=Placement.LAYER, ops=ops, claims=claims_symbol(symbol), present=present_symbol(symbol)
    )
