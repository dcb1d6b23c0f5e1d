"""Which decoder layers sit on which model stage, and what else each stage holds.

The schedule decides how many model stages there are and which (rank, local chunk) holds each
(`paraplan.specs.schedule.PipelineSchedule.stage_order`): pp for 1F1B-like schedules and DualPipe (whose
second chunk per rank is a copy), pp * vpp for interleaved 1F1B, 2 * pp for the V schedules.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from paraplan.specs.model import ModelSpec
from paraplan.specs.training import TrainingSpec


def chunks_per_rank(train: TrainingSpec) -> int:
    return train.schedule.chunks_per_rank(train.vpp)


def model_stage_ranks(train: TrainingSpec) -> list[tuple[int, int]]:
    """(rank, local chunk) of each model stage, in model order."""
    return train.schedule.stage_order(train.pp, train.vpp)


@dataclass(frozen=True, slots=True)
class VirtualStage:
    """One model stage (chunk) in model order: decoder layers [first_layer, first_layer + num_layers)."""

    index: int
    first_layer: int
    num_layers: int
    has_embedding: bool
    has_head: bool  # final norm, LM head, loss (and MTP modules)


def layers_per_virtual_stage(model: ModelSpec, train: TrainingSpec) -> list[int]:
    order = model_stage_ranks(train)
    if train.pipeline_layout is not None:
        return list(train.pipeline_layout)
    first, last = train.decoder_first_pipeline_num_layers, train.decoder_last_pipeline_num_layers
    per_rank = [0] * train.pp
    rest_ranks = list(range(train.pp))
    # Megatron's --account-for-embedding/loss-in-pipeline-split: the embedding and the loss each take
    # the place of one decoder layer on the first and last model stage.
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
    # a rank's layers are spread over the model stages it holds
    stages_of_rank: dict[int, list[int]] = {}
    for index, (rank, _chunk) in enumerate(order):
        stages_of_rank.setdefault(rank, []).append(index)
    counts = [0] * len(order)
    for rank, layers in enumerate(per_rank):
        own = stages_of_rank.get(rank, [])
        base, extra = divmod(layers, max(1, len(own)))
        for i, index in enumerate(own):
            counts[index] = base + (1 if i < extra else 0)
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


PipelineSplit = tuple[str, int, int, tuple[int, ...] | None, int | None, int | None, bool, bool]
"""What decides the model stages: schedule, pp, vpp, explicit layout, first and last stage's layer counts, and
whether the embedding and the loss each count as a layer."""


def pipeline_split(train: TrainingSpec) -> PipelineSplit:
    return (
        train.pipeline_schedule,
        train.pp,
        train.vpp,
        train.pipeline_layout,
        train.decoder_first_pipeline_num_layers,
        train.decoder_last_pipeline_num_layers,
        train.account_for_embedding_in_pipeline_split,
        train.account_for_loss_in_pipeline_split,
    )


@lru_cache(maxsize=4096)
def split_stages(model: ModelSpec, split: PipelineSplit) -> tuple[VirtualStage, ...]:
    """`virtual_stages` of any training spec with this split (the tuner and the projection ask for few splits)."""
    schedule, pp, vpp, layout, first, last, account_embedding, account_loss = split
    train = TrainingSpec(
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp,
        pipeline_schedule=schedule,
        pipeline_layout=layout,
        decoder_first_pipeline_num_layers=first,
        decoder_last_pipeline_num_layers=last,
        account_for_embedding_in_pipeline_split=account_embedding,
        account_for_loss_in_pipeline_split=account_loss,
    )
    return tuple(virtual_stages(model, train))
