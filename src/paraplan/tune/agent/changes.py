"""Applying a proposal's changes to a training spec, and what the agent may not change.

A proposal names `TrainingSpec` fields (or their short aliases) and new values. The job is fixed: the GPU count,
the global batch, the sequence length, the precision and the framework are the recipe's decisions, not knobs
(a change of precision changes the numerics, not only the speed). What follows from a change is adjusted and said:
data parallelism takes the GPUs the model-parallel axes leave, a new pipeline shape gets a split that fits it,
flags that need tp > 1 drop at tp = 1, and what only one recompute granularity takes (a layer count, a method, layer
ids, modules) goes with it. A change to the training itself, not only its speed (drop-and-pad MoE drops tokens; the
precision-aware optimizer keeps lower-precision states), is said in the step's adjustments whoever proposed it.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from typing import Any

from paraplan.errors import ConfigError
from paraplan.graph.balance import balanced_layout
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import ALIASES, TrainingSpec
from paraplan.tune.candidate import model_stages, pipeline_split

FIXED_FIELDS = ("global_batch_size", "seq_length", "precision", "framework", "data_parallel_size")
"""The job, not a knob (data parallelism follows from the GPU count and the other axes)."""
LAYOUT_FIELDS = (
    "pipeline_layout",
    "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
)
PIPELINE_SHAPE = ("pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size", "pipeline_schedule")


def canonical(changes: dict[str, Any]) -> dict[str, Any]:
    """Short names (tp, vpp, mbs, ...) to field names; lists to tuples (a layout read from JSON)."""
    out = {}
    for name, value in changes.items():
        out[ALIASES.get(name, name)] = tuple(value) if isinstance(value, list) else value
    return out


def apply_changes(
    model: ModelSpec, system: SystemSpec, train: TrainingSpec, changes: dict[str, Any]
) -> tuple[TrainingSpec, list[str]]:
    """(the changed spec, the adjustments made to keep it whole). ConfigError for an unknown field, a value of the
    wrong type or a fixed field; the validator judges the rest."""
    wanted = canonical(changes)
    fixed = [name for name in wanted if name in FIXED_FIELDS and wanted[name] != getattr(train, name)]
    if fixed:
        raise ConfigError(f"{', '.join(fixed)}: fixed by the job (GPU count, batch, sequence, precision, framework)")
    if not wanted:
        raise ConfigError("the proposal changes nothing")
    changed = train.with_values(**{k: v for k, v in wanted.items() if v is not None})
    changed = replace(changed, **{k: None for k, v in wanted.items() if v is None})  # None: back to the default
    notes: list[str] = []
    tp, pp, cp = changed.tp, changed.pp, changed.cp
    if tp * pp * cp and system.num_gpus % (tp * pp * cp) == 0:
        dp = system.num_gpus // (tp * pp * cp)
        if dp != train.dp and train.data_parallel_size is not None:
            notes.append(f"dp {train.dp} -> {dp} (the GPU count is fixed)")
        changed = replace(changed, data_parallel_size=dp)
    else:
        changed = replace(changed, data_parallel_size=None)  # the validator names the rule
    if any(getattr(changed, f) != getattr(train, f) for f in PIPELINE_SHAPE) and not set(wanted) & set(LAYOUT_FIELDS):
        stages = model_stages(changed.pipeline_schedule, changed.pp, changed.vpp)
        split = pipeline_split(model, stages, changed.seq)
        if split is None:
            layout = balanced_layout(model, stages, changed.seq)
            split = {"pipeline_layout": layout} if layout is not None else {}
        reset = {name: None if name.endswith(("layout", "layers")) else False for name in LAYOUT_FIELDS}
        changed = replace(changed, **(reset | split))
        notes.append(f"pipeline split for {stages} model stages: {_split_text(split)}")
    if changed.tp == 1 and (changed.sequence_parallel or changed.tp_comm_overlap):
        changed = replace(changed, sequence_parallel=False, tp_comm_overlap=False)
        notes.append("sequence parallelism and TP overlap off (tp = 1)")
    if changed.recompute_granularity != "full" and changed.recompute_num_layers is not None:
        changed = replace(changed, recompute_num_layers=None)
        notes.append("recompute_num_layers dropped (only full recompute takes it)")
    changed, cleared = _recompute_cleared(changed, wanted)
    notes += cleared
    notes += semantics_notes(train, changed)
    return changed, notes


def _recompute_cleared(train: TrainingSpec, wanted: dict[str, Any]) -> tuple[TrainingSpec, list[str]]:
    """The settings only one recompute granularity takes, back to their defaults under another (unless the proposal
    names them: then the validator judges them), and the notes saying so."""
    values: dict[str, Any] = {}
    notes: list[str] = []
    if train.recompute_granularity != "full":
        if train.recompute_method != "block" and "recompute_method" not in wanted:
            values["recompute_method"] = "block"
            notes.append("recompute_method back to block (only full recompute takes a method)")
        if train.recompute_layer_ids is not None and "recompute_layer_ids" not in wanted:
            values["recompute_layer_ids"] = None
            notes.append("recompute_layer_ids dropped (only full recompute takes them)")
    if train.recompute_granularity != "selective" and train.recompute_modules is not None:
        if "recompute_modules" not in wanted:
            values["recompute_modules"] = None
            notes.append("recompute_modules dropped (only selective recompute takes them)")
    return replace(train, **values), notes


def semantics_notes(before: TrainingSpec, after: TrainingSpec) -> list[str]:
    """What a change does to the training itself, not only to its speed: said in the log of every step that makes
    it, whoever proposed it."""
    notes = []
    if after.moe_pad_expert_input_to_capacity and not before.moe_pad_expert_input_to_capacity:
        notes.append(
            f"TRAINING SEMANTICS CHANGE: drop-and-pad MoE (capacity factor {after.moe_expert_capacity_factor}) drops "
            "the tokens routed past an expert's capacity, where dropless routing keeps every token"
        )
    low = [
        f"{name} {getattr(after, name)}"
        for name in ("main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
        if after.use_precision_aware_optimizer
        and getattr(after, name) != "fp32"
        and (getattr(before, name) != getattr(after, name) or not before.use_precision_aware_optimizer)
    ]
    if low:
        notes.append(f"NUMERICS CHANGE: the optimizer keeps {', '.join(low)} instead of fp32")
    return notes


def _split_text(split: dict[str, object]) -> str:
    if not split:
        return "even"
    if "pipeline_layout" in split:
        return f"layout {list(split['pipeline_layout'])}"  # type: ignore[arg-type]
    return "even, embedding and loss counted as a layer each"


def diff(before: TrainingSpec, after: TrainingSpec) -> dict[str, tuple[Any, Any]]:
    """Field -> (before, after) for every field that differs."""
    return {
        f.name: (getattr(before, f.name), getattr(after, f.name))
        for f in fields(TrainingSpec)
        if getattr(before, f.name) != getattr(after, f.name)
    }


def spec_to_json(train: TrainingSpec) -> dict[str, Any]:
    return {f.name: _plain(getattr(train, f.name)) for f in fields(TrainingSpec)}


def spec_from_json(values: dict[str, Any]) -> TrainingSpec:
    names = {f.name for f in fields(TrainingSpec)}
    return TrainingSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in names})


def spec_key(train: TrainingSpec) -> str:
    """A stable text key of a spec (what was tried)."""
    return json.dumps(spec_to_json(train), sort_keys=True)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
