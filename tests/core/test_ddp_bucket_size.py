"""Megatron's DDP bucket size (`--ddp-bucket-size`, issue 36) in the time model: the per-step gradient reduction is
ceil(params / size) collectives, each paying the collective's latency, and with the reduction overlapped the last
bucket (ready when the backward ends) stays exposed. Checked against the closed form of the collective model."""

from __future__ import annotations

import math
import re

import pytest

import paraplan
from paraplan.cost.calibration import at_scale, calibration_for
from paraplan.cost.comm import collective_time_s
from paraplan.errors import ConfigError
from paraplan.graph.ops import CommAxis, CommKind
from paraplan.projection import dp_bucket_count, group_placements, stage_costs
from paraplan.sim.breakdown import ROUNDING_REL
from paraplan.sim.breakdown import BreakdownPart as P
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check, resolve_dp

LLAMA = model_preset("llama3.1-8b")
NODE = system_preset("h100-sxm5-80gb", 8)
CLUSTER = system_preset("h100-sxm5-80gb", 64)


def _train(system, **values: object) -> TrainingSpec:
    values = {"gbs": 64, "seq": 4096, "mbs": 1, "overlap_grad_reduce": True, **values}
    return check(LLAMA, system, resolve_dp(TrainingSpec().with_values(**values), system))


@pytest.mark.parametrize("size", [5_000_000, 40_000_000, 300_000_000])
def test_reduction_is_one_collective_per_bucket(size: int) -> None:
    """total = n x all-reduce(params / n x 4 bytes), n = ceil(params / size): the analytic collective model per
    bucket, its latency paid n times."""
    train = _train(CLUSTER, tp=2, ddp_bucket_size=size)
    (stage,) = stage_costs(LLAMA, CLUSTER, train)
    n = math.ceil(stage.dense_params / size)
    assert n == dp_bucket_count(stage.dense_params, size)
    cal = at_scale(calibration_for(CLUSTER.gpu.name, train.framework), CLUSTER.num_gpus)
    group = group_placements(train, CLUSTER)[CommAxis.DP]
    one = collective_time_s(CommKind.ALL_REDUCE, stage.dense_params / n * 4, group, CLUSTER, cal)
    assert stage.dp_grad_reduce_s == pytest.approx(n * one, rel=1e-12)


def test_smaller_buckets_expose_less_last_bucket_and_pay_more_latency() -> None:
    """Halving the bucket halves the last bucket's collective (about: the bandwidth term) and adds latency to the
    total; on one node the backward hides all but the last bucket, so the exposed part follows the last bucket."""
    sizes = (400_000_000, 100_000_000, 25_000_000)
    totals, lasts, exposed = [], [], []
    for size in sizes:
        train = _train(NODE, tp=1, gbs=8, ddp_bucket_size=size)
        (stage,) = stage_costs(LLAMA, NODE, train)
        n = dp_bucket_count(stage.dense_params, size)
        totals.append(stage.dp_grad_reduce_s)
        lasts.append(stage.dp_grad_reduce_s / n)
        p = paraplan.project(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=8, tp=1, mbs=1, gbs=8, seq=4096,
                             overlap_grad_reduce=True, ddp_bucket_size=size)  # fmt: skip
        exposed.append(p.breakdown[P.DP_GRAD_REDUCE_EXPOSED])
        assert p.breakdown[P.DP_GRAD_REDUCE_EXPOSED] >= lasts[-1] * (1 - 1e-9)  # the last bucket never hides
        assert p.pipeline.comm_exposed_s["dp"] <= p.pipeline.comm_total_s["dp"] * (1 + 1e-12)
        assert min(p.breakdown.values()) >= 0
    assert totals[0] < totals[1] < totals[2]
    assert lasts[0] > lasts[1] > lasts[2]
    assert exposed[0] > exposed[1] > exposed[2]


def test_latency_bound_buckets_cost_more_than_they_hide() -> None:
    """Over 8 nodes, million-parameter buckets are thousands of collectives: the step is slower than with 40M."""
    common = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=64, tp=1, mbs=1, gbs=64, seq=4096,
                  overlap_grad_reduce=True)  # fmt: skip
    tiny = paraplan.project(**common, ddp_bucket_size=1_000_000)
    usual = paraplan.project(**common, ddp_bucket_size=40_000_000)
    assert tiny.pipeline.comm_total_s["dp"] > 2 * usual.pipeline.comm_total_s["dp"]
    assert tiny.step_time_s > usual.step_time_s


