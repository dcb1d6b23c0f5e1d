"""Measured runs (the columns of shared/data/measured/public.csv) as paraplan specs.

Where a row leaves a setting empty, the named framework's default of the row's era applies
(`paraplan.specs.frameworks`: each default with its release range and source); every row records which defaults it
used. A framework name outside paraplan's list takes its family's (with a recorded warning); a GPT row without an FFN
size or KV heads takes the architecture's (4h, MHA), a row without a precision bf16. A row without a preset whose
architecture the columns cannot state (MLA, GPT-OSS) takes the one preset its shape columns match.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from paraplan.errors import ConfigError
from paraplan.specs.frameworks import (
    ModelRecipe,
    defaults_on,
    eras_of,
    framework_family,
    model_recipe,
    resolve_rule,
)
from paraplan.specs.knobs import knob_problems
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import model_names, model_preset, system_preset, variant_on
from paraplan.specs.schedule import megatron_schedule
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.textfiles import read_text_file

REQUIRED_COLUMNS = (
    "id", "source", "model", "arch", "num_layers", "hidden", "ffn_hidden", "num_heads", "seq_len", "gpu_preset",
    "num_gpus", "tp", "pp", "mbs", "gbs", "precision", "framework", "metric", "value",
)  # fmt: skip


@dataclass(frozen=True)
class Assumption:
    """A setting the row's source leaves out, and what the row is projected with instead."""

    key: str  # a TrainingSpec field, or what was decided ("pipeline split")
    value: str = ""
    why: str = ""  # where the choice comes from, when it is not the framework's plain default

    @property
    def value_text(self) -> str:
        """The value with where it comes from ("a100-sxm4-40gb (a100-sxm4-80gb was announced ...)")."""
        return f"{self.value} ({self.why})" if self.why and self.value else self.value

    def __str__(self) -> str:
        if not self.value:
            return f"{self.key} ({self.why})" if self.why else self.key
        return f"{self.key}={self.value_text}"


@dataclass(frozen=True)
class MeasuredRun:
    id: str
    source: str
    metric: str
    value: float
    model: ModelSpec
    system: SystemSpec
    train: TrainingSpec
    group: tuple[str, str, int]  # (model, gpu, num_gpus): runs whose ordering a tuner must get right
    defaults_used: tuple[Assumption, ...] = field(default_factory=tuple)


def _cell_number(row: dict[str, str], key: str) -> float | None:
    """A numeric cell (None when empty); anything else names the row, the column and the cell."""
    value = (row.get(key) or "").strip()
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ConfigError(f"row {row.get('id', '?')}: column {key} must be a number (got {value!r})")
    return number


def _int(row: dict[str, str], key: str) -> int | None:
    number = _cell_number(row, key)
    if number is not None and not number.is_integer():
        raise ConfigError(f"row {row.get('id', '?')}: column {key} must be an integer (got {row[key].strip()!r})")
    return None if number is None else int(number)


def _measured_value(row: dict[str, str]) -> float:
    value = _cell_number(row, "value")
    if value is None or value <= 0:
        raise ConfigError(f"row {row.get('id', '?')}: the measured value must be > 0 (got {row.get('value')!r})")
    return value


# Megatron-LM functional tests whose model paraplan ships as a preset (specs/presets/models.yaml, each with the
# test's model_config.yaml as its source): the test's whole architecture (MLA, MTP, shared experts, dense layers
# before the MoE ones), which the columns cannot hold.
MEGATRON_TEST_MODELS = {
    "moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed": "mlm-moe-proxy-16l",
    "moe/deepseek_proxy_fsdp_ep2_fsdp2": "mlm-dsv3-proxy-8l",
}
_MEGATRON_TEST_CASE = re.compile(r"tests/functional_tests/test_cases/([\w.-]+/[\w.-]+)/")
_SHAPE_COLUMNS = {
    "num_layers": "num_layers", "hidden": "hidden_size", "num_heads": "num_attention_heads",
    "num_experts": "num_experts", "topk": "moe_router_topk",
}  # fmt: skip


