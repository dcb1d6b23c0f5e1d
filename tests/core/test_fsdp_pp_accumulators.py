"""torchtitan's FSDP2 under pipeline parallelism: a stage's gathered parameters and unsharded fp32 gradient
accumulator exist from its first forward / first backward until its last backward (torch.distributed.pipelining
runs FSDP's post-backward, the reduce-scatter, right after a stage's last backward), and the peak is the worst
moment of the schedule, not each part's own peak added (issue 33)."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan.api import resolve_model, resolve_system
from paraplan.graph import layers as L
from paraplan.memory.model import FRAGMENTATION, StageFootprint, pipeline_memory
from paraplan.sim.engine import schedule_plan
from paraplan.specs.training import TrainingSpec

# columns of Plan.memory_moments for two local chunks: live (2), gathered (2), accumulating (2), forwards done (2)
LIVE, GATHERED, ACC, FORWARDS = slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)


def test_interleaved_last_rank_never_holds_both_accumulators() -> None:
    """Interleaved 1F1B, pp 8, vpp 2, 8 micro-batches: rank 7 runs every backward of its second chunk (stage 15)
    before any of its first (stage 7), and stage 15 reduce-scatters after its last one, so no moment holds both
    accumulators; the last loss holds 8 micro-batches of stage 7, one of stage 15 and 8 kept outputs."""
    rows = schedule_plan("interleaved", 8, 2, 8, False).memory_moments[7]
    assert not (rows[:, ACC] > 0).all(axis=1).any()
    last_loss = [8, 1, 1, 1, 0, 1, 8, 8]
    assert any(row.tolist() == last_loss for row in rows)
    cooldown = [7, 0, 1, 0, 1, 0, 8, 8]  # after stage 7's first backward: stage 15 resharded, its grads reduced
    assert any(row.tolist() == cooldown for row in rows)


def test_one_f_one_b_first_rank_accumulator_after_warm_up() -> None:
    """1F1B: rank 0 runs pp forwards before its first backward. With more micro-batches than stages a forward
    follows that backward (pp live with the accumulator); with as many, none does (pp live without it, or pp - 1
    with it)."""
    more = schedule_plan("1f1b", 4, 1, 8, False).memory_moments[0]
    assert more.tolist() == [[4, 1, 1, 8]]
    equal = schedule_plan("1f1b", 8, 1, 8, False).memory_moments[0]
    assert sorted(equal.tolist()) == [[7, 1, 1, 8], [8, 1, 0, 8]]


def test_peak_is_the_worst_moment_in_closed_form() -> None:
    """pipeline_memory on the last rank of interleaved pp 2, vpp 2, 4 micro-batches, bf16 with fp32 reduce:
    moments (live c0, c1 | gathered | accumulating | forwards) [2,1|1,1|1,1|4,4] and [3,0|1,1|1,1|4,2] (from the
    plan); with chunk 0 (stage 1) S1 saved bytes per micro-batch, P1 params, chunk 1 (stage 3) S3, P3 and the
    loss's L logits, the first moment is worst and its parts are exact."""
    model = resolve_model("llama3.1-8b")
    system = resolve_system("h100-sxm5-80gb", 4)
    train = TrainingSpec(
        pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2, data_parallel_size=2,
        global_batch_size=8, seq_length=1024, fsdp=True, zero_stage=3, framework="torchtitan",
        pipeline_schedule="interleaved", grad_reduce_in_fp32=True,
    )  # fmt: skip
    assert train.num_microbatches == 4
    s1, s3, p1, p3, logits = 3e9, 5e9, 1e9, 2e9, 1e8
    stages = [
        StageFootprint(dense_params=1e9, saved_bytes=1e9),
        StageFootprint(dense_params=p1, saved_bytes=s1),
        StageFootprint(dense_params=1e9, saved_bytes=1e9),
        StageFootprint(dense_params=p3, saved_bytes=s3, loss_logits=logits),
    ]
    plan = schedule_plan("interleaved", 2, 2, 4, False)
    holder = [[0, 2], [1, 3]]
    result = pipeline_memory(
        model, L.Shard.of(train), train, system.gpu.hbm_bytes, stages, holder, [0.0, 0.0], plan.memory_moments
    )
    parts = result.ranks[1].parts
    first = (1 + FRAGMENTATION) * (2 * s1 + s3 + 4 * 4 * logits) + 6 * (p1 + p3)
    second = (1 + FRAGMENTATION) * (3 * s1 + 2 * 4 * logits) + 6 * (p1 + p3)
    assert first > second
    assert parts["activations"] == pytest.approx(2 * s1 + s3 + 4 * 4 * logits)
    assert parts["unsharded_params_and_grads"] == pytest.approx(6 * (p1 + p3))
    # a larger stage-1 footprint makes the other moment the worst: the parts follow it
    stages[1] = StageFootprint(dense_params=p1, saved_bytes=20 * s1)
    result = pipeline_memory(
        model, L.Shard.of(train), train, system.gpu.hbm_bytes, stages, holder, [0.0, 0.0], plan.memory_moments
    )
    assert result.ranks[1].parts["activations"] == pytest.approx(3 * 20 * s1 + 2 * 4 * logits)
    # without moments every part at its own peak (the upper bound): the given activations plus every output
    bound = pipeline_memory(model, L.Shard.of(train), train, system.gpu.hbm_bytes, stages, holder, [7.0, 7.0])
    assert bound.ranks[1].parts["unsharded_params_and_grads"] == pytest.approx(6 * (p1 + p3))
    assert bound.ranks[1].parts["activations"] == pytest.approx(7.0 + 4 * 4 * logits)
    assert np.isfinite(result.peak.total_bytes)
