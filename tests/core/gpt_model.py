"""A GPT-style dense model of a given width for the core tests (4h MLP with GeLU, 128-wide heads)."""

from __future__ import annotations

from paraplan.specs.model import ModelSpec


def gpt(hidden: int, layers: int = 4, vocab: int = 1000) -> ModelSpec:
    return ModelSpec(
        name=f"gpt-h{hidden}",
        num_layers=layers,
        hidden_size=hidden,
        ffn_hidden_size=4 * hidden,
        num_attention_heads=hidden // 128,
        vocab_size=vocab,
        activation="gelu",
    )
