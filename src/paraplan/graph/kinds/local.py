"""Decoder layers with local attention: chunked (Llama 4's RoPE layers, each query attending within its chunk of
`ModelSpec.attention_chunk_size` tokens) or a sliding window (`ModelSpec.window_size`), then a dense MLP
(`dense_local`) or an MoE (`moe_local`). The global layers between them are the plain `dense` and `moe` kinds."""

from __future__ import annotations

from paraplan.graph import layers as L
from paraplan.graph.kinds.base import LayerKind, Placement
from paraplan.graph.ops import Op
from paraplan.specs.model import ModelSpec


def _dense_ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.decoder_layer_ops(model, shard, moe=False, local=True)


def _moe_ops(model: ModelSpec, shard: L.Shard) -> list[Op]:
    return L.decoder_layer_ops(model, shard, moe=True, local=True)


def _claims_dense(model: ModelSpec, layer: int) -> bool:
    return not model.is_hybrid and model.mixer_of(layer) == "local" and not model.is_moe_layer(layer)


def _claims_moe(model: ModelSpec, layer: int) -> bool:
    return not model.is_hybrid and model.mixer_of(layer) == "local" and model.is_moe_layer(layer)


def _present(model: ModelSpec) -> bool:
    return not model.is_hybrid and (
        model.attention_chunk_size > 0 or model.window_size > 0
    )  # `is_local_attention_layer`


KIND = LayerKind(name="dense_local", placement=Placement.LAYER, ops=_dense_ops, claims=_claims_dense, present=_present)
MOE_KIND = LayerKind(name="moe_local", placement=Placement.LAYER, ops=_moe_ops, claims=_claims_moe, present=_present)
