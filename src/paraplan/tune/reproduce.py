"""The commands that reproduce a configuration: `paraplan project ...` and Megatron-LM arguments."""

from __future__ import annotations

import shlex

from paraplan.cost.profiled import ProfileRef
from paraplan.specs.schedule import SCHEDULES, PipelineSchedule
from paraplan.specs.training import TrainingSpec
from paraplan.tune.candidate import Candidate, TuneProblem, to_training

# Megatron-LM / Transformer Engine FP8 recipes (megatron/training/arguments.py: --fp8-format, --fp8-recipe)
_FP8_RECIPE = {"fp8": "delayed", "fp8_cs": "tensorwise", "fp8_blockwise": "blockwise", "mxfp8": "mxfp8"}


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
    """Megatron-LM (megatron/training/arguments.py) flags for the parallel plan; model flags omitted."""
    args = [
        f"--tensor-model-parallel-size {t.tp}",
        f"--pipeline-model-parallel-size {t.pp}",
        f"--context-parallel-size {t.cp}",
    ]
    if SCHEDULES[t.pipeline_schedule].interleaves and t.vpp > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank {t.vpp}")
    if problem.model.is_moe:
        args.append(f"--expert-model-parallel-size {t.ep} --expert-tensor-parallel-size {t.etp}")
    args.append(f"--micro-batch-size {t.mbs} --global-batch-size {t.gbs} --seq-length {t.seq}")
    if t.sequence_parallel:
        args.append("--sequence-parallel")
    if t.recompute_granularity == "selective":
        args.append("--recompute-granularity selective")
    elif t.recompute_granularity == "full":
        if t.recompute_num_layers is None:
            args.append("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
        else:
            args.append(
                f"--recompute-granularity full --recompute-method block --recompute-num-layers {t.recompute_num_layers}"
            )
    if t.fsdp:
        args.append("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params")
    elif t.zero_stage == 2:
        args.append("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads")
    elif t.use_distributed_optimizer:
        args.append("--use-distributed-optimizer")
    if t.overlap_grad_reduce:
        args.append("--overlap-grad-reduce")
    if t.overlap_param_gather:
        args.append("--overlap-param-gather")
    if t.tp_comm_overlap:
        args.append("--tp-comm-overlap")
    if t.moe_ep_overlap:
        args.append("--overlap-moe-expert-parallel-comm")
    if problem.model.is_moe and t.moe_token_dispatcher_type == "flex":
        args.append("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep")
    if t.cross_entropy_fusion:
        args.append("--cross-entropy-loss-fusion")
    if t.account_for_embedding_in_pipeline_split:
        args.append("--account-for-embedding-in-pipeline-split")
    if t.account_for_loss_in_pipeline_split:
        args.append("--account-for-loss-in-pipeline-split")
    if t.precision in _FP8_RECIPE:
        args.append(f"--bf16 --fp8-format hybrid --fp8-recipe {_FP8_RECIPE[t.precision]}")
    elif t.precision == "nvfp4":
        args.append("--bf16 --fp4-format e2m1")
    else:
        args.append(f"--{t.precision}")
    if t.attention_backend == "flash":
        args.append("--attention-backend flash")
    text = " ".join(args)
    note = _not_in_megatron(SCHEDULES[t.pipeline_schedule])
    return f"{text}  # {note}" if note else text
