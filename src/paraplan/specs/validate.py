"""Every layout rule, in one place. All violations are collected and reported at once, one line each."""

from __future__ import annotations

from dataclasses import replace

from paraplan.errors import ConfigError
from paraplan.specs.knobs import knob_problems
from paraplan.specs.model import ModelSpec
from paraplan.specs.schedule import SCHEDULES, validate_schedule
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import (
    ATTENTION_BACKENDS,
    DEEPSPEED_FRAMEWORKS,
    DISPATCHERS,
    FRAMEWORKS,
    RECOMPUTES,
    TRAINING_PRECISIONS,
    TrainingSpec,
)


def resolve_dp(train: TrainingSpec, system: SystemSpec) -> TrainingSpec:
    """Fill in data parallelism from the GPU count when not given (world = tp * pp * cp * dp)."""
    if train.data_parallel_size is not None:
        return train
    model_parallel = train.tp * train.pp * train.cp
    dp = system.num_gpus // model_parallel if model_parallel > 0 else 0
    return replace(train, data_parallel_size=max(dp, 1) if system.num_gpus % max(model_parallel, 1) == 0 else dp)


# Megatron-LM arguments.py: the choices of the precision-aware optimizer's dtypes
OPTIMIZER_DTYPE_CHOICES = {
    "main_params_dtype": ("fp32", "fp16"),
    "main_grads_dtype": ("fp32", "bf16"),
    "exp_avg_dtype": ("fp32", "fp16", "bf16", "fp8"),
    "exp_avg_sq_dtype": ("fp32", "fp16", "bf16", "fp8"),
}


def optimizer_dtype_problems(train: TrainingSpec) -> list[str]:
    """Each optimizer dtype is one of Megatron's choices, and only the precision-aware optimizer takes one other
    than fp32 (Megatron-LM asserts the same)."""
    p: list[str] = []
    for name, choices in OPTIMIZER_DTYPE_CHOICES.items():
        value = getattr(train, name)
        if value not in choices:
            p.append(f"unknown {name} '{value}': choose one of {', '.join(choices)}")
        elif value != "fp32" and not train.use_precision_aware_optimizer:
            p.append(f"{name} {value} needs use_precision_aware_optimizer (Megatron keeps fp32 otherwise)")
    return p


def float8_gather_problems(train: TrainingSpec) -> list[str]:
    """`fsdp_float8_all_gather` is torchao's float8 all-gather for torch FSDP2: torchtitan's `fully_shard` (another
    framework's sharding never calls `fsdp_pre_all_gather`) of per-tensor float8 weights (torchao's
    `Float8LinearConfig` asserts tensorwise scaling with it, torchtitan refuses it beside a `recipe_name`): fp8_cs,
    or fp8 (torchao before 0.9 gathered delayed-scaling weights too, `WeightWithDelayedFloat8CastTensor`)."""
    if not train.fsdp_float8_all_gather:
        return []
    p = []
    if train.framework != "torchtitan" or not train.fsdp:
        p.append("fsdp_float8_all_gather needs torchtitan's FSDP (torch FSDP2 all-gathers torchao's float8 weights)")
    if train.precision not in ("fp8", "fp8_cs"):
        p.append(
            f"fsdp_float8_all_gather needs per-tensor FP8, precision fp8_cs or fp8 (torchao's tensorwise float8; "
            f"got {train.precision})"
        )
    return p


def setting_problems(train: TrainingSpec) -> list[str]:
    """Named settings that must be one of a known set (whatever the layout): one line per unknown value."""
    p: list[str] = []
    if train.recompute_granularity not in RECOMPUTES:
        p.append(f"unknown recompute '{train.recompute_granularity}': choose one of {', '.join(RECOMPUTES)}")
    if train.attention_backend not in ATTENTION_BACKENDS:
        choices = ", ".join(ATTENTION_BACKENDS)
        p.append(f"unknown attention backend '{train.attention_backend}': choose one of {choices}")
    if train.framework not in FRAMEWORKS:
        p.append(f"unknown framework '{train.framework}': choose one of {', '.join(FRAMEWORKS)}")
    p += optimizer_dtype_problems(train)
    p += float8_gather_problems(train)
    if train.moe_token_dispatcher_type not in DISPATCHERS:
        p.append(
            f"unknown MoE token dispatcher '{train.moe_token_dispatcher_type}': choose one of {', '.join(DISPATCHERS)}"
        )
    return p