def _megatron_test_preset(row: dict[str, str]) -> str:
    """The preset of the Megatron-LM functional test a row's source_ref names ("" for none), checked against the
    row's shape columns: a row that states another shape is a ConfigError naming each column that differs."""
    case = _MEGATRON_TEST_CASE.search(row.get("source_ref") or "")
    name = case.group(1) if case else ""
    preset = MEGATRON_TEST_MODELS.get(name, "")
    if not preset:
        return ""
    model = model_preset(preset)
    differ = [
        f"{column} {_int(row, column)} (the test's model has {getattr(model, field)})"
        for column, field in _SHAPE_COLUMNS.items()
        if _int(row, column) is not None and _int(row, column) != getattr(model, field)
    ]
    if differ:
        raise ConfigError(
            f"row {row.get('id', '?')}: the Megatron-LM test {name} runs {preset}, but the row states "
            f"{', '.join(differ)}"
        )
    return preset


# The row columns that state a model's shape, and the ModelSpec fields they are (`ffn_hidden` is an MoE model's expert
# FFN when its dense FFN differs: either matches)
_PRESET_SHAPE_COLUMNS = {
    "num_layers": ("num_layers",), "hidden": ("hidden_size",), "ffn_hidden": ("ffn_hidden_size", "moe_ffn_hidden_size"),
    "num_heads": ("num_attention_heads",), "num_kv_heads": ("num_query_groups",), "vocab": ("vocab_size",),
    "num_experts": ("num_experts",), "topk": ("moe_router_topk",),
}  # fmt: skip
# Architectures whose shape the columns can state whole (a ModelSpec built from them): the GPT block, llm-foundry's
# MPT and a Llama-style block with attention width = hidden. Others (MLA, GPT-OSS's attention 64 x 64 over a hidden of
# 2,880 with sliding windows and sinks, Qwen3's head dim 128) need their preset.
COLUMN_ARCHS = ("gpt", "other", "mpt", "llama")


def _matches_shape(row: dict[str, str], model: ModelSpec) -> bool:
    for column, fields in _PRESET_SHAPE_COLUMNS.items():
        stated = _int(row, column)
        if stated is not None and all(getattr(model, name) != stated for name in fields):
            return False
    return True


def _shape_preset(row: dict[str, str]) -> tuple[str, list[Assumption]]:
    """The preset of a row without one whose architecture the columns cannot state: the one preset whose shape agrees
    with every shape column the row states. None or several: a ConfigError naming the architecture."""
    arch = (row.get("arch") or "").strip().lower()
    if arch in COLUMN_ARCHS:
        return "", []
    matches = [name for name in model_names() if _matches_shape(row, model_preset(name))]
    if len(matches) != 1:
        found = f"presets {', '.join(matches)} all match" if matches else "no preset matches"
        raise ConfigError(
            f"row {row.get('id', '?')}: architecture '{arch}' needs a model preset (the columns cannot state its "
            f"shape) and {found} its columns ({', '.join(c for c in _PRESET_SHAPE_COLUMNS if _int(row, c))})"
        )
    why = f"the only preset whose shape matches the row's columns (architecture '{arch}')"
    return matches[0], [Assumption("model preset", matches[0], why)]


