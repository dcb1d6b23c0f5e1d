"""torchtitan job TOML: `[model]`, `[training]`, `[parallelism]`, `[activation_checkpoint]`, `[float8]`/`[mx]`.

The model is named, not described: `[model] name/flavor` maps to a paraplan preset (torchtitan's model
registry), or `hf_assets_path` points at a local HuggingFace `config.json`. Data parallelism is
`data_parallel_replicate_degree` (DDP) x `data_parallel_shard_degree` (FSDP; -1 = the rest of the GPUs).
Pipeline stages are split as torchtitan's `generate_llm_fqn_per_model_part` does, with the embedding and
the output counted as `pipeline_parallel_first/last_stage_less_layers` layers (default 1 each).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from paraplan.errors import ConfigError
from paraplan.formats.common import (
    Problems,
    ReadConfig,
    SystemHints,
    as_bool,
    as_int,
    finish_gaps,
    header_lines,
    load_text,
    same_shape,
    suggest,
)
from paraplan.graph.partition import layers_per_virtual_stage
from paraplan.specs.hf import load_hf_config
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import model_preset
from paraplan.specs.schedule import DEFAULT_SCHEDULE
from paraplan.specs.schedule import SCHEDULES as PIPELINE_SCHEDULES
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import resolve_dp

# (torchtitan model name, flavor) -> (paraplan preset, fields that differ in torchtitan's definition)
FLAVORS: Mapping[tuple[str, str], tuple[str, Mapping[str, Any]]] = {
    ("llama3", "8B"): ("llama3.1-8b", {}),
    ("llama3", "70B"): ("llama3.1-70b", {}),
    ("llama3", "405B"): ("llama3.1-405b", {}),
    ("deepseek_v3", "671B"): ("deepseek-v3", {"mtp_num_layers": 0}),  # torchtitan trains without MTP
    ("qwen3", "30B-A3B"): ("qwen3-30b-a3b", {}),
    ("qwen3", "235B-A22B"): ("qwen3-235b-a22b", {}),
}
HF_ASSETS = {
    "llama3.1-8b": "./assets/hf/Llama-3.1-8B",
    "llama3.1-70b": "./assets/hf/Llama-3.1-70B",
    "llama3.1-405b": "./assets/hf/Llama-3.1-405B",
    "deepseek-v3": "./assets/hf/DeepSeek-V3",
}
SCHEDULES: Mapping[str, str] = {
    s.framework_names["torchtitan"]: name for name, s in PIPELINE_SCHEDULES.items() if "torchtitan" in s.framework_names
}
"""torchtitan's `pipeline_parallel_schedule` -> paraplan's schedule name (`PipelineSchedule.framework_names`)."""
SCHEDULE_NAMES = {v: k for k, v in SCHEDULES.items()}
MULTI_STAGE = frozenset({"Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble", "LoopedBFS", "DualPipeV"})
"""torchtitan's schedules with more than one stage per rank (two by default)."""
TWO_STAGE = frozenset(tt for tt, name in SCHEDULES.items() if PIPELINE_SCHEDULES[name].chunks == 2)
"""Schedules that run exactly two stages per rank (the V shapes: ZBVZeroBubble, DualPipeV)."""
CHECKED: Mapping[str, frozenset[str]] = {
    "model": frozenset("name flavor hf_assets_path tokenizer_path converters print_after_conversion norm_type".split()),
    "training": frozenset(
        (
            "local_batch_size global_batch_size batch_size seq_len steps max_norm warmup_steps dataset "
            "dataset_path mixed_precision_param mixed_precision_reduce compile gc_freq gc_debug seed deterministic "
            "enable_cpu_offload debug_moe_force_load_balance"
        ).split()
    ),
    "parallelism": frozenset(
        (
            "data_parallel_replicate_degree data_parallel_shard_degree fsdp_reshard_after_forward "
            "tensor_parallel_degree disable_loss_parallel enable_async_tensor_parallel pipeline_parallel_degree "
            "pipeline_parallel_split_points module_fqns_per_model_part pipeline_parallel_first_stage_less_layers "
            "pipeline_parallel_last_stage_less_layers pipeline_parallel_layers_per_stage pipeline_parallel_schedule "
            "pipeline_parallel_schedule_csv pipeline_parallel_microbatch_size pipeline_parallel_microbatches "
            "context_parallel_degree context_parallel_rotate_method expert_parallel_degree "
            "expert_tensor_parallel_degree enable_compiled_autograd"
        ).split()
    ),
    "activation_checkpoint": frozenset(
        "mode selective_ac_option per_op_sac_force_recompute_mm_shapes_by_fqns early_stop memory_budget "
        "visualize_memory_budget_pareto".split()
    ),
    "float8": frozenset(
        "enable_fsdp_float8_all_gather precompute_float8_dynamic_scale_for_fsdp force_recompute_fp8_weight_in_bwd "
        "recipe_name filter_fqns emulate moe_fqns_prototype".split()
    ),
    "mx": frozenset("mxfp8_dim1_cast_kernel_choice recipe_name filter_fqns moe_fqns_prototype".split()),
}
FREE_SECTIONS = frozenset(
    "job profiling metrics optimizer lr_scheduler checkpoint comm memory_estimation fault_tolerance experimental "
    "validation compile quantize".split()
)
_MOVED_TO_PARALLELISM = frozenset(
    "data_parallel_replicate_degree data_parallel_shard_degree tensor_parallel_degree pipeline_parallel_degree "
    "context_parallel_degree enable_async_tensor_parallel".split()
)
FLOAT8_CONVERTERS = frozenset({"float8", "quantize.linear.float8"})
MX_CONVERTERS = frozenset({"mx", "quantize.linear.mx"})


