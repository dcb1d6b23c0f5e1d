"""Primus (AMD) experiment YAML: `modules.pre_trainer` with its `model:` file and `overrides`.

Primus builds Megatron-LM's argument namespace from YAML, so keys are Megatron destination names
(`tensor_model_parallel_size`, `fp8: hybrid`, `add_bias_linear: false`). Read in Primus's order: the
module's `config:` defaults, then the `model:` file, then `overrides`. Any file may inherit from others
with `extends:` (or Primus's `bases:`), paths relative to it. String values may be `${ENV:default}`.
Unknown keys in `overrides` are errors; in the model and module files (Primus's own, which carry many
framework keys) only unknown keys that look like plan settings are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from paraplan.formats.common import (
    Problems,
    ReadConfig,
    as_bool,
    default_env,
    finish_gaps,
    header_lines,
    load_text,
    load_yaml_mapping,
    preset_matching,
    substitute_env,
    suggest,
)
from paraplan.formats.megatron_args import BY_DEST
from paraplan.formats.megatron_knobs import RECOMPUTE_LAYER_IDS_GAP
from paraplan.formats.megatron_map import megatron_values, specs_from_megatron, typed_value
from paraplan.formats.torchtitan import CHECKED as TT_CHECKED
from paraplan.formats.torchtitan import FREE_SECTIONS as TT_FREE_SECTIONS
from paraplan.formats.torchtitan import torchtitan_from_doc
from paraplan.specs.model import ModelSpec
from paraplan.specs.schedule import SCHEDULES
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import resolve_dp
from paraplan.textfiles import read_text_file

MODULE = "pre_trainer"
BACKENDS = ("megatron", "torchtitan")
# Primus's own sections in a torchtitan-backend experiment (ROCm kernel switches): no effect on the plan.
PRIMUS_TORCHTITAN_SECTIONS = frozenset({"primus_turbo"})
TOP_KEYS = frozenset({"work_group", "user_name", "exp_name", "workspace", "modules", "extends", "bases", "env"})
MODULE_KEYS = frozenset({"framework", "config", "model", "overrides", "env"})
ENV_KEY = "env"
"""Primus's environment section (top level or per module): variables its launcher exports before the run, so they
are what `${VAR:default}` references see. The shell's own environment still wins (it is what the user set last)."""
# Primus's zero-bubble pipeline switches (from the zero-bubble Megatron fork it integrates).
ZERO_BUBBLE_KEYS = ("enable_zero_bubble", "zero_bubble_v_schedule")
RECOMPUTE_LAYER_IDS = "recompute_layer_ids"
"""Primus's recompute by layer index (beside Megatron's recompute flags): the decoder layers recomputed whole."""
PRIMUS_SCHEDULES = {s.framework_names["primus"]: name for name, s in SCHEDULES.items() if "primus" in s.framework_names}
"""The switch that selects a zero-bubble schedule (beside `enable_zero_bubble`) -> paraplan's schedule name."""
# Primus keys that do not change the plan (logging, data, checkpointing, ROCm kernel switches).
PRIMUS_IGNORED = frozenset(
    (
        "wandb_project wandb_entity wandb_exp_name disable_wandb disable_tensorboard stderr_sink_level "
        "file_sink_level log_avg_skip_iterations log_avg_reset_interval disable_last_saving auto_continue_train "
        "moe_use_fused_router_with_aux_score fused_padded_mla_attention use_rocm_mem_info use_rocm_mem_info_iters "
        "disable_profiler_activity_cpu torch_profiler_record_shapes torch_profiler_with_stack "
        "torch_profiler_use_gzip enable_primus_turbo use_turbo_attention use_turbo_grouped_mlp "
        "use_turbo_deepep zero_bubble_v_schedule_mem_setup "
        "zero_bubble_pipeline_timers_start_iter zero_bubble_pipeline_timers_end_iter "
        "zero_bubble_max_pending_backward zero_bubble_adaptive_memory_limit_percentile "
        "enable_optimizer_post_validation enable_exactly_numeric_match dump_pp_data pp_warmup "
        "profile_rank disable_compile_dependencies use_turbo_grouped_gemm"
    ).split()
)
_LOOKS_RELEVANT = re.compile(
    r"paral+el|batch|recompute|fp8|fp4|^moe_(ffn|router_topk|shared|layer)|expert|num_layers|hidden|heads|"
    r"seq_length|vocab|lora|overlap|fsdp|zero|pipeline|precision|bf16|fp16"
)
# paraplan preset -> Primus's model file (primus/configs/models/megatron/).
PRIMUS_MODEL_FILES = {
    "llama3.1-8b": "llama3.1_8B.yaml",
    "llama3.1-70b": "llama3.1_70B.yaml",
    "llama3.1-405b": "llama3.1_405B.yaml",
    "mixtral-8x7b": "mixtral_8x7B_v0.1.yaml",
    "mixtral-8x22b": "mixtral_8x22B_v0.1.yaml",
    "deepseek-v3": "deepseek_v3.yaml",
}


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _refs(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def load_with_bases(
    data: dict[str, Any],
    where: Path,
    env: Mapping[str, str],
    problems: Problems,
    seen: frozenset[Path],
    top: bool = False,
) -> dict[str, Any]:
    """The mapping with its `extends:`/`bases:` parents merged under it (parents first, in order)."""
    data = substitute_env(data, env, problems, "" if top else f"{where.name}:")
    merged: dict[str, Any] = {}
    for ref in _refs(data.pop("extends", None)) + _refs(data.pop("bases", None)):
        parent = (where.parent / ref).resolve()
        if parent in seen:
            problems.add(f"{where}: '{ref}' is inherited in a cycle")
            continue
        if not parent.is_file():
            problems.add(f"{where}: inherits '{ref}', which is not found (looked at {parent})")
            continue
        parent_data = load_yaml_mapping(read_text_file(parent), str(parent))
        merged = deep_merge(merged, load_with_bases(parent_data, parent, env, problems, seen | {parent}))
    return deep_merge(merged, data)


def _env_section(exp: Mapping[str, Any], problems: Problems) -> dict[str, str]:
    """The variables of the experiment's `env:` sections (top level, then modules.pre_trainer's over it)."""
    modules = exp.get("modules")
    module = modules.get(MODULE) if isinstance(modules, dict) else None
    sections = [(ENV_KEY, exp.get(ENV_KEY))]
    if isinstance(module, dict):
        sections.append((f"modules.{MODULE}.{ENV_KEY}", module.get(ENV_KEY)))
    out: dict[str, str] = {}
    for where, section in sections:
        if section is None:
            continue
        if not isinstance(section, dict):
            problems.add(f"{where} must be a mapping of environment variables (got {type(section).__name__})")
            continue
        for name, value in section.items():
            if isinstance(value, (dict, list)):
                problems.add(f"{where}.{name} must be a plain value (got {type(value).__name__})")
            elif isinstance(value, bool):
                out[str(name)] = str(value).lower()
            else:
                out[str(name)] = "" if value is None else str(value)
    return out


def _find(name: str, base: Path, kind: str, framework: str) -> tuple[Path | None, list[Path]]:
    candidates = [base / name]
    for up in (base, base.parent, base.parent.parent):
        candidates += [up / kind / framework / name, up / "configs" / kind / framework / name]
    for c in candidates:
        if c.is_file():
            return c, candidates
    return None, candidates


def _load_file(path: Path, env: Mapping[str, str], problems: Problems) -> dict[str, Any]:
    data = load_yaml_mapping(read_text_file(path), str(path))
    return load_with_bases(data, path, env, problems, frozenset({path.resolve()}))


def read_primus(
    path_or_text: str | Path,
    *,
    num_gpus: int | None = None,
    env: Mapping[str, str] | None = None,
    model: ModelSpec | None = None,
) -> ReadConfig:
    """A Primus experiment (file or YAML text) -> (model or None, training, hints)."""
    text, source, path = load_text(path_or_text)
    env = default_env() if env is None else env
    problems = Problems(source or "primus config")
    where = path if path else Path.cwd() / "experiment.yaml"
    raw = load_yaml_mapping(text, source)
    env = {**_env_section(raw, problems), **env}
    exp = load_with_bases(raw, where, env, problems, frozenset({where.resolve()}), top=True)
    for key in sorted(set(exp) - TOP_KEYS):
        problems.add(f"unknown top-level key '{key}'{suggest(key, TOP_KEYS)}")
    modules = exp.get("modules")
    if not isinstance(modules, dict) or not isinstance(modules.get(MODULE), dict):
        problems.add(f"expected modules.{MODULE} (a mapping with framework, config, model, overrides)")
        problems.raise_if_any()
    module: dict[str, Any] = modules[MODULE]
    for key in sorted(set(module) - MODULE_KEYS):
        problems.add(f"modules.{MODULE}: unknown key '{key}'{suggest(key, MODULE_KEYS)}")
    framework = str(module.get("framework", "megatron"))
    if framework not in BACKENDS:
        problems.add(
            f"modules.{MODULE}.framework is '{framework}': paraplan reads Primus's {' and '.join(BACKENDS)} backends"
        )
        problems.raise_if_any()
    layers: list[tuple[str, dict[str, Any], bool]] = []  # (where, settings, strict)
    for key, kind in (("config", "modules"), ("model", "models")):
        name = module.get(key)
        if not name:
            if key == "model":
                problems.note(f"modules.{MODULE} names no model file: the model comes from overrides or --model")
            continue
        found, tried = _find(str(name), where.parent, kind, framework)
        if found is None:
            what = "module defaults" if key == "config" else "model file"
            problems.note(f"{what} '{name}' not found next to the experiment (looked in {tried[1].parent} and others)")
            continue
        layers.append((found.name, _load_file(found, env, problems), False))
    overrides = module.get("overrides") or {}
    if not isinstance(overrides, dict):
        problems.add(f"modules.{MODULE}.overrides must be a mapping")
        overrides = {}
    layers.append((f"modules.{MODULE}.overrides", overrides, True))
    if framework == "torchtitan":
        return _torchtitan_backend(layers, problems, where, source, num_gpus, model)
    values: dict[str, Any] = {}
    schedule: str | None = None
    for origin, settings, strict in layers:
        for key, raw in settings.items():
            where_key = f"{origin}: {key}"
            if key in ZERO_BUBBLE_KEYS:
                values[key] = as_bool(raw, where_key, problems) if raw is not None else None
                continue
            if key == RECOMPUTE_LAYER_IDS:
                values[key] = _layer_ids(raw, where_key, problems)
                continue
            arg = BY_DEST.get(key)
            if arg is None:
                if key in PRIMUS_IGNORED:
                    continue
                if strict or _LOOKS_RELEVANT.search(key):
                    problems.add(f"{origin}: unknown key '{key}'{suggest(key, [*BY_DEST, *PRIMUS_IGNORED])}")
                continue
            values[key] = None if raw is None else typed_value(arg, raw, where_key, problems)
    if values.pop("enable_zero_bubble", None):
        switch = "zero_bubble_v_schedule" if values.pop("zero_bubble_v_schedule", None) else "enable_zero_bubble"
        schedule = PRIMUS_SCHEDULES[switch]
    elif values.pop("zero_bubble_v_schedule", None):
        problems.add("zero_bubble_v_schedule needs enable_zero_bubble: true")
    name = (path.stem if path else "primus") if not module.get("model") else Path(str(module["model"])).stem
    return specs_from_megatron(
        values,
        problems,
        lambda dest: dest,
        name=name,
        source=source,
        num_gpus=num_gpus,
        framework="megatron-lm",
        schedule=schedule,
        model=model,
    )


def _torchtitan_backend(
    layers: list[tuple[str, dict[str, Any], bool]],
    problems: Problems,
    where: Path,
    source: str,
    num_gpus: int | None,
    model: ModelSpec | None,
) -> ReadConfig:
    """Primus's torchtitan backend: its YAML holds torchtitan's job tables (module defaults, model file, overrides,
    merged in that order), read by the torchtitan reader. Primus's own files carry sections and keys of their
    fork that torchtitan's reader does not know: those are dropped with a note; in overrides they are errors."""
    doc: dict[str, Any] = {}
    for origin, settings, strict in layers:
        kept: dict[str, Any] = {}
        for section, body in settings.items():
            if section in PRIMUS_TORCHTITAN_SECTIONS:
                continue
            if strict or section in TT_FREE_SECTIONS or (section in TT_CHECKED and not isinstance(body, dict)):
                kept[section] = body  # checked by the torchtitan reader
            elif section in TT_CHECKED:
                kept[section] = {k: v for k, v in body.items() if k in TT_CHECKED[section]}
                dropped = sorted(set(body) - TT_CHECKED[section])
                if dropped:
                    problems.note(f"{origin}: {section}.{', '.join(dropped)} not read (Primus's own settings)")
            else:
                problems.note(f"{origin}: section '{section}' not read (Primus's own settings)")
        doc = deep_merge(doc, kept)
    return torchtitan_from_doc(doc, problems, base=where.parent, source=source, num_gpus=num_gpus, model=model)


def _layer_ids(raw: Any, where: str, problems: Problems) -> list[int] | None:
    if raw is None:
        return None
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(str(i).strip().lstrip("-").isdigit() for i in items):
        problems.add(f"{where} must be a list of layer indices (got {raw!r})")
        return None
    return [int(str(i).strip()) for i in items]


def write_primus(model: ModelSpec, system: SystemSpec, train: TrainingSpec, *, strict: bool = False) -> str:
    """A Primus experiment whose `overrides` carry the whole plan (model shape included)."""
    train = resolve_dp(train, system)
    values, gaps = megatron_values(model, system, train)
    switch = train.schedule.framework_names.get("primus")
    if switch:
        gaps = [g for g in gaps if not g.startswith("pipeline schedule")]
        values["enable_zero_bubble"] = True
        values[switch] = True
    values.pop("tokenizer_type", None)
    if train.recompute_layer_ids is not None:  # Primus's own key replaces Megatron's uniform recompute
        gaps = [g for g in gaps if not g.startswith(RECOMPUTE_LAYER_IDS_GAP)]
        values.pop("recompute_method", None)
        values.pop("recompute_num_layers", None)
        values[RECOMPUTE_LAYER_IDS] = list(train.recompute_layer_ids)
    overrides = {"train_iters": 100, "mock_data": True, "lr": 1.0e-4, **values}
    preset = preset_matching(model)
    model_file = PRIMUS_MODEL_FILES.get(preset or "", f"{model.name}.yaml")
    doc = {
        "work_group": "${PRIMUS_TEAM:amd}",
        "user_name": "${PRIMUS_USER:root}",
        "exp_name": f"${{PRIMUS_EXP_NAME:{model.name}-paraplan}}",
        "workspace": "./output",
        "modules": {
            MODULE: {"framework": "megatron", "config": "pre_trainer.yaml", "model": model_file, "overrides": overrides}
        },
    }
    comments = header_lines(model, system, train, "Primus experiment") + finish_gaps(gaps, strict, "Primus")
    comments.append(f"run: EXP=this.yaml bash ./examples/run_pretrain.sh on {system.num_nodes} node(s)")
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)
    return "".join(f"# {c}\n" for c in comments) + body
