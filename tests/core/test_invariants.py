"""Physical invariants of a projection, over random valid layouts (hypothesis; issue 34).

Every layout is built from presets (dense MHA and GQA, MoE, MLA, a hybrid Mamba model), GPUs, parallel degrees,
batch, recompute, schedule, sharding, precision and overlap switches, and kept only when the validator accepts it
(`specs.validate.check`): the invariants are promises about valid input. Examples are derandomized so CI sees the
same ones every run; the `slow` variants draw many more.
"""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from paraplan.errors import ConfigError
from paraplan.projection import project_specs
from paraplan.result import Projection
from paraplan.sim.breakdown import ROUNDING_REL, BreakdownPart
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.schedule import SCHEDULES
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import RECOMPUTES, TRAINING_PRECISIONS, TrainingSpec
from paraplan.specs.validate import check

MODELS = (
    "llama3.1-8b",  # dense, GQA
    "gpt3-175b",  # dense, multi-head attention
    "mixtral-8x7b",  # MoE, 8 experts
    "qwen3-30b-a3b",  # MoE, 128 fine-grained experts
    "deepseek-v3",  # MLA, MoE with shared experts and dense first layers, MTP; 61 layers (an uneven split)
    "nemotron-h-8b",  # hybrid Mamba-2 / attention / MLP pattern
)
GPUS = ("h100-sxm5-80gb", "a100-sxm4-80gb", "b200")
SHARDING = ("ddp", "distributed_optimizer", "fsdp", "zero1", "zero2", "zero3")
FRAMEWORKS = ("megatron-lm", "nemo-megatron", "torchtitan", "deepspeed")


class Run(tuple[ModelSpec, SystemSpec, TrainingSpec]):
    """(model, system, training), shown as the `paraplan project` settings that differ from the defaults."""

    def __repr__(self) -> str:
        model, system, train = self
        default = TrainingSpec()
        changed = {
            f.name: getattr(train, f.name) for f in fields(train) if getattr(train, f.name) != getattr(default, f.name)
        }
        return f"Run({model.name}, {system.num_gpus} x {system.gpu.name}, {changed})"


def _even_layout(layers: int, stages: int) -> tuple[int, ...]:
    """`layers` spread over `stages` as evenly as integers allow (the first stages one more)."""
    base, extra = divmod(layers, stages)
    return tuple(base + (i < extra) for i in range(stages))


@st.composite
def runs(draw: st.DrawFn) -> Run:
    """A (model, system, training) triple the validator accepts."""
    model = model_preset(draw(st.sampled_from(MODELS)))
    gpu = draw(st.sampled_from(GPUS))
    tp = draw(st.sampled_from((1, 2, 4, 8)))
    pp = draw(st.sampled_from((1, 2, 4)))
    cp = draw(st.sampled_from((1, 1, 2)))
    dp = draw(st.sampled_from((1, 2, 4)))
    schedule = draw(st.sampled_from(sorted(SCHEDULES)))
    vpp = draw(st.sampled_from((1, 2))) if SCHEDULES[schedule].interleaves else 1
    ep = draw(st.sampled_from((1, 2, 4, 8))) if model.is_moe else 1
    mbs = draw(st.sampled_from((1, 2)))
    microbatches = draw(st.sampled_from((1, 2, 4, 8))) * (pp if draw(st.booleans()) else 1)
    sharding = draw(st.sampled_from(SHARDING))
    precision = draw(st.sampled_from([p for p in TRAINING_PRECISIONS if p != "fp32"]))
    sp = tp > 1 and ((model.is_moe and ep > 1) or draw(st.booleans()))
    stages = SCHEDULES[schedule].model_stages(pp, vpp)
    uneven = model.num_layers % stages != 0 or (model.is_hybrid and vpp > 1)
    train = TrainingSpec().with_values(
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=cp,
        dp=dp,
        ep=ep,
        mbs=mbs,
        gbs=mbs * dp * microbatches,
        seq=draw(st.sampled_from((1024, 2048, 4096))),
        sequence_parallel=sp,
        recompute=draw(st.sampled_from(RECOMPUTES)),
        pipeline_schedule=schedule,
        precision=precision,
        use_distributed_optimizer=sharding == "distributed_optimizer",
        fsdp=sharding == "fsdp",
        zero_stage={"zero1": 1, "zero2": 2, "zero3": 3}.get(sharding, 0),
        overlap_grad_reduce=draw(st.booleans()),
        overlap_param_gather=draw(st.booleans()),
        tp_comm_overlap=sp and draw(st.booleans()),
        moe_ep_overlap=model.is_moe and draw(st.booleans()),
        framework=draw(st.sampled_from(FRAMEWORKS)),
        pipeline_layout=_even_layout(model.num_layers, stages) if uneven and stages <= model.num_layers else None,
    )
    system = system_preset(gpu, tp * pp * cp * dp)
    try:
        train = check(model, system, train)
    except ConfigError:
        assume(False)  # the validator's refusals are not projections; their messages are tested elsewhere
    return Run((model, system, train))