def _compiled(doc: dict[str, Any], training: dict[str, Any]) -> bool:
    """torch.compile on: `compile.enable` (torchtitan 0.2.0) or `training.compile` (before)."""
    return bool(doc.get("compile", {}).get("enable", training.get("compile", False)))


def torchtitan_split(num_layers: int, stages: int, first_weight: int, last_weight: int) -> list[int] | None:
    """Decoder layers per stage as torchtitan's `generate_llm_fqn_per_model_part` assigns them: the
    embedding and output count as `first_weight` and `last_weight` layers; earlier stages take the extra."""
    effective = num_layers + first_weight + last_weight
    if stages < 1 or stages > effective:
        return None
    base, extra = divmod(effective, stages)
    counts = [base + (1 if i < extra else 0) for i in range(stages)]
    counts[0] -= first_weight
    counts[-1] -= last_weight
    if stages == 1:
        counts = [num_layers]
    return counts if min(counts) >= 0 else None


def _float8_all_gather(f8: Mapping[str, Any], train: dict[str, Any], problems: Problems) -> None:
    """`[float8] enable_fsdp_float8_all_gather` of a tensorwise run (torchtitan 0.1-0.2 `Float8Converter`, which
    asserts it is not given with a `recipe_name` and turns it on only when `dp_shard_enabled`)."""
    if not as_bool(f8.get("enable_fsdp_float8_all_gather", False), "float8.enable_fsdp_float8_all_gather", problems):
        return
    if "recipe_name" in f8:
        problems.add("float8.enable_fsdp_float8_all_gather is not supported with float8.recipe_name (torchtitan)")
    elif train.get("fsdp"):
        train["fsdp_float8_all_gather"] = True
        if not f8.get("precompute_float8_dynamic_scale_for_fsdp", False):
            problems.note(
                "float8 all-gather without precompute_float8_dynamic_scale_for_fsdp (an amax all-reduce per weight "
                "per all-gather) is projected with precomputed scales"
            )
    else:
        problems.note("float8.enable_fsdp_float8_all_gather is off without FSDP (data_parallel_shard_degree 1)")


