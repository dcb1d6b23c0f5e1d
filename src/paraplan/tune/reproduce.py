"""The commands that reproduce a configuration: `paraplan project ...` and Megatron-LM arguments."""

from __future__ import annotations

import shlex

from paraplan.cost.profiled import ProfileRef
from paraplan.formats.megatron import megatron_argument_list
from paraplan.formats.megatron_map import megatron_plan_values
from paraplan.specs.schedule import SCHEDULES, PipelineSchedule
from paraplan.specs.training import TrainingSpec
from paraplan.tune.candidate import Candidate, TuneProblem, to_training


def _not_in_megatron(schedule: PipelineSchedule) -> str:
    """A note for a schedule Megatron-LM does not run: what it is, and which framework runs it."""
    if "megatron" in schedule.framework_names:
        return ""
    elsewhere = "; ".join(f"{fw}: {name}" for fw, name in schedule.framework_names.items())
    return f"{schedule.label} ({schedule.source}) is not a Megatron-LM schedule" + (
        f" (runs in {elsewhere})" if elsewhere else ""
    )


def training_of(problem: TuneProblem, c: Candidate, train: TrainingSpec | None = None) -> TrainingSpec:
    return train if train is not None else to_training(problem, c)


def paraplan_command(problem: TuneProblem, num_gpus: int, t: TrainingSpec) -> str:
    model = problem.model_ref or problem.model.name
    gpu = problem.gpu_ref or problem.systems[0].name or problem.systems[0].gpu.name
    args = [
        f"paraplan project --model {model} --gpu {gpu} --gpus {num_gpus}",
        f"--tp {t.tp} --pp {t.pp} --cp {t.cp}",
    ]
    if t.vpp > 1:
        args.append(f"--vpp {t.vpp}")
    if t.ep > 1 or (problem.model.is_moe and t.expert_tensor_parallel_size is not None):
        args.append(f"--ep {t.ep} --etp {t.etp}")
    args.append(f"--mbs {t.mbs} --gbs {t.gbs} --seq {t.seq}")
    args.append("--sp" if t.sequence_parallel else "--no-sp")
    args.append(f"--recompute {t.recompute_granularity}")
    if t.recompute_num_layers is not None:
        args.append(f"--recompute-num-layers {t.recompute_num_layers}")
    if t.fsdp:
        args.append("--fsdp")
    elif t.zero_stage:
        args.append(f"--zero {t.zero_stage}")
    else:
        args.append("--distributed-optimizer" if t.use_distributed_optimizer else "--no-distributed-optimizer")
    for flag, on in (
        ("overlap-grad-reduce", t.overlap_grad_reduce),
        ("overlap-param-gather", t.overlap_param_gather),
        ("tp-comm-overlap", t.tp_comm_overlap),
        ("ep-overlap", t.moe_ep_overlap),
    ):
        if on:
            args.append(f"--{flag}")
    if t.ddp_bucket_size is not None:
        args.append(f"--ddp-bucket-size {t.ddp_bucket_size}")
    args.append(f"--precision {t.precision} --schedule {t.pipeline_schedule}")
    if t.account_for_embedding_in_pipeline_split:
        args.append("--account-for-embedding-in-pipeline-split")
    if t.account_for_loss_in_pipeline_split:
        args.append("--account-for-loss-in-pipeline-split")
    if t.framework != TrainingSpec().framework:
        args.append(f"--framework {t.framework}")
    if t.attention_backend != TrainingSpec().attention_backend:
        args.append(f"--attention-backend {t.attention_backend}")
    if not t.kernel_fusion:
        args.append("--no-kernel-fusion")
    if t.cross_entropy_fusion:
        args.append("--cross-entropy-fusion")
    if problem.model.is_moe and t.moe_token_dispatcher_type != TrainingSpec().moe_token_dispatcher_type:
        args.append(f"--moe-dispatcher {t.moe_token_dispatcher_type}")
    if isinstance(problem.profile, ProfileRef):  # the profile the tuner projected it with
        args.append(f"--profile {shlex.quote(problem.profile.option)}")
    return " ".join(args)


def megatron_args(problem: TuneProblem, t: TrainingSpec) -> str:
    """Megatron-LM (megatron/training/arguments.py) flags for the parallel plan, model flags omitted: the Megatron
    writer's own values (`formats.megatron_map.megatron_plan_values`), and after a `#` what Megatron-LM cannot
    run as planned (a schedule it does not have)."""
    values, gaps = megatron_plan_values(problem.model, problem.systems[0], t)
    text = shlex.join(megatron_argument_list(values))
    notes = [gap for gap in gaps if not gap.startswith("pipeline schedule")]
    schedule_note = _not_in_megatron(SCHEDULES[t.pipeline_schedule])
    if schedule_note:  # the writer's gap says Megatron runs 1F1B; say where the schedule runs instead
        notes.insert(0, schedule_note)
    return f"{text}  # {'; '.join(notes)}" if notes else text