@pytest.mark.parametrize(("gpus", "cp", "size"), [(64, 1, 64_000_000), (16, 1, 40_000_000), (64, 2, 64_000_000)])
def test_unset_is_megatron_cores_default(gpus: int, cp: int, size: int) -> None:
    """Unset, a megatron-core run that overlaps the reduction buckets max(40M, 1M x dp x cp) parameters
    (megatron/training/training.py get_model): the same step as that size given explicitly, and not the fixed
    per-chunk count the other frameworks keep."""
    common = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=gpus, tp=1, cp=cp, mbs=1, gbs=64, seq=4096,
                  overlap_grad_reduce=True, framework="megatron-lm")  # fmt: skip
    unset = paraplan.project(**common)
    assert unset.step_time_s == paraplan.project(**common, ddp_bucket_size=size).step_time_s
    assert (
        unset.pipeline.comm_total_s["dp"]
        != paraplan.project(**common, ddp_bucket_size=size // 4).pipeline.comm_total_s["dp"]
    )


@pytest.mark.parametrize(
    "values",
    [dict(framework="megatron-lm", overlap_grad_reduce=False), dict(framework="megatron-deepspeed"),
     dict(framework="llm-foundry", fsdp=True)],
)  # fmt: skip
def test_unset_outside_megatron_core_overlap_keeps_the_fixed_count(values: dict) -> None:
    """No bucket size where the buckets are not megatron-core DDP's overlapped ones: the fixed count stands."""
    train = _train(CLUSTER, tp=1, **{"overlap_grad_reduce": True, **values})
    assert train.effective_ddp_bucket_size is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (dict(ddp_bucket_size=0), "ddp_bucket_size must be a positive whole number of parameters (got 0)"),
        (dict(ddp_bucket_size=-5), "ddp_bucket_size must be a positive"),
        (dict(fsdp=True, ddp_bucket_size=40_000_000), "ddp_bucket_size applies to Megatron's DDP buckets"),
        (dict(zero_stage=2, ddp_bucket_size=40_000_000), "ZeRO-2"),
    ],
)
def test_bad_bucket_sizes_are_refused(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _train(NODE, **values)


@pytest.mark.parametrize(
    "values",
    [
        dict(
            model="llama3.1-8b",
            gpus=64,
            tp=2,
            pp=2,
            vpp=2,
            pipeline_schedule="interleaved",
            gbs=64,
            dist_opt=True,
            overlap_param_gather=True,
        ),
        dict(model="mixtral-8x7b", gpus=64, tp=2, pp=2, ep=4, sp=True, gbs=64, dist_opt=True),
        dict(model="llama3.1-8b", gpus=16, tp=1, pp=1, gbs=16, overlap_grad_reduce=False),
    ],
)
@pytest.mark.parametrize("size", [2_000_000, 40_000_000, 500_000_000])
def test_bucketed_breakdowns_keep_the_invariants(values: dict, size: int) -> None:
    """Parts >= 0 summing to the step, exposed <= total per kind, over pipelines, virtual stages, the distributed
    optimizer's bucketed gather and experts' own buckets."""
    values = {"gpu": "h100-sxm5-80gb", "mbs": 1, "seq": 4096, "overlap_grad_reduce": True, **values}
    p = paraplan.project(**values, ddp_bucket_size=size)
    assert min(p.breakdown.values()) >= 0
    assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=ROUNDING_REL)
    for kind, seconds in p.pipeline.comm_exposed_s.items():
        assert seconds <= p.pipeline.comm_total_s.get(kind, 0.0) * (1 + ROUNDING_REL) + 1e-15, kind


def test_papers_era_torch_ddp_keeps_the_fixed_count() -> None:
    """The Megatron-LM papers' runs (`--DDP-impl torch`, before megatron-core's DDP) have no megatron-core default
    bucket; an unknown implementation is refused with the choices."""
    papers = TrainingSpec(framework="megatron-lm", overlap_grad_reduce=True, ddp_impl="torch")
    assert papers.effective_ddp_bucket_size is None
    with pytest.raises(ConfigError, match="unknown ddp_impl 'apex': choose one of megatron-core, torch, local"):
        _train(NODE, ddp_impl="apex")