MAX_MODEL_STAGES = 4096
"""Most pipeline chunks (pp x model chunks per rank: vpp, or two for zb-v, DualPipe and DualPipeV) accepted: the
graph, the memory model and the simulator build each one. Published runs use a few hundred at most (pp 64 for the
1T-parameter GPT of Narayanan et al. SC21, Table 1), so 4096 leaves room for any real layout."""
MAX_PIPELINE_WORK = 2**20
"""Most micro-batches x pipeline chunks accepted (1 M): the simulator and the memory model work per micro-batch and
chunk (gbs 1e7 on 8 GPUs took 5 GB, issue 34; at this limit a projection takes about 10-15 s and 1.4 GB of memory,
more with DualPipe's paired tasks); published Megatron runs stay below a few hundred thousand (e.g. 4096
micro-batches x pp 16 x vpp 4 = 262,144)."""


def _chunks_per_rank(train: TrainingSpec) -> int:
    """Model chunks each pipeline rank plays: the schedule's (vpp for interleaved, 2 for the V and DualPipe
    layouts), vpp for an unknown schedule (refused later, with its name)."""
    spec = SCHEDULES.get(train.pipeline_schedule)
    return spec.chunks_per_rank(train.vpp) if spec is not None else train.vpp


def size_problems(train: TrainingSpec) -> list[str]:
    """Sizes the tool works in proportion to, refused before the work (pipeline chunks, micro-batches, layout):
    everything here is arithmetic on the spec's numbers, nothing built per stage or per micro-batch."""
    p: list[str] = []
    chunks = _chunks_per_rank(train)
    stages = train.pp * chunks
    label = "pp*vpp" if chunks == train.vpp else f"pp*chunks per rank ({train.pipeline_schedule})"
    if stages > MAX_MODEL_STAGES:
        p.append(f"{label} = {train.pp}*{chunks} = {stages} model stages is more than the {MAX_MODEL_STAGES} accepted")
    elif train.data_parallel_size is not None and train.dp >= 1 and train.mbs >= 1:
        microbatches = train.gbs // (train.mbs * train.dp)
        work = microbatches * stages
        if work > MAX_PIPELINE_WORK:
            p.append(
                f"micro-batches x model stages = {microbatches} x {stages} = {work} is more "
                f"than the {MAX_PIPELINE_WORK} the simulator plays (lower gbs or raise mbs)"
            )
    if train.pipeline_layout is not None and any(n < 0 for n in train.pipeline_layout):
        p.append(f"pipeline layout layer counts must be >= 0 (got {','.join(map(str, train.pipeline_layout))})")
    return p


_LAST: list[tuple[ModelSpec, SystemSpec, TrainingSpec, tuple[str, ...]]] = []
"""The last `layout_problems` call's arguments (held, so compared by identity) and answer: the tuner validates a
candidate's spec, then projects that very spec (`check`), with nothing between."""


