"""Decoder layers with chunked local attention (Llama 4's RoPE layers: each query attends within its chunk of
`ModelSpec.attention_chunk_size` tokens), then a dense MLP (`dense_chunked`) or an MoE (`moe_chunked`). The global
(NoPE) layers between them are the plain `dense` and `moe` kinds."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec


def _dense_ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.decoder_layer_ops(model, shard, moe=False, chunk=model.attention_chunk_size)


def _moe_ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.decoder_layer_ops(model, shard, moe=True, chunk=model.attention_chunk_size)


def _claims_dense(model: ModelSpec, layer: int) -> bool:
    return not model.is_hybrid and model.mixer_of(layer) == "chunked" and not model.is_moe_layer(layer)


def _claims_moe(model: ModelSpec, layer: int) -> bool:
    return not model.is_hybrid and model.mixer_of(layer) == "chunked" and model.is_moe_layer(layer)


KIND = LayerKind(name="dense_chunked", placement=Placement.LAYER, ops=_dense_ops, claims=_claims_dense)
MOE_KIND = LayerKind(name="moe_chunked", placement=Placement.LAYER, ops=_moe_ops, claims=_claims_moe)
