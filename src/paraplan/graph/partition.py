"""Which decoder layers sit on which virtual pipeline stage, and what else each stage holds."""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.specs.model import ModelSpec
from paraplan.specs.training import TrainingSpec

V_SCHEDULES = ("zb-v", "dualpipev", "dualpipe")


def chunks_per_rank(train: TrainingSpec) -> int:
    if train.pipeline_schedule in V_SCHEDULES:
        return 2
    return train.vpp if train.pipeline_schedule == "interleaved" else 1


@dataclass(frozen=True, slots=True)
class VirtualStage:
    """One model chunk in model order: decoder layers [first_layer, first_layer + num_layers)."""

    index: int
    first_layer: int
    num_layers: int
    has_embedding: bool
    has_head: bool  # final norm, LM head, loss (and MTP modules)


def layers_per_virtual_stage(model: ModelSpec, train: TrainingSpec) -> list[int]:
    chunks = chunks_per_rank(train)
    n_virtual = train.pp * chunks
    if train.pipeline_layout is not None:
        return list(train.pipeline_layout)
    first, last = train.decoder_first_pipeline_num_layers, train.decoder_last_pipeline_num_layers
    per_rank = [0] * train.pp
    rest_ranks = list(range(train.pp))
    # Megatron's --account-for-embedding/loss-in-pipeline-split: the embedding and the loss each take
    # the place of one decoder layer on the first and last virtual stage.
    extra_first = int(train.account_for_embedding_in_pipeline_split)
    extra_last = int(train.account_for_loss_in_pipeline_split)
    remaining = model.num_layers + extra_first + extra_last
    if first is not None:
        per_rank[0] = first
        rest_ranks.remove(0)
        remaining -= first
    if last is not None and train.pp > 1:
        per_rank[-1] = last
        rest_ranks.remove(train.pp - 1)
        remaining -= last
    if rest_ranks:
        base, extra = divmod(remaining, len(rest_ranks))
        for i, r in enumerate(rest_ranks):
            per_rank[r] = base + (1 if i < extra else 0)
    # a rank's layers are spread over its chunks; virtual stage v = chunk * pp + rank (Megatron order)
    counts = [0] * n_virtual
    for rank, layers in enumerate(per_rank):
        base, extra = divmod(layers, chunks)
        for c in range(chunks):
            counts[c * train.pp + rank] = base + (1 if c < extra else 0)
    counts[0] -= extra_first
    counts[-1] -= extra_last
    return counts


def virtual_stages(model: ModelSpec, train: TrainingSpec) -> list[VirtualStage]:
    counts = layers_per_virtual_stage(model, train)
    stages, start = [], 0
    for i, n in enumerate(counts):
        stages.append(VirtualStage(i, start, n, has_embedding=i == 0, has_head=i == len(counts) - 1))
        start += n
    return stages
