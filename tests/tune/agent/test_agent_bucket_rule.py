"""The DDP bucket-size rule (issue 36): on a job whose overlapped gradient reduction leaves its last bucket exposed it
proposes smaller buckets, on one with many latency-bound buckets larger ones; each hypothesis quotes the figures and
each proposal passes the validator and moves the projection the way it says."""

from __future__ import annotations

from paraplan.sim.breakdown import BreakdownPart as P
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check, resolve_dp
from paraplan.tune.agent.changes import apply_changes
from paraplan.tune.agent.diagnosis import Diagnosis, diagnose
from paraplan.tune.agent.proposers.rules import RULES
from paraplan.tune.candidate import TuneProblem
from paraplan.tune.reproduce import megatron_args, paraplan_command


def _diagnosis(gpus: int, **values: object) -> tuple[TuneProblem, Diagnosis]:
    model, system = model_preset("llama3.1-8b"), system_preset("h100-sxm5-80gb", gpus)
    values = {"seq": 4096, "mbs": 1, "gbs": gpus, **values}
    train = check(model, system, resolve_dp(TrainingSpec().with_values(**values), system))
    problem = TuneProblem(model, (system,), train.gbs, train.seq, train)
    return problem, diagnose(problem, train)


def _judged(problem: TuneProblem, d: Diagnosis, changes: dict) -> Diagnosis:
    train, _ = apply_changes(d.model, d.system, d.train, changes)
    return diagnose(problem, train)  # the validator runs inside


def test_large_buckets_get_smaller_ones_and_expose_less() -> None:
    """2B-parameter buckets over 64 GPUs: the last bucket (one fifth of the model's reduction) after the backward."""
    problem, d = _diagnosis(64, overlap_grad_reduce=True, ddp_bucket_size=2_000_000_000)
    assert d.share(P.DP_GRAD_REDUCE_EXPOSED) >= 0.02
    found = RULES["ddp_bucket_size"].propose(d)
    sizes = [changes["ddp_bucket_size"] for _, changes in found]
    assert sizes == [1_000_000_000, 500_000_000]
    for hypothesis, changes in found:
        assert "5 buckets of 2.00B" in hypothesis and "the last one" in hypothesis and "ms" in hypothesis
        after = _judged(problem, d, changes)
        assert after.seconds(P.DP_GRAD_REDUCE_EXPOSED) < d.seconds(P.DP_GRAD_REDUCE_EXPOSED)


def test_tiny_buckets_are_latency_bound_and_get_larger_ones() -> None:
    problem, d = _diagnosis(64, overlap_grad_reduce=True, ddp_bucket_size=1_000_000)
    found = RULES["ddp_bucket_size"].propose(d)
    assert [changes["ddp_bucket_size"] for _, changes in found] == [2_000_000, 4_000_000]
    for hypothesis, changes in found:
        assert "latency-bound" in hypothesis and "8030 buckets of 1M" in hypothesis
        after = _judged(problem, d, changes)
        assert after.step_time_s < d.step_time_s


def test_quiet_without_a_megatron_ddp_reduction() -> None:
    for values in (dict(tp=8), dict(fsdp=True, overlap_grad_reduce=True), dict(framework="torchtitan", fsdp=True)):
        _, d = _diagnosis(8, **values)
        assert not RULES["ddp_bucket_size"].propose(d), values


def test_a_kept_bucket_size_is_in_the_reproducing_commands() -> None:
    problem, d = _diagnosis(64, overlap_grad_reduce=True, ddp_bucket_size=25_000_000)
    assert "--ddp-bucket-size 25000000" in paraplan_command(problem, 64, d.train)
    assert "--ddp-bucket-size 25000000" in megatron_args(problem, d.train)