def _model_from_row(row: dict[str, str]) -> tuple[ModelSpec, list[Assumption]]:
    used: list[Assumption] = []
    preset = (row.get("model_preset") or "").strip() or _megatron_test_preset(row)
    if not preset:
        preset, used = _shape_preset(row)
    if preset:
        model = model_preset(preset)
        if model.mtp_num_layers and "w/o mtp" in row["model"].lower():  # "DeepSeekV3 (w/o MTP)": trained without
            model = model.with_overrides(mtp_num_layers=0)
        return model, used
    arch = row["arch"].strip().lower()
    hidden = _int(row, "hidden")
    heads = _int(row, "num_heads")
    num_experts = _int(row, "num_experts") or 0
    common = dict(
        name=row["model"],
        num_layers=_int(row, "num_layers"),
        hidden_size=hidden,
        ffn_hidden_size=_int(row, "ffn_hidden"),
        num_attention_heads=heads,
        num_query_groups=_int(row, "num_kv_heads"),
        vocab_size=_int(row, "vocab") or 51200,
    )
    if num_experts:
        common.update(
            num_experts=num_experts, moe_ffn_hidden_size=_int(row, "ffn_hidden"), moe_router_topk=_int(row, "topk") or 2
        )
    if arch in ("gpt", "other"):
        return ModelSpec(
            activation="gelu", norm="layernorm", position="learned", attention_bias=True, dropout=True, **common
        ), used
    if arch == "mpt":  # llm-foundry MPT: ALiBi, GELU MLP (expansion 4), LayerNorm, no biases, no dropout
        return ModelSpec(activation="gelu", norm="layernorm", position="alibi", **common), used
    return ModelSpec(**common), used


# Megatron-Bridge's DeepSeek-V3 layouts, by number of model chunks (pp x vpp): decoder layers per chunk, the
# embedding with the first, MTP and loss with the last (megatron-bridge 0.3.1,
# recipes/deepseek/deepseek_v3.py `set_deepseek_v3_pipeline_model_parallel_layout`, whose map gives the same
# layout to (8, 1) and (4, 2), and to (16, 1), (8, 2) and (4, 4); NeMo 2.5 scripts/performance has the same map).
DEEPSEEK_V3_LAYOUTS: dict[int, tuple[int, ...]] = {
    4: (16, 16, 16, 13),
    8: (8,) * 7 + (5,),
    16: (4,) * 15 + (1,),
}


