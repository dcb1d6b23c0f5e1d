"""The reference model both torch harnesses train: the CPU end-to-end run (`paraplan.measure.e2e`) and the
hybrid projection's real runs (`paraplan.measure.hybrid.realrun`, `.validation`).

One pipeline stage of it (`build_stage`; the whole model when pp = 1) is the layers of `paraplan.measure.layers`
at one rank's shapes: the embedding on the first stage, the decoder layers of `graph.partition.virtual_stages`,
the final norm, LM head and fp32 cross-entropy on the last. `flat_grad_buffer` gives the stage's parameters
one contiguous gradient buffer (Megatron's grad buffer), which a data-parallel step all-reduces at once.
`TinyLlama` names the small Llama shapes the CPU runs use. torch is imported lazily: importing this module
does not need it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paraplan.specs.model import ModelSpec
from paraplan.specs.training import TrainingSpec

INIT_STD = 0.02  # GPT-2 / Megatron `init_method_std`


@dataclass(frozen=True, slots=True)
class TinyLlama:
    """A small Llama-shaped model (GQA, SwiGLU, RMSNorm, rotary). Widths should lie inside the
    `paraplan measure --quick` sample ranges (see `paraplan.measure.bench`) for the end-to-end check."""

    vocab: int = 1024  # a multiple of 128: Megatron's padding (and paraplan's) leaves it unchanged
    hidden: int = 512
    layers: int = 2
    heads: int = 8
    kv_heads: int = 2
    ffn: int = 1408  # about 2.75 x hidden, as Llama (gate and up: 2 x 1408)
    tied: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def model_spec(self) -> ModelSpec:
        return ModelSpec(
            name="tiny-llama-cpu",
            num_layers=self.layers,
            hidden_size=self.hidden,
            ffn_hidden_size=self.ffn,
            num_attention_heads=self.heads,
            vocab_size=self.vocab,
            num_query_groups=self.kv_heads,
            activation="swiglu",
            norm="rmsnorm",
            position="rope",
            tied_embeddings=self.tied,
            source="paraplan.measure.reference",
        )


def build_stage(model: ModelSpec, train: TrainingSpec, stage: int = 0, dtype: str = "fp32", seed: int = 0) -> Any:
    """Pipeline stage `stage` of the reference model as a torch module in `dtype`, in training mode:
    `forward(inputs, targets)` takes token ids on the first stage (else the previous stage's hidden states)
    and returns the loss on the last stage (else the hidden states). Weights: normal(0, 0.02), the layers'
    output projections scaled by 1/sqrt(2 layers) (Megatron's `scaled_init_method_normal`); with tied
    embeddings the LM head shares the embedding table when both are on this stage."""
    import torch
    from torch import nn

    from paraplan.graph.layers import Shard
    from paraplan.graph.partition import virtual_stages
    from paraplan.measure.device import torch_dtype
    from paraplan.measure.layers import DecoderLayer, Embedding, Head, RankShapes

    class Stage(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            info = virtual_stages(model, train)[stage]
            shapes = RankShapes.of(model, Shard.of(train))
            self.embedding = Embedding(model, shapes) if info.has_embedding else None
            self.layers = nn.ModuleList(
                DecoderLayer(model, shapes, moe=model.is_moe_layer(info.first_layer + i))
                for i in range(info.num_layers)
            )
            self.head = Head(model, shapes) if info.has_head else None
            if model.tied_embeddings and self.embedding is not None and self.head is not None:
                self.head.lm_head.weight = self.embedding.table

        def forward(self, inputs: Any, targets: Any) -> Any:
            h = self.embedding(inputs) if self.embedding is not None else inputs
            for layer in self.layers:
                h = layer(h)
            return self.head(h, targets) if self.head is not None else h

    torch.manual_seed(seed)
    module = Stage()
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, INIT_STD)
            if name.endswith("out.weight") or name.endswith("down.weight"):
                p.mul_(1.0 / (2 * model.num_layers) ** 0.5)
    return module.to(torch_dtype(dtype)).train()


def flat_grad_buffer(params: list[Any], dtype: Any) -> Any:
    """One zeroed buffer holding every parameter's gradient (each `.grad` a view into it, in order): backward
    accumulates into it, and a data-parallel step all-reduces it at once, with no copies."""
    import torch

    flat = torch.zeros(sum(p.numel() for p in params), dtype=dtype)
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat


def parameter_count(module: Any) -> int:
    return sum(p.numel() for p in module.parameters())
