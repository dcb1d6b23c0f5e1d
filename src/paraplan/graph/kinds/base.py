"""What a layer kind declares: its operators, where it sits in the pipeline, and how it counts.

A kind is one frozen `LayerKind`; `paraplan.graph.kinds` holds the registered ones. Everything after the graph
(the projection, the memory pre-filter, Chakra traces, the hybrid benchmark) reads these fields instead of
testing kind names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from paraplan.graph.layers import Shard
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec


class Placement(StrEnum):
    """Where a kind's blocks sit among the model stages."""

    LAYER = "layer"  # a decoder layer: the pipeline split spreads the decoder layers over the model stages
    FIRST = "first"  # on the first model stage, before its decoder layers (the embedding)
    LAST = "last"  # on the last model stage, after its decoder layers (final norm, LM head and loss; MTP modules)


OpsBuilder = Callable[[ModelSpec, Shard], list[Op]]
"""The forward operators of one block of the kind for one micro-batch on one GPU (shapes after sharding)."""


@dataclass(frozen=True, slots=True)
class LayerKind:
    """One kind of block: a decoder layer (dense, MoE, a future Mamba-2 or Gated DeltaNet mixer) or a pipeline
    edge (embedding, head, MTP modules)."""

    name: str
    """Stable name: the key of block caches, of measured blocks (`ProjectionOptions.measured_blocks`) and of
    the hybrid benchmark's layer counts."""
    placement: Placement
    ops: OpsBuilder
    claims: Callable[[ModelSpec, int], bool] | None = None
    """LAYER kinds: whether decoder layer i (0-based) of the model is of this kind. None: the default decoder
    layer, which every layer no other kind claims is (exactly one LAYER kind is the default)."""
    present: Callable[[ModelSpec], bool] | None = None
    """LAYER kinds with `claims`: a cheap test on the whole model, False when `claims` is False for every layer
    (`decoder_kind_names` then asks no layer); None: ask every layer."""
    count: Callable[[ModelSpec], int] | None = None
    """FIRST and LAST kinds: how many blocks of the kind the model has (0: none)."""
    table_params: Callable[[ModelSpec, Shard], int] | None = None
    """Parameters on this GPU held outside the kind's GEMMs (a lookup table): replaces what its ops count."""
    tied_to: str | None = None
    """With `ModelSpec.tied_embeddings`: the kind that shares this kind's parameters. When both sit on one model
    stage the parameters are counted once, there (the embedding table and the LM head)."""
    holds_layer: bool = True
    """Holds a transformer layer (a decoder layer, an MTP module): the hybrid benchmark runs one of each such
    kind, and its straggler model spreads them over the pipeline stages. The embedding and the head do not."""

    def __post_init__(self) -> None:
        problems = []
        if not self.name or not self.name.isidentifier():
            problems.append(f"layer kind name {self.name!r} must be a non-empty identifier")
        if self.placement is Placement.LAYER and self.count is not None:
            problems.append(f"layer kind {self.name}: a decoder layer kind is counted by `claims`, not `count`")
        if self.present is not None and self.claims is None:
            problems.append(f"layer kind {self.name}: `present` needs `claims`")
        if self.placement is not Placement.LAYER and (self.count is None or self.claims is not None):
            problems.append(f"layer kind {self.name}: a {self.placement} kind needs `count` and no `claims`")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def is_decoder_layer(self) -> bool:
        """A decoder layer: spread over the stages, under the stage's recompute mode, one FSDP unit each."""
        return self.placement is Placement.LAYER

    @property
    def is_default_layer(self) -> bool:
        return self.placement is Placement.LAYER and self.claims is None

    def params_of(self, model: ModelSpec, shard: Shard) -> int | None:
        """The parameters outside the GEMMs (`table_params`), None when the ops count them all."""
        return None if self.table_params is None else self.table_params(model, shard)