def _project(run: Run) -> Projection:
    return project_specs(*run)


FAST = settings(
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
SLOW = settings(FAST, max_examples=2000)


def _check_breakdown(p: Projection) -> None:
    parts = p.breakdown
    assert parts, "the breakdown is empty"
    negative = {name: seconds for name, seconds in parts.items() if seconds < 0}
    assert not negative, f"negative parts {negative} of a {p.step_time_s} s step"
    total = sum(parts.values())
    assert abs(total - p.step_time_s) <= ROUNDING_REL * p.step_time_s, (total, p.step_time_s)
    assert parts[BreakdownPart.FORWARD_COMPUTE] > 0 and parts[BreakdownPart.BACKWARD_COMPUTE] > 0, parts
    assert all(b >= 0 for b in p.pipeline.bubble_s), p.pipeline.bubble_s


def _check_communication(p: Projection) -> None:
    total, exposed = p.pipeline.comm_total_s, p.pipeline.comm_exposed_s
    for kind, seconds in exposed.items():
        assert seconds >= 0, (kind, seconds)
        assert seconds <= total.get(kind, 0.0) * (1 + ROUNDING_REL) + 1e-15, (kind, seconds, total.get(kind, 0.0))


def _check_rates(p: Projection) -> None:
    assert 0 < p.mfu <= 1, (p.mfu, p.train.precision, p.peak_precision)
    assert 0 < p.hfu <= 1, (p.hfu, p.train.precision, p.peak_precision)
    assert p.mfu <= p.hfu * (1 + ROUNDING_REL)
    tokens_per_s = p.train.gbs * p.train.seq / p.step_time_s
    assert p.tokens_per_sec_per_gpu * p.system.num_gpus == pytest.approx(tokens_per_s, rel=1e-12)
    assert p.mfu_bf16_peak == pytest.approx(p.mfu * p.peak_flops_per_gpu / p.bf16_peak_flops_per_gpu, rel=1e-12)


def _check_bandwidth(run: Run, p: Projection) -> None:
    """Twice the NIC or the scale-up bandwidth never makes the step slower."""
    model, system, train = run
    for field in ("nic_gbps", "scale_up_gbps"):
        faster = replace(system, **{field: 2 * getattr(system, field)})
        step = project_specs(model, faster, train).step_time_s
        assert step <= p.step_time_s * (1 + ROUNDING_REL), (field, step, p.step_time_s)


@FAST
@given(runs())
def test_breakdown_parts_are_non_negative_and_sum_to_the_step(run: Run) -> None:
    _check_breakdown(_project(run))


@FAST
@given(runs())
def test_exposed_communication_never_exceeds_its_total(run: Run) -> None:
    _check_communication(_project(run))


@FAST
@given(runs())
def test_utilisation_and_throughput(run: Run) -> None:
    _check_rates(_project(run))


@settings(FAST, max_examples=25)
@given(runs())
def test_more_bandwidth_is_never_slower(run: Run) -> None:
    _check_bandwidth(run, _project(run))


@pytest.mark.slow
@SLOW
@given(runs())
def test_every_invariant_on_many_layouts(run: Run) -> None:
    p = _project(run)
    _check_breakdown(p)
    _check_communication(p)
    _check_rates(p)
    _check_bandwidth(run, p)