def _model(section: Mapping[str, Any], base: Path, problems: Problems) -> ModelSpec | None:
    name, flavor = str(section.get("name", "llama3")), str(section.get("flavor", ""))
    if (name, flavor) in FLAVORS:
        preset, changes = FLAVORS[(name, flavor)]
        return replace(model_preset(preset), name=f"{name}-{flavor}", source=f"torchtitan {name} {flavor}", **changes)
    assets = section.get("hf_assets_path") or section.get("tokenizer_path")
    if assets:
        for root in (Path.cwd(), base):
            config = root / str(assets) / "config.json"
            if config.is_file():
                return load_hf_config(config)
    problems.note(
        f"torchtitan model {name} flavor '{flavor}' is not one paraplan knows and no local "
        f"{assets or 'hf_assets_path'}/config.json was found: give --model"
    )
    return None


def _check_keys(doc: Mapping[str, Any], problems: Problems) -> None:
    for section, body in doc.items():
        if section in FREE_SECTIONS:
            continue
        if section not in CHECKED:
            problems.add(f"unknown section '{section}'{suggest(section, [*CHECKED, *FREE_SECTIONS])}")
            continue
        if not isinstance(body, dict):
            problems.add(f"section '{section}' must be a table")
            continue
        for key in sorted(set(body) - CHECKED[section]):
            moved = (
                " (torchtitan moved it to parallelism)"
                if section == "training" and key in _MOVED_TO_PARALLELISM
                else ""
            )
            problems.add(f"unknown key {section}.{key}{moved or suggest(key, CHECKED[section])}")


def read_torchtitan(
    path_or_text: str | Path, *, num_gpus: int | None = None, model: ModelSpec | None = None
) -> ReadConfig:
    """A torchtitan job TOML (file or text) -> (model or None, training, hints)."""
    text, source, path = load_text(path_or_text)
    problems = Problems(source or "torchtitan config")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{problems.source}: not valid TOML ({exc})") from None
    base = path.parent if path else Path.cwd()
    return torchtitan_from_doc(doc, problems, base=base, source=source, num_gpus=num_gpus, model=model)


