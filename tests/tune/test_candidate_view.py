"""Candidate is a view of TrainingSpec (issue 31): the tuner's short names read the core's fields."""

from dataclasses import fields

import pytest

from paraplan.specs.training import TrainingSpec
from paraplan.tune.candidate import AXIS_FIELDS, CANDIDATE_AXES, SHARDING_SETTINGS, Candidate, to_training

AXES = dict(
    precision="bf16", tp=2, cp=1, pp=2, vpp=2, schedule="interleaved", ep=1, etp=2, mbs=1, sp=True,
    sharding="zero2", recompute="full", recompute_layers=1, overlap_grad_reduce=True, overlap_param_gather=False,
    tp_comm_overlap=True, ep_overlap=False,
)  # fmt: skip


def test_axes_name_training_fields() -> None:
    names = {f.name for f in fields(TrainingSpec)}
    assert set(AXIS_FIELDS.values()) <= names
    assert all(set(settings) <= names for settings in SHARDING_SETTINGS.values())
    assert set(CANDIDATE_AXES) == {"num_gpus", "sharding", *AXIS_FIELDS}


def test_candidate_reads_its_training_spec() -> None:
    c = Candidate.of(16, **AXES)
    assert {axis: getattr(c, axis) for axis in AXES} == AXES
    assert (c.train.tensor_model_parallel_size, c.train.zero_stage, c.train.recompute_num_layers) == (2, 2, 1)
    assert list(c.to_dict()) == [*CANDIDATE_AXES, "dp"] and c.dp == 4
    assert c.with_axes(sharding="fsdp").train.fsdp and c.structure().recompute == "none"
    with pytest.raises(TypeError, match="warp"):
        c.with_axes(warp=1)


def test_to_training_lays_the_candidate_over_the_problem(dense_problem) -> None:
    c = Candidate.of(8, **{**AXES, "etp": 2})
    train = to_training(dense_problem, c)
    assert train.global_batch_size == dense_problem.gbs and train.seq_length == dense_problem.seq
    assert train.data_parallel_size == 2 and train.zero_stage == 2 and train.expert_tensor_parallel_size is None
