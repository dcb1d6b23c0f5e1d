"""Prefill time and memory of a serving model, from paraplan's own operator and cost model.

Prefill is one forward pass over the prompt (batch 1, no backward): every decoder layer's operators over
`tokens` tokens (causal attention over the prompt), the embedding, and the LM head for the last token only
(the first generated token). Times are rounded up to a bucket of prompt lengths, so a prediction is never
below the cost of the prompt it stands for.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from paraplan.cost.block import BlockContext, block_cost, repeated_s, weight_params
from paraplan.cost.calibration import calibration_for
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.projection import block_context
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec

BUCKET_TOKENS = 64
WEIGHT_BYTES = 2  # bf16 serving weights
KV_BYTES = 2  # bf16 KV cache


def _shard(tokens: int, tp: int) -> L.Shard:
    return L.Shard(
        batch=1, seq=tokens, seq_full=tokens, tp=tp, sp=False, cp=1, ep=1, etp=tp, precision="bf16", flash=True
    )


def _context(system: SystemSpec, tp: int) -> BlockContext:
    cal = calibration_for(system.gpu.name)
    train = TrainingSpec(tensor_model_parallel_size=tp, data_parallel_size=1)
    return block_context(system, train, cal)


@lru_cache(maxsize=8192)
def _prefill_s(model: ModelSpec, system: SystemSpec, tp: int, tokens: int) -> float:
    ctx = _context(system, tp)
    shard = _shard(tokens, tp)
    counts = Counter(K.decoder_kind_of(model, i) for i in range(model.num_layers))
    per_kind = {kind: block_cost(kind.ops(model, shard), "none", ctx) for kind in counts}
    # the layers share one launch queue: each after the first of its kind issues ahead (`repeated_s`)
    total = sum(repeated_s(per_kind[kind], n)[0] for kind, n in counts.items())
    total += block_cost(L.embedding_ops(model, shard), "none", ctx).forward_s
    last = _shard(1, tp)
    total += block_cost(L.head_ops(model, last, L.padded_vocab(model, tp)), "none", ctx).forward_s
    return total


def bucket_index(tokens: np.ndarray) -> np.ndarray:
    """Bucket of each prompt: bucket b holds prompts of up to (b + 1) * BUCKET_TOKENS tokens."""
    return np.maximum(0, -(-np.asarray(tokens, dtype=np.int64) // BUCKET_TOKENS) - 1)


def prefill_time_s(model: ModelSpec, system: SystemSpec, tp: int, tokens: int) -> float:
    """Predicted prefill time of a `tokens`-token prompt on `tp` GPUs of `system` (bucketed up)."""
    return _prefill_s(model, system, tp, max(1, -(-int(tokens) // BUCKET_TOKENS)) * BUCKET_TOKENS)


@lru_cache(maxsize=64)
def _table(model: ModelSpec, system: SystemSpec, tp: int, buckets: int) -> np.ndarray:
    table = np.array([_prefill_s(model, system, tp, (b + 1) * BUCKET_TOKENS) for b in range(buckets)])
    return np.maximum.accumulate(table)  # never predict a longer prompt to be faster


@lru_cache(maxsize=256)
def serving_weight_bytes(model: ModelSpec, tp: int) -> float:
    """bf16 weights of the serving model per GPU under TP `tp` (embedding table included)."""
    shard = _shard(BUCKET_TOKENS, tp)
    params = 0.0
    for i in range(model.num_layers):
        params += sum(weight_params(op) for op in K.decoder_kind_of(model, i).ops(model, shard))
    vocab = L.padded_vocab(model, tp)
    params += model.hidden_size * vocab / tp * (1 if model.tied_embeddings else 2)
    return WEIGHT_BYTES * params


def kv_cache_bytes(model: ModelSpec, tp: int, tokens: int) -> float:
    """KV cache of one prompt per GPU (MLA keeps the compressed latent and the rope key)."""
    if model.is_mla:
        per_token = (model.kv_lora_rank or 0) + model.qk_rope_head_dim
        return KV_BYTES * model.num_layers * per_token * tokens
    return KV_BYTES * 2 * model.num_layers * model.kv_groups * model.head_dim * tokens / tp


@dataclass(frozen=True, slots=True)
class PrefillModel:
    """Prefill of `model` on `tp` GPUs of a datacenter's `system`."""

    model: ModelSpec
    system: SystemSpec
    tp: int

    def time_s(self, tokens: int) -> float:
        return prefill_time_s(self.model, self.system, self.tp, tokens)

    def times_s(self, tokens: np.ndarray) -> np.ndarray:
        """Predicted prefill time of every prompt in `tokens` (one cost-model evaluation per bucket)."""
        buckets = bucket_index(tokens)
        if buckets.size == 0:
            return np.zeros(0)
        return _table(self.model, self.system, self.tp, int(buckets.max()) + 1)[buckets]

    def memory_bytes(self, max_tokens: int) -> float:
        """Weights plus the KV cache and working activations of the longest prompt, per GPU."""
        working = L.ACT_BYTES * max_tokens * (4 * self.model.hidden_size + 2 * self.model.ffn_hidden_size / self.tp)
        return serving_weight_bytes(self.model, self.tp) + kv_cache_bytes(self.model, self.tp, max_tokens) + working