def _pipeline_split(model: ModelSpec, pp: int, chunks: int, preset: str = "") -> dict[str, object]:
    """Megatron-Bridge: DeepSeek-V3's recipe layouts; else count embedding and loss as layers when that makes the
    split even; else spread."""
    n = pp * chunks
    if preset == "deepseek-v3" and n in DEEPSEEK_V3_LAYOUTS and sum(DEEPSEEK_V3_LAYOUTS[n]) == model.num_layers:
        return {"pipeline_layout": DEEPSEEK_V3_LAYOUTS[n]}
    if model.num_layers % n == 0:
        return {}
    if (model.num_layers + 2) % n == 0:
        return {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    base, extra = divmod(model.num_layers, n)
    layout = [base + (1 if 0 < i <= extra else 0) for i in range(n)]
    if sum(layout) != model.num_layers:
        layout[-1] += model.num_layers - sum(layout)
    return {"pipeline_layout": tuple(layout)}


def _batch_fill(row: dict[str, str]) -> tuple[dict[str, str], list[Assumption]]:
    """Megatron-LM before v2.0 (late 2020) had no gradient accumulation: `--batch-size` was the batch of one model
    instance and the global batch that times the data-parallel size (Megatron-LM arguments.py, 2019-2020; today's
    `--global-batch-size` still defaults to micro-batch x dp). An unstated micro-batch is therefore gbs / dp."""
    if (row.get("mbs") or "").strip() or (row.get("framework") or "").strip() != "megatron-lm":
        return {}, []
    gbs, dp = _int(row, "gbs"), _int(row, "dp")
    if gbs is None or dp is None or dp < 1 or gbs % dp:
        return {}, []
    return {"mbs": str(gbs // dp)}, [Assumption("mbs", "gbs/dp", "Megatron-LM's batch per model instance")]


def _source_date(row: dict[str, str]) -> date | None:
    """The date a row's source gives for itself: the first ISO date in `source_ref` (a commit's date, for rows read
    from a repository), else the month of its arXiv identifier (arXiv 2104.04473: April 2021), None when it gives
    neither."""
    ref = row.get("source_ref") or ""
    found = re.search(r"\b\d{4}-\d{2}-\d{2}\b", ref)
    try:
        if found:
            return date.fromisoformat(found.group(0))
        arxiv = re.search(r"\barXiv[: ]+(\d{2})(\d{2})\.\d{4,5}\b", ref)
        return date(2000 + int(arxiv.group(1)), int(arxiv.group(2)), 1) if arxiv else None
    except ValueError:  # not a calendar day (2020-13-45)
        return None


def _gpu_preset(row: dict[str, str]) -> tuple[str, list[Assumption]]:
    """The row's GPU preset, or the variant of its chip that existed on the source's date (`variant_on`)."""
    name = row["gpu_preset"].strip()
    on = _source_date(row)
    if on is None:
        return name, []
    preset, why = variant_on(name, on)
    return preset, [Assumption("gpu_preset", preset, why)] if why else []


_STATED_HBM = re.compile(r"\b(\d+(?:\.\d+)?)\s*GB\b")


def _stated_hbm_gib(row: dict[str, str], preset_hbm_gib: float) -> tuple[float | None, list[Assumption]]:
    """The memory of the GPU as the row publishes it (`gpu`: "H100 96GB HBM2e @500W") where it differs from the
    preset that stands in for the chip's speed (`gpu_preset` h100-sxm5-80gb): the run had that much memory, so
    the FITS verdict compares with it. HBM is sold in binary gigabytes (an "80GB" H100 holds 80 GiB, as the
    presets' `hbm_gib`), so the stated figure is read as GiB. None when the name states no size or the preset's."""
    found = _STATED_HBM.search(row.get("gpu") or "")
    if found is None or float(found.group(1)) == preset_hbm_gib:
        return None, []
    stated = float(found.group(1))
    why = f"the published GPU ({row['gpu'].strip()}) holds {stated:g} GB, the stand-in preset {preset_hbm_gib:g}"
    return stated, [Assumption("hbm_gib", f"{stated:g}", why)]


_ATTENTION_BACKEND_FLAG = re.compile(r"--attention-backend[ =](\w+)")


def _stated_attention_backend(row: dict[str, str]) -> str | None:
    """The attention backend a Megatron row's notes state with its `--attention-backend` flag (unfused or local: the
    unfused core attention; flash, fused or auto: a fused kernel); None when they state none, and the defaults of
    the framework's release at the row's date apply (`specs.frameworks`: Megatron-core's `auto` since 2024)."""
    flag = _ATTENTION_BACKEND_FLAG.search(row.get("notes") or "")
    if flag is None:
        return None
    return "unfused" if flag.group(1).lower() in ("unfused", "local") else "flash"


_STATED_TECHNIQUE = re.compile(r"\btechnique '([^']*)'")
COMPILE_IS_KERNEL_FUSION = frozenset({"torchtitan"})
"""Frameworks whose one kernel fusion is torch.compile (torchtitan: `training.compile` / `compile.enable` is
`TrainingSpec.kernel_fusion`, `formats.torchtitan._compiled`); Megatron's fusions are its own kernels."""


def _stated_compile(row: dict[str, str], framework: str) -> bool | None:
    """Whether the techniques a row's notes list (`technique '<a> + <b>'`, a benchmark table's column) include
    torch.compile, for a framework whose kernel fusion is torch.compile; None when the notes list none. A listed
    technique without it is an eager run (torchtitan's `training.compile` is off by default, config_manager.py)."""
    stated = _STATED_TECHNIQUE.search(row.get("notes") or "")
    if stated is None or framework not in COMPILE_IS_KERNEL_FUSION:
        return None
    return "torch.compile" in stated.group(1)


def _megatron_fsdp(row: dict[str, str]) -> bool:
    """Whether the row's FSDP flavour is Megatron-LM's own (`megatron_fsdp`), not DeepSpeed's ZeRO-3."""
    return "megatron_fsdp" in (row.get("fsdp") or "").strip().lower()


# Architectures whose unstated FFN size and KV heads have one default: the GPT block (GPT-2/3, Megatron's GPT,
# llm-foundry's MPT) has an MLP of 4 x hidden (Radford et al. 2019; Megatron-LM `--ffn-hidden-size` defaults to
# 4 * hidden-size) and multi-head attention (`--num-query-groups` unset). Llama-style models have no such rule.
GPT_LIKE_ARCHS = ("gpt", "other", "mpt")
DEFAULT_PRECISION = "bf16"  # mixed precision of every framework's current recipes (Megatron-core, NeMo, torchtitan)


def _shape_fill(row: dict[str, str]) -> tuple[dict[str, str], list[Assumption]]:
    """What the architecture and today's practice say for fields a row leaves empty: a GPT-like row's FFN size (4h)
    and KV heads (MHA), and the precision (bf16)."""
    fill: dict[str, str] = {}
    used: list[Assumption] = []
    gpt_like = (row.get("arch") or "").strip().lower() in GPT_LIKE_ARCHS
    preset = (row.get("model_preset") or "").strip()
    hidden = _int(row, "hidden")
    if gpt_like and not preset and hidden and not (row.get("ffn_hidden") or "").strip():
        fill["ffn_hidden"] = str(4 * hidden)
        used.append(Assumption("ffn_hidden", str(4 * hidden), "GPT block: 4 x hidden"))
    if gpt_like and not preset and _int(row, "num_heads") and not (row.get("num_kv_heads") or "").strip():
        fill["num_kv_heads"] = str(_int(row, "num_heads"))
        used.append(Assumption("num_kv_heads", str(_int(row, "num_heads")), "GPT block: multi-head attention"))
    if not (row.get("precision") or "").strip():
        fill["precision"] = DEFAULT_PRECISION
        used.append(Assumption("precision", DEFAULT_PRECISION, "not stated: current mixed-precision default"))
    return fill, used


def release_date(row: dict[str, str]) -> date | None:
    """The release a row's run used: a NeMo / Megatron-Bridge container release YY.MM named in its source
    ("MegatronBridge_perf_summary_26.02": February 2026) or a month YYYYMM ("torchtitan_benchmarks_202412": December
    2024), else the source's own date (`_source_date`)."""
    source = (row.get("source") or "").strip()
    named = re.search(r"_(\d{2})\.(\d{2})$", source)
    if named and 1 <= int(named.group(2)) <= 12:
        return date(2000 + int(named.group(1)), int(named.group(2)), 1)
    month = re.search(r"_(20\d{2})(\d{2})$", source)
    if month and 1 <= int(month.group(2)) <= 12:
        return date(int(month.group(1)), int(month.group(2)), 1)
    return _source_date(row)


def run_from_row(row: dict[str, str], framework_version: date | None = None) -> MeasuredRun:
    """The row as specs. `framework_version`: the release whose defaults an undated row takes (the current one when
    None); a dated row takes its own era's."""
    fill, used = _batch_fill(row)
    shape_fill, shape_used = _shape_fill({**row, **fill})
    missing = [c for c in REQUIRED_COLUMNS if not ({**row, **fill, **shape_fill}.get(c) or "").strip()]
    incomplete = (row.get("complete") or "1").strip() == "0"
    if incomplete and not fill:
        # the source marks the row incomplete; projected only when the framework's defaults fill what it leaves out
        missing.append("complete=0 (the source leaves fields a projection needs unstated)")
    if missing:
        raise ConfigError(f"row {row.get('id', '?')}: missing {', '.join(missing)}")
    row = {**row, **fill, **shape_fill}
    used.extend(shape_used)
    if incomplete:
        used.append(Assumption("projected although the source marks the row incomplete"))
    model, model_used = _model_from_row(row)
    used.extend(model_used)
    num_gpus = _int(row, "num_gpus")
    gpu, gpu_used = _gpu_preset(row)
    used.extend(gpu_used)
    system = system_preset(gpu, num_gpus)
    overrides: dict[str, object] = {}
    hbm_gib, hbm_used = _stated_hbm_gib(row, system.gpu.hbm_gib)
    if hbm_gib is not None:
        overrides["hbm_gib"] = hbm_gib
        used.extend(hbm_used)
    if _int(row, "gpus_per_node"):
        overrides["gpus_per_node"] = _int(row, "gpus_per_node")
    if (row.get("nic_gbps_per_gpu") or "").strip():
        overrides["nic_gbps"] = _cell_number(row, "nic_gbps_per_gpu")
    system = system.with_overrides(**overrides)
    family = framework_family(row["framework"])
    framework = family.framework
    if family.warning:
        used.append(Assumption("framework", framework, family.warning))
    on = release_date(row)
    era = defaults_on(framework, on or framework_version)
    defaults = dict(era.settings) if era else {}
    era_why = era.label if era else ""
    if era and not (on or framework_version) and len(eras_of(framework)) > 1:
        era_why += ": no source date, the current release"
    tp, pp = _int(row, "tp") or 1, _int(row, "pp") or 1
    vpp = _int(row, "vpp") or 1
    values: dict[str, object] = {
        "tp": tp,
        "pp": pp,
        "vpp": vpp,
        "cp": _int(row, "cp") or 1,
        "ep": _int(row, "ep") or 1,
        "dp": _int(row, "dp"),
        "mbs": _int(row, "mbs"),
        "gbs": _int(row, "gbs"),
        "seq": _int(row, "seq_len"),
        "precision": row["precision"].strip(),
        "framework": framework,
        "pipeline_schedule": megatron_schedule(vpp).name,
    }
    stated = {
        "sequence_parallel": (row.get("sp") or "").strip(),
        "recompute_granularity": (row.get("recompute") or "").strip(),
        "zero_stage": (row.get("zero") or "").strip(),
    }
    if stated["sequence_parallel"]:
        values["sequence_parallel"] = stated["sequence_parallel"] == "1"
    backend = _stated_attention_backend(row) if framework.startswith("megatron") else None
    if backend:
        values["attention_backend"] = backend
    if stated["recompute_granularity"]:
        values["recompute_granularity"] = stated["recompute_granularity"]
    compiled = _stated_compile(row, framework)
    if compiled is not None:
        values["kernel_fusion"] = compiled
    if stated["zero_stage"]:
        zero = _int(row, "zero") or 0
        values["zero_stage"] = zero
        if zero == 1:
            values["use_distributed_optimizer"] = True
        if zero == 3:
            values["fsdp"] = True
            defaults.pop("use_distributed_optimizer", None)
            if framework == "megatron-lm" and not _megatron_fsdp(row):
                # the ZeRO-3 baseline of Megatron-LM papers (SC21 Table 2) is DeepSpeed's ZeRO-3; a row whose `fsdp`
                # names Megatron's own FSDP (`--use-megatron-fsdp`, functional tests) stays Megatron-LM
                values["framework"] = "deepspeed"
                used.append(Assumption("framework", "deepspeed", "ZeRO-3 runs in Megatron-LM papers use DeepSpeed"))
        # zero 0 under nemo-megatron keeps the recipes' distributed optimizer (`paraplan.specs.frameworks`)
    for key, value in defaults.items():
        if key in values:
            continue
        value = resolve_rule(value, tp, str(values["precision"]), gpu, model.is_moe)
        if key == "expert_tensor_parallel_size" and not model.is_moe:
            continue
        values[key] = value
        used.append(Assumption(key, str(value), era_why))
    if values.get("fsdp"):
        values.pop("use_distributed_optimizer", None)
    if model.is_moe and "expert_tensor_parallel_size" not in values:
        etp = _expert_tp_the_grid_admits(values, num_gpus)
        if etp is not None:
            values["expert_tensor_parallel_size"] = etp
            used.append(Assumption("expert_tensor_parallel_size", str(etp), _GRID_WHY.format(tp=tp)))
    chunks = vpp if vpp > 1 else 1
    recipe_model = (row.get("model_preset") or "").strip() if framework == "nemo-megatron" else ""
    recipe = model_recipe(framework, recipe_model, gpu) if recipe_model else None
    split = _pipeline_split(model, pp, chunks, recipe_model)
    if split:
        used.append(Assumption("pipeline split", " + ".join(split)))
    values.update(split)
    train = TrainingSpec().with_values(**values)
    if recipe is not None:
        train = _with_recipe(model, train, recipe, values, used)
    return MeasuredRun(
        id=row["id"],
        source=row["source"],
        metric=row["metric"].strip(),
        value=_measured_value(row),
        model=model,
        system=system,
        train=train,
        group=(row["model"], gpu, num_gpus),
        defaults_used=tuple(used),
    )


def _with_recipe(
    model: ModelSpec, train: TrainingSpec, recipe: ModelRecipe, values: dict[str, object], used: list[Assumption]
) -> TrainingSpec:
    """`train` with the model's recipe (`specs.frameworks.MODEL_RECIPES`) where the row is silent, unless the
    framework's own rules refuse it on the row's layout (the recipe was written for another one: e.g. EP overlap
    with pp > 1 and no virtual pipeline); the assumptions say which."""
    taken = {key: value for key, value in recipe.settings.items() if key not in values}
    if not taken:
        return train
    with_recipe = train.with_values(**taken)
    refused = set(knob_problems(model, with_recipe)) - set(knob_problems(model, train))
    if refused:
        used.append(Assumption(f"{recipe.label} not taken", "", "; ".join(sorted(refused))))
        return train
    used.extend(Assumption(key, str(value), recipe.label) for key, value in taken.items())
    return with_recipe


_GRID_WHY = (
    "unstated; Megatron's default (tp = {tp}) breaks the expert grid (etp*ep must divide tp*cp*dp), so the run that "
    "ran used the largest expert TP that fits it"
)


def _expert_tp_the_grid_admits(values: dict[str, object], num_gpus: int) -> int | None:
    """The expert TP of a MoE row that leaves it unstated when Megatron's default (expert TP = tp) cannot have run:
    Megatron-Core's expert grid needs etp*ep to divide tp*cp*dp (`parallel_state.initialize_model_parallel`), so a
    measured run with tp*cp*dp not divisible by tp*ep used a smaller etp; the largest divisor of tp that fits.
    None when the default fits, or nothing does (the validator then names the rule)."""
    tp, cp, ep, pp = (int(values[k] or 1) for k in ("tp", "cp", "ep", "pp"))  # type: ignore[call-overload]
    dp = int(values["dp"] or 0) or num_gpus // max(1, tp * cp * pp)  # type: ignore[call-overload]
    dense = tp * cp * dp
    if dense % (tp * ep) == 0:
        return None
    return next((etp for etp in range(tp - 1, 0, -1) if tp % etp == 0 and dense % (etp * ep) == 0), None)


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """The rows of a measured-runs CSV (UTF-8, a spreadsheet's byte-order mark accepted); cells are checked
    row by row when projected (`run_from_row`), so one bad cell costs one row."""
    path = Path(path)
    text = read_text_file(path, "--data")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise ConfigError(f"{path}: missing columns {', '.join(missing)}")
        reader.fieldnames = header
        # a row longer than the header puts its extra cells under None; a shorter one leaves None values
        return [{k: v or "" for k, v in row.items() if isinstance(k, str)} for row in reader]
    except csv.Error as exc:
        raise ConfigError(f"{path}: not a readable CSV ({exc})") from None
