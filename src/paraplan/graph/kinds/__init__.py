"""The registry of layer kinds: every kind of block a model is made of, declared once.

A kind (`LayerKind`) names its forward operators, where its blocks sit in the pipeline (`Placement`) and how
they count (which decoder layers it claims, how many edge blocks the model has, parameters outside its GEMMs).
The projection, the memory pre-filter, Chakra traces and the hybrid benchmark dispatch through this registry.

Adding a kind (a Mamba-2 or Gated DeltaNet mixer, say) is one module beside these, declaring
`KIND = LayerKind(name=..., placement=Placement.LAYER, ops=..., claims=...)`, and one line in `BUILTIN_KINDS`
(or `register(KIND)` from outside the package). Register kinds before projecting: projections cache their
stages by model, not by registry.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from paraplan.errors import ConfigError
from paraplan.graph.kinds import attention, dense, embedding, gdn, head, local, mamba, mlp, moe, moe_mlp, mtp
from paraplan.graph.kinds.base import LayerKind, OpsBuilder, Placement
from paraplan.graph.layers import Shard
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec

BUILTIN_KINDS: tuple[LayerKind, ...] = (
    dense.KIND,
    moe.KIND,
    embedding.KIND,
    head.KIND,
    mtp.KIND,
    # the blocks of a hybrid model (`ModelSpec.hybrid_layer_pattern`): M, *, -, E
    mamba.KIND,
    attention.KIND,
    mlp.KIND,
    moe_mlp.KIND,
    # Gated DeltaNet layers interleaved with full attention (`ModelSpec.linear_attention_freq`)
    gdn.KIND,
    gdn.MOE_KIND,
    # chunked or sliding-window attention between global layers (Llama 4's `attention_chunk_size`, `window_size`)
    local.KIND,
    local.MOE_KIND,
)
"""Registration order is the order of a stage's edge blocks (embedding, head, MTP) and of the kinds' counts."""

_REGISTRY: dict[str, LayerKind] = {}


@lru_cache(maxsize=256)
def decoder_kind_names(model: ModelSpec) -> tuple[str, ...]:
    """`decoder_kind_of(model, layer).name` of every decoder layer, once per model (the stage layouts and the model
    FLOPs ask for every layer; cleared when a kind is registered or removed)."""
    kinds = [
        kind
        for kind in _REGISTRY.values()
        if kind.placement is Placement.LAYER and (kind.present is None or kind.present(model))
    ]  # the kinds that may claim a layer (`LayerKind.present`)
    if len(kinds) == 1 and kinds[0].is_default_layer:  # no other kind claims any: every layer is the default
        return (kinds[0].name,) * model.num_layers
    return tuple(_decoder_kind_among(kinds, model, layer).name for layer in range(model.num_layers))


def register(kind: LayerKind) -> LayerKind:
    """Adds a kind; its name must be new, and there is one default decoder layer (a LAYER kind without `claims`)."""
    if kind.name in _REGISTRY:
        raise ValueError(f"layer kind '{kind.name}' is registered already")
    if kind.is_default_layer and any(k.is_default_layer for k in _REGISTRY.values()):
        raise ValueError(f"layer kind '{kind.name}': a decoder layer kind needs `claims` (dense is the default)")
    _REGISTRY[kind.name] = kind
    decoder_kind_names.cache_clear()
    return kind


def unregister(name: str) -> None:
    del _REGISTRY[name]
    decoder_kind_names.cache_clear()


@contextmanager
def registered(kind: LayerKind) -> Iterator[LayerKind]:
    """The kind registered for the duration of a `with` block (tests)."""
    register(kind)
    try:
        yield kind
    finally:
        unregister(kind.name)


for _kind in BUILTIN_KINDS:
    register(_kind)


def layer_kinds() -> tuple[LayerKind, ...]:
    """Every registered kind, in registration order."""
    return tuple(_REGISTRY.values())


def layer_kind(name: str) -> LayerKind:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown layer kind '{name}' (one of {', '.join(_REGISTRY)})") from None


def edge_kinds(placement: Placement) -> tuple[LayerKind, ...]:
    """The FIRST or LAST kinds, in registration order."""
    return tuple(k for k in _REGISTRY.values() if k.placement is placement)


def decoder_kind_of(model: ModelSpec, layer: int) -> LayerKind:
    """The kind of decoder layer `layer` (0-based): the one kind that claims it, else the default (dense)."""
    return _decoder_kind_among([k for k in _REGISTRY.values() if k.placement is Placement.LAYER], model, layer)


def _decoder_kind_among(kinds: list[LayerKind], model: ModelSpec, layer: int) -> LayerKind:
    """`decoder_kind_of` among the registered LAYER kinds `kinds` (in registration order)."""
    default = None
    claimed = None
    for kind in kinds:
        if kind.claims is None:
            default = kind
        elif kind.claims(model, layer):
            if claimed is not None:
                raise ValueError(f"decoder layer {layer} is claimed by layer kinds '{claimed.name}' and '{kind.name}'")
            claimed = kind
    if claimed is not None:
        return claimed
    if default is None:
        raise ValueError("no default decoder layer kind is registered")
    return default


def block_counts(model: ModelSpec) -> dict[str, int]:
    """Blocks of each kind in the whole model, in registration order; kinds the model lacks are left out."""
    counts = dict.fromkeys(_REGISTRY, 0)
    for name in decoder_kind_names(model):
        counts[name] += 1
    for kind in _REGISTRY.values():
        if kind.count is not None:
            counts[kind.name] = kind.count(model)
    return {name: n for name, n in counts.items() if n > 0}


def decoder_kinds(model: ModelSpec) -> tuple[LayerKind, ...]:
    """The decoder layer kinds of the model: the default one (unless a hybrid pattern claims every layer), and every
    other kind that claims a layer."""
    present = set(decoder_kind_names(model))
    return tuple(
        k
        for k in _REGISTRY.values()
        if k.is_decoder_layer and (k.name in present or (k.is_default_layer and not model.is_hybrid))
    )


def all_decoder_layer_ops(model: ModelSpec, shard: Shard) -> list[Op]:
    """The forward ops of the model's kinds of decoder layer, one layer of each (`decoder_kinds`)."""
    return [op for kind in decoder_kinds(model) for op in kind.ops(model, shard)]


__all__ = [
    "BUILTIN_KINDS",
    "LayerKind",
    "OpsBuilder",
    "Placement",
    "all_decoder_layer_ops",
    "block_counts",
    "decoder_kind_of",
    "decoder_kinds",
    "edge_kinds",
    "layer_kind",
    "layer_kinds",
    "register",
    "registered",
    "unregister",
]