def torchtitan_from_doc(
    doc: Mapping[str, Any],
    problems: Problems,
    *,
    base: Path,
    source: str = "",
    num_gpus: int | None = None,
    model: ModelSpec | None = None,
) -> ReadConfig:
    """A parsed torchtitan job (TOML tables, or the same tables from Primus's YAML) -> (model, training, hints).
    `base`: the folder a relative `hf_assets_path` is looked up from (beside the working directory)."""
    _check_keys(doc, problems)
    model_sec, training = doc.get("model", {}), doc.get("training", {})
    par, ac = doc.get("parallelism", {}), doc.get("activation_checkpoint", {})
    named = _model(model_sec, base, problems if model is None else Problems())
    fallback = model
    model = named

    def num(section: Mapping[str, Any], key: str, default: int) -> int:
        value = as_int(section.get(key, default), key, problems)
        return default if value is None else value

    train: dict[str, Any] = {"framework": "torchtitan"}
    rep, shard = num(par, "data_parallel_replicate_degree", 1), num(par, "data_parallel_shard_degree", -1)
    tp, pp = num(par, "tensor_parallel_degree", 1), num(par, "pipeline_parallel_degree", 1)
    cp, ep = num(par, "context_parallel_degree", 1), num(par, "expert_parallel_degree", 1)
    etp = num(par, "expert_tensor_parallel_degree", 1)
    for key, value in (("data_parallel_replicate_degree", rep), ("tensor_parallel_degree", tp)):
        if value < 1:
            problems.add(f"parallelism.{key} must be >= 1 (got {value})")
    if shard == 0 or shard < -1:
        problems.add(f"parallelism.data_parallel_shard_degree must be -1 or >= 1 (got {shard})")
    others = rep * tp * pp * cp
    stated_gpus = others * shard if shard > 0 else None
    if stated_gpus and num_gpus and stated_gpus != num_gpus:
        problems.add(f"parallelism.degrees multiply to {stated_gpus} GPUs, not the {num_gpus} given")
    gpus = num_gpus or stated_gpus
    if shard == -1 and gpus:
        if gpus % others:
            problems.add(f"{gpus} GPUs are not divisible by replicate*tp*pp*cp = {others}")
        shard = max(1, gpus // others)
    dp = rep * shard if shard > 0 else None
    train.update(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        context_parallel_size=cp,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp,
        sequence_parallel=tp > 1,  # torchtitan's TP plan always shards norms along the sequence
        tp_comm_overlap=bool(par.get("enable_async_tensor_parallel", False)),
        overlap_grad_reduce=True,  # DDP buckets and FSDP reduce-scatters overlap the backward
        fsdp=shard != 1,
        overlap_param_gather=shard != 1,
        # torch.compile fuses the norms, SwiGLU and rotary; without it torchtitan runs eager PyTorch
        kernel_fusion=_compiled(doc, training),
        # the loss is compiled with the model: `compile.components` (0.2.0, default both) or, with the older
        # `training.compile`, always (0.1.0 `build_cross_entropy_loss`; before June 2025 it was not)
        loss_compiled=_compiled(doc, training) and "loss" in doc.get("compile", {}).get("components", ["loss"]),
    )
    if dp is not None:
        train["data_parallel_size"] = dp
    if rep > 1 and shard != 1:
        problems.note(f"HSDP (replicate {rep} x shard {shard}) is projected as FSDP over all {dp or '?'} DP ranks")
    if par.get("disable_loss_parallel") and tp > 1:
        problems.note("disable_loss_parallel is projected as loss_parallel (the loss's memory on vocab-sharded logits)")
    if par.get("fsdp_reshard_after_forward", "default") == "never":
        problems.note("fsdp_reshard_after_forward never (ZeRO-2 like) is projected as full sharding")
    # ---- batch
    local = training.get("local_batch_size", training.get("batch_size", 8))
    local = as_int(local, "training.local_batch_size", problems) or 8
    global_batch = num(training, "global_batch_size", -1)
    if pp > 1:
        mbs = num(par, "pipeline_parallel_microbatch_size", 1)
        if "pipeline_parallel_microbatches" in par:
            problems.note("pipeline_parallel_microbatches (older torchtitan) is ignored; the microbatch size is used")
        if mbs < 1 or local % mbs:
            problems.add(
                f"training.local_batch_size {local} must be a multiple of pipeline_parallel_microbatch_size {mbs}"
            )
    else:
        mbs = local
    train["micro_batch_size"] = mbs
    if global_batch > 0:
        train["global_batch_size"] = global_batch
    elif dp is not None:
        train["global_batch_size"] = local * dp
    else:
        problems.add("cannot derive the global batch: set training.global_batch_size or give the GPU count")
    train["seq_length"] = num(training, "seq_len", 2048)
    # ---- precision
    converters = model_sec.get("converters", [])
    converters = [converters] if isinstance(converters, str) else list(converters)
    float8, mx = FLOAT8_CONVERTERS & set(converters), MX_CONVERTERS & set(converters)
    quantize = doc.get("quantize", {}).get("linear", {})
    f8, mx_sec = doc.get("float8") or quantize.get("float8", {}), doc.get("mx") or quantize.get("mx", {})
    if float8 and mx:
        problems.add("model.converters enable both float8 and mx: choose one")
    if not float8 and (f8.get("enable_fsdp_float8_all_gather") or "recipe_name" in f8):
        problems.add("float8 settings are given but model.converters does not enable float8")
    if not mx and "recipe_name" in mx_sec:
        problems.add("mx.settings are given but model.converters does not enable mx")
    param_dtype = training.get("mixed_precision_param", "bfloat16")
    if param_dtype not in ("bfloat16", "float16"):
        problems.add(f"training.mixed_precision_param {param_dtype}: paraplan projects bf16/fp16 mixed precision")
    train["precision"] = "fp16" if param_dtype == "float16" else "bf16"
    if float8:
        recipe = f8.get("recipe_name") or "tensorwise"
        if recipe.startswith("rowwise"):
            train["precision"] = "fp8_blockwise"
            problems.note(f"float8 {recipe} scaling is projected as fine-grained (blockwise) FP8")
        else:
            train["precision"] = "fp8_cs"
            _float8_all_gather(f8, train, problems)
    elif mx:
        recipe = mx_sec.get("recipe_name", "mxfp8")
        if recipe != "mxfp8":
            problems.add(f"mx.recipe_name {recipe}: paraplan projects mxfp8")
        train["precision"] = "mxfp8"
    train["grad_reduce_in_fp32"] = training.get("mixed_precision_reduce", "float32") == "float32"
    if as_bool(training.get("enable_cpu_offload", False), "training.enable_cpu_offload", problems):
        # FSDP2's CPUOffloadPolicy (torchtitan `apply_fsdp`): sharded params, grads and Adam states on the host,
        # the optimizer step on the CPU
        train["optimizer_cpu_offload"] = True
    # ---- pipeline schedule and stages
    schedule_name = str(par.get("pipeline_parallel_schedule", "1F1B"))
    if pp > 1:
        if schedule_name not in SCHEDULES:
            problems.add(f"pipeline_parallel_schedule {schedule_name}: paraplan models {', '.join(SCHEDULES)}")
        else:
            train["pipeline_schedule"] = SCHEDULES[schedule_name]
        _stages(par, pp, schedule_name, model or fallback, train, problems)
    # ---- activation checkpointing
    mode = ac.get("mode", "selective")
    option = str(ac.get("selective_ac_option", "op"))
    if mode not in ("none", "selective", "full"):
        problems.add(f"activation_checkpoint.mode must be none, selective or full (got {mode})")
    elif "selective_ac_option" in ac and mode != "selective":
        problems.add(f"activation_checkpoint.selective_ac_option is set but mode is {mode}")
    if mode == "selective" and option != "op":
        every = as_int(option, "activation_checkpoint.selective_ac_option", problems)
        train["recompute_granularity"] = "full"
        if every and every > 1:
            per_chunk = _max_layers_per_chunk(model or fallback, train)
            if per_chunk is None:
                problems.note(f"checkpointing every {every}th layer needs the model; projected as full recompute")
            else:
                train["recompute_num_layers"] = math.ceil(per_chunk / every)
    elif mode in ("none", "selective", "full"):
        train["recompute_granularity"] = mode
    problems.raise_if_any()
    spec = TrainingSpec().with_values(**train)
    hints = SystemHints(
        num_gpus=gpus,
        source=source,
        notes=tuple(problems.notes),
        train_fields=frozenset(train) - {"framework"},
    )
    return ReadConfig(model, spec, hints)


def _max_layers_per_chunk(model: ModelSpec | None, train: Mapping[str, Any]) -> int | None:
    if model is None:
        return None
    spec = TrainingSpec().with_values(**train)
    return max(layers_per_virtual_stage(model, spec))


def _stages(
    par: Mapping[str, Any], pp: int, schedule: str, model: ModelSpec | None, train: dict[str, Any], problems: Problems
) -> None:
    first_w = int(par.get("pipeline_parallel_first_stage_less_layers", 1))
    last_w = int(par.get("pipeline_parallel_last_stage_less_layers", 1))
    per_stage = par.get("pipeline_parallel_layers_per_stage")
    points = par.get("pipeline_parallel_split_points") or []
    parts = par.get("module_fqns_per_model_part")
    if sum(x is not None and x != [] for x in (per_stage, points or None, parts)) > 1:
        problems.add("set only one of pipeline_parallel_layers_per_stage, _split_points, module_fqns_per_model_part")
        return
    layers = model.num_layers if model else None
    counts: list[int] | None = None
    if parts:
        counts = [sum(1 for fqn in part if str(fqn).startswith("layers.")) for part in parts]
    elif points:
        try:
            bounds = [int(str(p).removeprefix("layers.")) for p in points]
        except ValueError:
            problems.add(f"pipeline_parallel_split_points must name layers ('layers.N'), got {points}")
            return
        if layers is not None:
            edges = [0, *bounds, layers]
            counts = [b - a for a, b in zip(edges, edges[1:], strict=False)]
        else:
            problems.note("split points need the model to count layers per stage")
    elif per_stage is not None:
        if layers is None:
            problems.note("pipeline_parallel_layers_per_stage needs the model to count stages: give --model")
        else:
            stages = math.ceil((layers + first_w + last_w) / int(per_stage))
            counts = torchtitan_split(layers, stages, first_w, last_w)
    elif layers is not None:
        counts = torchtitan_split(layers, pp * (2 if schedule in MULTI_STAGE else 1), first_w, last_w)
    if counts is None:
        if model is None:
            train["account_for_embedding_in_pipeline_split"] = first_w == 1
            train["account_for_loss_in_pipeline_split"] = last_w == 1
            if schedule in MULTI_STAGE and schedule not in TWO_STAGE:
                train["virtual_pipeline_model_parallel_size"] = 2
        return
    if len(counts) % pp or min(counts) < 0 or (layers is not None and sum(counts) != layers):
        problems.add(f"the pipeline split {counts} does not give every one of {pp} ranks the same number of stages")
        return
    per_rank = len(counts) // pp
    if schedule not in MULTI_STAGE and per_rank != 1:
        problems.add(f"pipeline_parallel_schedule {schedule} runs one stage per rank, the split gives {per_rank}")
    elif schedule in TWO_STAGE and per_rank != 2:
        problems.add(f"pipeline_parallel_schedule {schedule} runs two stages per rank, the split gives {per_rank}")
    elif schedule in MULTI_STAGE and per_rank < 2:
        problems.add(f"pipeline_parallel_schedule {schedule} needs at least two stages per rank (got {per_rank})")
    if schedule in SCHEDULES and PIPELINE_SCHEDULES[SCHEDULES[schedule]].interleaves:
        train["virtual_pipeline_model_parallel_size"] = per_rank
    train["pipeline_layout"] = tuple(counts)


# ----------------------------------------------------------------------------- writing
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def dump_toml(doc: Mapping[str, Mapping[str, Any]]) -> str:
    """Tables of scalars and lists (all torchtitan needs)."""
    out: list[str] = []
    for section, body in doc.items():
        out.append(f"[{section}]")
        out += [f"{key} = {_toml_value(value)}" for key, value in body.items()]
        out.append("")
    return "\n".join(out)


def _stage_keys(model: ModelSpec, train: TrainingSpec, gaps: list[str]) -> dict[str, Any]:
    counts = layers_per_virtual_stage(model, train)
    stages = len(counts)
    default_stages = train.pp * (2 if SCHEDULE_NAMES.get(train.pipeline_schedule) in MULTI_STAGE else 1)
    for first_w, last_w in ((1, 1), (0, 0), (1, 0), (0, 1)):
        if torchtitan_split(model.num_layers, stages, first_w, last_w) != counts:
            continue
        keys: dict[str, Any] = {}
        if (first_w, last_w) != (1, 1):
            keys["pipeline_parallel_first_stage_less_layers"] = first_w
            keys["pipeline_parallel_last_stage_less_layers"] = last_w
        if stages != default_stages:
            effective = model.num_layers + first_w + last_w
            per_stage = next((n for n in range(1, effective + 1) if math.ceil(effective / n) == stages), None)
            if per_stage is None:
                break
            keys["pipeline_parallel_layers_per_stage"] = per_stage
        return keys
    if min(counts) < 1:
        gaps.append(f"pipeline stages without decoder layers ({counts}): torchtitan's default split used")
        return {}
    edges = [sum(counts[: i + 1]) for i in range(len(counts) - 1)]
    return {"pipeline_parallel_split_points": [f"layers.{e}" for e in edges]}


def write_torchtitan(model: ModelSpec, system: SystemSpec, train: TrainingSpec, *, strict: bool = False) -> str:
    """A torchtitan job TOML for this plan (`CONFIG_FILE=this.toml NGPU=... ./run_train.sh`)."""
    train = resolve_dp(train, system)
    gaps: list[str] = []
    flavor = next(
        (key for key, (name, changes) in FLAVORS.items() if same_shape(replace(model_preset(name), **changes), model)),
        None,
    )
    model_sec: dict[str, Any] = {}
    if flavor:
        model_sec.update(name=flavor[0], flavor=flavor[1])
        assets = HF_ASSETS.get(FLAVORS[flavor][0])
        if assets:
            model_sec["hf_assets_path"] = assets
    else:
        model_sec.update(name="llama3", flavor=model.name, hf_assets_path=f"./assets/hf/{model.name}")
        gaps.append(
            f"model {model.name} is not a torchtitan flavor: register one, or keep its config.json at hf_assets_path"
        )
    if train.mbs * train.dp * train.num_microbatches != train.gbs:
        gaps.append("a global batch that is not a multiple of mbs x dp")
    training: dict[str, Any] = {}
    if train.pp > 1:
        training["local_batch_size"] = train.mbs * train.num_microbatches
    else:
        training["local_batch_size"] = train.mbs
    training["global_batch_size"] = train.gbs
    training["seq_len"] = train.seq
    training["steps"] = 100
    training["mixed_precision_param"] = "float16" if train.precision == "fp16" else "bfloat16"
    training["mixed_precision_reduce"] = "float32" if train.grad_reduce_in_fp32 else "bfloat16"
    training["dataset"] = "c4_test"
    par: dict[str, Any] = {}
    sharded = train.fsdp or train.zero_stage >= 2
    if train.use_distributed_optimizer or train.zero_stage == 1:
        gaps.append("the distributed optimizer (ZeRO-1): FSDP (data_parallel_shard_degree) is torchtitan's sharding")
        sharded = True
    if train.zero_stage == 2:
        par["fsdp_reshard_after_forward"] = "never"
    par["data_parallel_replicate_degree"] = 1 if sharded else train.dp
    par["data_parallel_shard_degree"] = train.dp if sharded else 1
    par["tensor_parallel_degree"] = train.tp
    if train.tp > 1 and not train.sequence_parallel:
        gaps.append("tensor parallelism without sequence parallelism (torchtitan always shards along the sequence)")
    if train.tp_comm_overlap:
        par["enable_async_tensor_parallel"] = True
    par["pipeline_parallel_degree"] = train.pp
    if train.pp > 1:
        schedule = SCHEDULE_NAMES.get(train.pipeline_schedule)
        if schedule is None or (train.schedule.interleaves and train.vpp < 2):
            if schedule is None:
                gaps.append(f"pipeline schedule {train.pipeline_schedule}: 1F1B used")
            schedule = SCHEDULE_NAMES[DEFAULT_SCHEDULE]
            train = replace(train, pipeline_schedule=DEFAULT_SCHEDULE, virtual_pipeline_model_parallel_size=1)
        par["pipeline_parallel_schedule"] = schedule
        par["pipeline_parallel_microbatch_size"] = train.mbs
        par.update(_stage_keys(model, train, gaps))
    par["context_parallel_degree"] = train.cp
    if model.is_moe:
        par["expert_parallel_degree"] = train.ep
        par["expert_tensor_parallel_degree"] = train.etp
    for flag, what in (
        (train.moe_ep_overlap, "EP communication overlap"),
        (model.is_moe and train.moe_token_dispatcher_type == "flex", "the flex (DeepEP) MoE token dispatcher"),
        (train.attention_backend == "unfused", "unfused attention"),
    ):
        if flag:
            gaps.append(what)
    if not train.overlap_grad_reduce and train.dp > 1:
        gaps.append("gradient reduction without overlap (torchtitan always overlaps it)")
    if train.optimizer_cpu_offload:
        training["enable_cpu_offload"] = True
        if train.optimizer_offload_fraction != 1.0 or not sharded:
            gaps.append("a CPU offload of part of the optimizer, or without FSDP (torchtitan offloads FSDP shards)")
    for flag, what in (
        (train.cuda_graph_scope != "none", "CUDA graphs"),
        (train.cpu_offloading_num_layers > 0, "activation CPU offloading"),
        (train.moe_pad_expert_input_to_capacity, "drop-and-pad MoE (expert capacity)"),
        (train.recompute_modules is not None, "selective recompute of named modules"),
        (train.recompute_layer_ids is not None, "recompute by layer ids"),
        (train.ddp_bucket_size is not None, "a Megatron DDP bucket size (torchtitan has no such bucket)"),
        (train.recompute_method == "uniform" and train.recompute_granularity == "full", "uniform recompute runs"),
    ):
        if flag:
            gaps.append(what)
    ac: dict[str, Any] = {"mode": train.recompute_granularity}
    if train.recompute_granularity == "selective":
        ac["selective_ac_option"] = "op"
    elif train.recompute_granularity == "full" and train.recompute_num_layers is not None:
        per_chunk = max(layers_per_virtual_stage(model, train))
        if train.recompute_num_layers and per_chunk % train.recompute_num_layers == 0:
            ac = {"mode": "selective", "selective_ac_option": str(per_chunk // train.recompute_num_layers)}
        elif train.recompute_num_layers < per_chunk:
            gaps.append(
                f"full recompute of {train.recompute_num_layers} of {per_chunk} layers per stage: all recomputed"
            )
    doc: dict[str, dict[str, Any]] = {
        "job": {"dump_folder": "./outputs", "description": f"{model.name}: paraplan plan"},
        "model": model_sec,
        "training": training,
        "parallelism": par,
        "activation_checkpoint": ac,
        "compile": {
            "enable": train.kernel_fusion,
            "components": ["model", "loss"] if train.loss_compiled else ["model"],
        },
    }
    if train.precision in ("fp8", "fp8_cs", "fp8_blockwise"):
        if train.precision == "fp8":
            gaps.append("FP8 delayed scaling (torchtitan scales per tensor at run time): tensorwise used")
        model_sec["converters"] = ["float8"]
        if train.fsdp_float8_all_gather:  # tensorwise is torchtitan's float8 without a recipe name, the only one it
            # all-gathers in float8 (its `Float8Converter` asserts no `recipe_name` beside it)
            doc["float8"] = {"enable_fsdp_float8_all_gather": True, "precompute_float8_dynamic_scale_for_fsdp": True}
        else:
            doc["float8"] = {"recipe_name": "rowwise" if train.precision == "fp8_blockwise" else "tensorwise"}
    elif train.precision == "mxfp8":
        model_sec["converters"] = ["mx"]
        doc["mx"] = {"recipe_name": "mxfp8"}
    elif train.precision == "nvfp4":
        gaps.append("NVFP4 training: bf16 used")
    comments = header_lines(model, system, train, "torchtitan job config") + finish_gaps(gaps, strict, "torchtitan")
    comments.append(
        f"run: CONFIG_FILE=this.toml NGPU={min(system.gpus_per_node, system.num_gpus)} ./run_train.sh "
        f"on each of {system.num_nodes} node(s)"
    )
    return "".join(f"# {c}\n" for c in comments) + "\n" + dump_toml(doc)