def layout_problems(model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> list[str]:
    """Return one line per violated rule, naming the rule and the numbers (the specs are frozen values: the same
    objects as the last call's give its answer)."""
    if _LAST:
        last_model, last_system, last_train, problems = _LAST[0]
        if train is last_train and model is last_model and system is last_system:
            return list(problems)
    found = _layout_problems(model, system, train)
    _LAST[:] = [(model, system, train, tuple(found))]
    return found


def _layout_problems(model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> list[str]:
    p: list[str] = []
    tp, pp, vpp, cp, ep, etp, dp = train.tp, train.pp, train.vpp, train.cp, train.ep, train.etp, train.dp
    for name, value in (("tp", tp), ("pp", pp), ("vpp", vpp), ("cp", cp), ("ep", ep), ("etp", etp)):
        if value < 1:
            p.append(f"{name} must be >= 1 (got {value})")
    if train.mbs < 1 or train.gbs < 1 or train.seq < 1:
        p.append(f"mbs, gbs and seq must be >= 1 (got mbs={train.mbs}, gbs={train.gbs}, seq={train.seq})")
    if system.num_gpus < 1:
        p.append(f"the GPU count must be >= 1 (got {system.num_gpus})")
    p += size_problems(train)
    if p:
        return p
    world = tp * pp * cp * dp
    if train.data_parallel_size is not None and world != system.num_gpus:
        p.append(f"world size tp*pp*cp*dp = {tp}*{pp}*{cp}*{dp} = {world} must equal the GPU count {system.num_gpus}")
    elif system.num_gpus % (tp * pp * cp) != 0 or dp < 1:
        p.append(f"GPU count {system.num_gpus} is not divisible by tp*pp*cp = {tp}*{pp}*{cp} = {tp * pp * cp}")
    if model.num_attention_heads % tp:
        p.append(f"attention heads {model.num_attention_heads} must be divisible by tp {tp}")
    if not model.is_mla and model.kv_groups % tp:
        p.append(f"KV groups {model.kv_groups} must be divisible by tp {tp} (Megatron splits query groups over TP)")
    if train.sequence_parallel and tp == 1:
        p.append("sequence parallelism needs tp > 1 (got tp=1)")
    if train.tp_comm_overlap and tp > 1 and not train.sequence_parallel:
        p.append("TP communication overlap needs sequence parallelism (Megatron rule)")
    if train.seq % (2 * cp) and cp > 1:
        p.append(f"seq {train.seq} must be divisible by 2*cp = {2 * cp} (load-balanced causal context parallelism)")
    if train.sequence_parallel and (train.seq // cp) % tp:
        p.append(f"with sequence parallelism seq/cp = {train.seq // cp} must be divisible by tp {tp}")
    if dp >= 1 and train.gbs % (train.mbs * dp):
        p.append(f"global batch {train.gbs} must be divisible by mbs*dp = {train.mbs}*{dp} = {train.mbs * dp}")
    m = train.num_microbatches
    schedule = train.pipeline_schedule
    if train.precision not in TRAINING_PRECISIONS:
        p.append(f"unknown precision '{train.precision}': choose one of {', '.join(TRAINING_PRECISIONS)}")
    elif not system.gpu.supports(train.precision):
        p.append(f"precision {train.precision} is not supported by {system.gpu.name} (no tensor-core peak for it)")
    elif train.precision in ("mxfp8", "nvfp4") and system.gpu.fp4_tflops <= 0:
        p.append(f"precision {train.precision} needs a Blackwell-class GPU (got {system.gpu.name})")
    p += _bf16_layer_problems(model, train)
    p += setting_problems(train)
    schedule_problems = validate_schedule(schedule, pp, vpp, m)  # the schedules' own rules
    p += schedule_problems
    if schedule_problems:
        return p
    # layers per model stage
    n_stages = SCHEDULES[schedule].model_stages(pp, vpp)
    chunks = n_stages // pp
    if train.pipeline_layout is not None:
        if len(train.pipeline_layout) != n_stages:
            p.append(f"pipeline layout has {len(train.pipeline_layout)} stages, the {schedule} schedule has {n_stages}")
        if sum(train.pipeline_layout) != model.num_layers:
            p.append(f"pipeline layout sums to {sum(train.pipeline_layout)} layers, model has {model.num_layers}")
    else:
        first, last = train.decoder_first_pipeline_num_layers, train.decoder_last_pipeline_num_layers
        accounted = int(train.account_for_embedding_in_pipeline_split) + int(train.account_for_loss_in_pipeline_split)
        rest_layers = model.num_layers + accounted - (first or 0) - (last or 0)
        rest_stages = pp - (first is not None) - (last is not None)
        if (first is not None or last is not None) and pp < 2:
            p.append("decoder first/last pipeline layers need pp >= 2")
        elif rest_stages > 0 and (rest_layers < 0 or rest_layers % (rest_stages * chunks)):
            p.append(
                f"layers {rest_layers} must divide evenly over {rest_stages} pipeline stages x {chunks} chunks "
                f"(give --pipeline-layout or uneven first/last stages)"
            )
        elif rest_stages == 0 and rest_layers != 0:
            p.append(f"first + last pipeline layers must equal the model's {model.num_layers} layers with pp=2")
    p += mixer_problems(model, train)
    p += knob_problems(model, train)
    if model.is_moe:
        if model.num_experts % ep:
            p.append(f"experts {model.num_experts} must be divisible by ep {ep}")
        expert_dp = (tp * cp * dp) // (etp * ep) if etp * ep else 0
        if (tp * cp * dp) % (etp * ep):
            p.append(f"etp*ep = {etp}*{ep} = {etp * ep} must divide tp*cp*dp = {tp * cp * dp} (Megatron expert grid)")
        elif expert_dp < 1:
            p.append(f"expert data parallel size must be >= 1 (got {expert_dp})")
    elif ep > 1:
        p.append(f"ep {ep} > 1 needs an MoE model ({model.name} has no experts)")
    if train.fsdp and train.use_distributed_optimizer:
        p.append("FSDP and the distributed optimizer are exclusive: choose one")
    if train.zero_stage not in (0, 1, 2, 3):
        p.append(f"ZeRO stage must be 0, 1, 2 or 3 (got {train.zero_stage})")
    # DeepSpeed's PipelineEngine asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    # (deepspeed/runtime/pipe/engine.py; Megatron-DeepSpeed pipelines through it). Sharded-gradient data
    # parallelism elsewhere (torch FSDP SHARD_GRAD_OP, as Llama 3 ran it beside 16 pipeline stages,
    # arXiv 2407.21783 section 3.3.2) has no such rule.
    if train.zero_stage >= 2 and not train.fsdp and pp > 1 and train.framework in DEEPSPEED_FRAMEWORKS:
        p.append(f"DeepSpeed ZeRO-{train.zero_stage} cannot be combined with pipeline parallelism (pp={pp})")
    if model.is_moe and tp > 1 and ep > 1 and not train.sequence_parallel:
        p.append(f"MoE with tp {tp} > 1 and ep {ep} > 1 needs sequence parallelism (Megatron rule)")
    if train.recompute_num_layers is not None and train.recompute_granularity != "full":
        p.append("recompute_num_layers needs recompute full")
    return p


def _bf16_layer_problems(model: ModelSpec, train: TrainingSpec) -> list[str]:
    """`first_last_layers_bf16`'s counts: whole layers, no more than the model has."""
    start, end = train.num_layers_at_start_in_bf16, train.num_layers_at_end_in_bf16
    p = [
        f"{name} must be >= 0 (got {value})"
        for name, value in (("num_layers_at_start_in_bf16", start), ("num_layers_at_end_in_bf16", end))
        if value < 0
    ]
    if train.first_last_layers_bf16 and not p and start + end > model.num_layers:
        p.append(
            f"first_last_layers_bf16: num_layers_at_start_in_bf16 + num_layers_at_end_in_bf16 = {start} + {end} = "
            f"{start + end} exceeds the model's {model.num_layers} decoder layers"
        )
    return p


def mixer_problems(model: ModelSpec, train: TrainingSpec) -> list[str]:
    """What the token mixers other than full attention cannot split: Megatron-core 0.19.2's own asserts, named
    (MambaMixer in ssm/mamba_mixer.py, MambaContextParallel in ssm/mamba_context_parallel.py,
    hybrid_layer_allocation.py, TransformerConfig for Gated DeltaNet); local attention under CP is not modelled."""
    p: list[str] = []
    tp, cp = train.tp, train.cp
    if model.attention_chunk_size and cp > 1:
        p.append(
            f"cp {cp} > 1 with chunked attention (chunks of {model.attention_chunk_size}) is not modelled: "
            "paraplan splits a chunked layer's sequence only with cp = 1"
        )
    if model.window_size and cp > 1:
        p.append(
            f"cp {cp} > 1 with sliding-window attention (window {model.window_size}) is not modelled: "
            "paraplan splits a sliding-window layer's sequence only with cp = 1"
        )
    if model.linear_attention_freq:  # Gated DeltaNet: TransformerConfig.__post_init__ (megatron-core 0.19.2)
        k_heads, v_heads = model.linear_num_key_heads, model.linear_num_value_heads
        if v_heads % k_heads:
            p.append(f"Gated DeltaNet value heads {v_heads} must be a multiple of its key heads {k_heads}")
        for what, heads in (("key", k_heads), ("value", v_heads)):
            if heads % (tp * cp):
                p.append(
                    f"Gated DeltaNet {what} heads {heads} must be divisible by tp*cp = {tp}*{cp} = {tp * cp} "
                    "(Megatron splits them over TP, and over CP by all-to-all)"
                )
    if not model.is_hybrid:
        return p
    if model.has_mamba:
        heads, groups = model.mamba_heads, model.mamba_num_groups
        if heads % groups:
            p.append(f"Mamba heads {heads} must be divisible by Mamba groups {groups} (MambaMixer: nheads % ngroups)")
        if heads % tp:
            p.append(f"Mamba heads {heads} must be divisible by tp {tp} (MambaMixer splits heads over TP)")
        if groups % tp:
            p.append(f"Mamba groups {groups} must be divisible by tp {tp} (MambaMixer splits B/C groups over TP)")
        elif cp > 1:
            if heads % (tp * cp):
                p.append(
                    f"Mamba heads {heads} must be divisible by tp*cp = {tp}*{cp} = {tp * cp} (MambaContextParallel: "
                    "each CP rank scans the whole sequence for its share of the heads)"
                )
            groups_tp = groups // tp
            if (groups_tp < cp and cp % groups_tp) or (groups_tp >= cp and groups_tp % cp):
                p.append(
                    f"Mamba groups per TP rank {groups_tp} and cp {cp} must divide one another "
                    "(MambaContextParallel shards or repeats B/C groups over CP)"
                )
    if train.vpp > 1 and train.pipeline_layout is None:
        p.append(
            f"vpp {train.vpp} > 1 with a hybrid layer pattern needs explicit stage boundaries: give a pipeline layout "
            "(Megatron: '|' in hybrid_layer_pattern; without them virtual pipelining is refused)"
        )
    return p


def check(model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> TrainingSpec:
    """Resolve derived fields and raise ConfigError listing every violated rule."""
    train = resolve_dp(train, system)
    problems = layout_problems(model, system, train)
    if problems:
        raise ConfigError(problems)
    return train
