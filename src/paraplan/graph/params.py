"""Parameter counts of a whole model, from its layer kinds' operators: what a model card's "total" and "active"
parameters mean, to check presets against their published sizes.

Counted: every weight GEMM (attention, MLP, experts, router, Mamba and Gated DeltaNet projections), the embedding
table and the LM head (once when tied), and the Mamba and Gated DeltaNet mixers' small tensors (conv1d, A, D, dt bias,
gated norm). Not counted: the RMSNorm/LayerNorm weights of the blocks (h per norm, under 0.01% of any preset), the
q/k norms, the shared expert's sigmoid gate (h weights per layer, Qwen3-Next), gpt-oss's attention sinks (one scalar
per head) and the linear layers' biases (about 0.03% of gpt-oss). Active parameters count top-k of the routed experts
(and every shared expert).
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.graph import kinds as K
from paraplan.graph.backward import is_weightless_gemm
from paraplan.graph.gdn import gdn_params
from paraplan.graph.layers import Shard
from paraplan.graph.mamba import mamba_params
from paraplan.graph.ops import Op, OpKind
from paraplan.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class ParamCount:
    total: int
    active: int
    embedding: int = 0
    """The input embedding table (a lookup, no FLOPs): publishers differ on counting it among the active
    parameters (openai/gpt-oss's 5.1B and 3.6B active leave it out and keep the LM head)."""

    @property
    def active_without_embedding(self) -> int:
        return self.active - self.embedding


def _unsharded(seq: int = 128) -> Shard:
    return Shard(batch=1, seq=seq, seq_full=seq, tp=1, sp=False, cp=1, ep=1, etp=1, precision="bf16", flash=True)


def _gemm_params(ops: list[Op], model: ModelSpec) -> tuple[int, int]:
    """(all parameters, active parameters) of a block's weight GEMMs."""
    total = active = 0
    for op in ops:
        if op.kind is not OpKind.GEMM or op.gemm is None or is_weightless_gemm(op):
            continue
        n = op.gemm.k * op.gemm.n * op.gemm.count
        total += n
        active += n * model.moe_router_topk // model.num_experts if op.expert and model.num_experts else n
    return total, active


def model_params(model: ModelSpec) -> ParamCount:
    shard = _unsharded()
    total = active = 0
    for layer in range(model.num_layers):
        kind = K.decoder_kind_of(model, layer)
        t, a = _gemm_params(kind.ops(model, shard), model)
        extra = mamba_params(model) if model.layer_symbol(layer) == "M" else 0
        extra += gdn_params(model) if model.is_linear_attention_layer(layer) else 0
        total, active = total + t + extra, active + a + extra
    counted_tables: set[str] = set()
    embedding = 0
    for kind in K.layer_kinds():
        count = kind.count(model) if kind.count is not None else 0
        if not count:
            continue
        if model.tied_embeddings and kind.tied_to in counted_tables:
            continue  # the embedding and the LM head share one table
        table = kind.params_of(model, shard)
        t, a = (table, table) if table is not None else _gemm_params(kind.ops(model, shard), model)
        total, active = total + count * t, active + count * a
        counted_tables.add(kind.name)
        if kind.name == "embedding":
            embedding = count * t
    return ParamCount(total=total, active=active, embedding=embedding)
