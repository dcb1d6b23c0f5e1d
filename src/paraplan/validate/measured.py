"""Measured runs (the columns of shared/data/measured/public.csv) as paraplan specs.

Where a row leaves a setting empty, the named framework's default applies; `FRAMEWORK_DEFAULTS` lists
each choice and where it comes from, and every row records which defaults it used.
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
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import model_preset, system_preset, variant_on
from paraplan.specs.schedule import megatron_schedule
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.textfiles import read_text_file

REQUIRED_COLUMNS = (
    "id", "source", "model", "arch", "num_layers", "hidden", "ffn_hidden", "num_heads", "seq_len", "gpu_preset",
    "num_gpus", "tp", "pp", "mbs", "gbs", "precision", "framework", "metric", "value",
)  # fmt: skip

# What each framework does when a row does not say (documented choices, not fitted).
FRAMEWORK_DEFAULTS: dict[str, dict[str, object]] = {
    # Megatron-LM as used in the 2020-2022 papers: unfused core attention (fused softmax kernel; flash
    # attention arrived in 2022-23), torch DDP with overlapped bucketed all-reduce, no distributed optimizer.
    "megatron-lm": {
        "attention_backend": "unfused",
        "overlap_grad_reduce": True,
        "sequence_parallel": False,
        "recompute_granularity": "full",
        # `--accumulate-allreduce-grads-in-fp32` was off by default (forced on for bf16): fp16 gradients
        # are all-reduced in fp16 (Megatron-LM arguments.py, 2020-2022)
        "grad_reduce_in_fp32": "bf16",
    },
    # Megatron-DeepSpeed as run by vTrain (MICRO'24): unfused attention, 1F1B, no gradient bucketing
    # (grad all-reduce after the backward, not overlapped).
    "megatron-deepspeed": {
        "attention_backend": "unfused",
        "overlap_grad_reduce": False,
        "sequence_parallel": False,
        "recompute_granularity": "full",
        "grad_reduce_in_fp32": "bf16",  # Megatron-DeepSpeed keeps Megatron's flag, off by default (as above)
    },
    # NeMo 24.07 / Megatron-Bridge 25.11 performance recipes (scripts/performance): flash attention (TE),
    # distributed optimizer with overlapped grad reduce-scatter and param all-gather, sequence parallel
    # whenever tp > 1, TP communication overlap (userbuffers) on, no activation recompute, expert TP 1 for MoE,
    # embedding and loss accounted in the pipeline split when the layers do not divide.
    "nemo-megatron": {
        "attention_backend": "flash",
        "use_distributed_optimizer": True,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
        "sequence_parallel": "tp>1",
        "tp_comm_overlap": "tp>1",
        "recompute_granularity": "none",
        "expert_tensor_parallel_size": 1,
        "cross_entropy_fusion": True,  # the recipes set cross_entropy_loss_fusion
        # the performance scripts reduce gradients in bf16, so the grad buffer is bf16 too (nemo-toolkit 2.5.0
        # scripts/performance/helpers.py `set_precision_configs`: `grad_reduce_in_fp32 = False` for every
        # compute dtype); the 24.07 rows' launcher configurations are not in the released packages: the same
        "grad_reduce_in_fp32": False,
        # MoE tokens: the alltoall dispatcher (TrainingSpec's default). megatron-bridge 0.3.1's recipes name DeepEP
        # for Qwen3 MoE and HybridEP for DeepSeek-V3 (`moe_flex_dispatcher_backend`, applied on the GPUs that
        # `apply_flex_dispatcher_backend` allows), but the performance scripts behind the 25.11 rows are not
        # released. Run with the flex dispatcher, those 9 rows refitted to 5.51% source-balanced (5.54%) yet
        # 8.9% held out (8.59%; Megatron-Bridge 15.0% from 13.9%, NeMo 6.6% from 5.2%), so they keep alltoall.
    },
    # DeepSpeed: gradients are reduced in the training dtype under fp16 (config `fp32_allreduce`, off by default;
    # `communication_data_type` follows the regime). Megatron-LM rows with ZeRO-3 (SC21 Table 2) switch to this
    # framework but keep Megatron-LM's defaults (its model code), which resolve the same.
    "deepspeed": {
        "grad_reduce_in_fp32": "bf16",
    },
    # llm-foundry (MosaicML): FSDP FULL_SHARD with prefetch, flash attention, bf16 mixed precision
    # (FSDP `mixed_precision: DEFAULT`: bf16 parameters, fp32 gradient reduction).
    "llm-foundry": {
        "attention_backend": "flash",
        "fsdp": True,
        "zero_stage": 3,
        "sequence_parallel": False,
        "recompute_granularity": "none",
        "cross_entropy_fusion": True,  # torch F.cross_entropy: one log-softmax kernel, not Megatron's eager chain
    },
}


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


def _model_from_row(row: dict[str, str]) -> ModelSpec:
    preset = (row.get("model_preset") or "").strip()
    if preset:
        model = model_preset(preset)
        if model.mtp_num_layers and "w/o mtp" in row["model"].lower():  # "DeepSeekV3 (w/o MTP)": trained without
            model = model.with_overrides(mtp_num_layers=0)
        return model
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
        )
    if arch == "mpt":  # llm-foundry MPT: ALiBi, GELU MLP (expansion 4), LayerNorm, no biases, no dropout
        return ModelSpec(activation="gelu", norm="layernorm", position="alibi", **common)
    return ModelSpec(**common)


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


# Megatron-LM overlaps the backward's tensor-parallel all-reduce with the weight-gradient GEMM from late 2021
# (`--async-tensor-model-parallel-allreduce`, on by default; Korthikanti et al. 2022 build sequence parallelism's
# asynchronous reduce-scatter on it); the runs of the 2020 and 2021 papers predate it.
MEGATRON_ASYNC_TP_FROM = date(2022, 1, 1)


def _async_tp(row: dict[str, str]) -> list[Assumption]:
    """Megatron-LM rows older than its asynchronous backward TP collective: the stream waits for them."""
    on = _source_date(row)
    if row["framework"].strip() != "megatron-lm" or on is None or on >= MEGATRON_ASYNC_TP_FROM:
        return []
    return [Assumption("tp_async_backward", "False", f"Megatron-LM before {MEGATRON_ASYNC_TP_FROM:%Y}")]


def _gpu_preset(row: dict[str, str]) -> tuple[str, list[Assumption]]:
    """The row's GPU preset, or the variant of its chip that existed on the source's date (`variant_on`)."""
    name = row["gpu_preset"].strip()
    on = _source_date(row)
    if on is None:
        return name, []
    preset, why = variant_on(name, on)
    return preset, [Assumption("gpu_preset", preset, why)] if why else []


_ATTENTION_BACKEND_FLAG = re.compile(r"--attention-backend[ =](\w+)")
_TRANSFORMER_ENGINE = re.compile(r"\btransformer[_-]engine\b", re.IGNORECASE)


def _stated_attention_backend(row: dict[str, str]) -> str | None:
    """The attention backend a Megatron row's notes state: its `--attention-backend` flag (unfused or local: the
    unfused core attention; flash, fused or auto: a fused kernel), else, for a run on TransformerEngine
    (`--transformer-impl transformer_engine`) that sets none, Megatron-core's default `auto` (arguments.py since
    core 0.10), under which TE's DotProductAttention runs flash or cuDNN fused attention; None when they say
    neither (the framework's default applies)."""
    notes = row.get("notes") or ""
    flag = _ATTENTION_BACKEND_FLAG.search(notes)
    if flag:
        return "unfused" if flag.group(1).lower() in ("unfused", "local") else "flash"
    return "flash" if _TRANSFORMER_ENGINE.search(notes) else None


def _megatron_fsdp(row: dict[str, str]) -> bool:
    """Whether the row's FSDP flavour is Megatron-LM's own (`megatron_fsdp`), not DeepSpeed's ZeRO-3."""
    return "megatron_fsdp" in (row.get("fsdp") or "").strip().lower()


def run_from_row(row: dict[str, str]) -> MeasuredRun:
    fill, used = _batch_fill(row)
    missing = [c for c in REQUIRED_COLUMNS if not ({**row, **fill}.get(c) or "").strip()]
    incomplete = (row.get("complete") or "1").strip() == "0"
    if incomplete and not fill:
        # the source marks the row incomplete; projected only when the framework's defaults fill what it leaves out
        missing.append("complete=0 (the source leaves fields a projection needs unstated)")
    if missing:
        raise ConfigError(f"row {row.get('id', '?')}: missing {', '.join(missing)}")
    row = {**row, **fill}
    if incomplete:
        used.append(Assumption("projected although the source marks the row incomplete"))
    model = _model_from_row(row)
    num_gpus = _int(row, "num_gpus")
    gpu, gpu_used = _gpu_preset(row)
    used.extend(gpu_used)
    system = system_preset(gpu, num_gpus)
    overrides: dict[str, object] = {}
    if _int(row, "gpus_per_node"):
        overrides["gpus_per_node"] = _int(row, "gpus_per_node")
    if (row.get("nic_gbps_per_gpu") or "").strip():
        overrides["nic_gbps"] = _cell_number(row, "nic_gbps_per_gpu")
    system = system.with_overrides(**overrides)
    framework = row["framework"].strip()
    defaults = dict(FRAMEWORK_DEFAULTS.get(framework, {}))
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
        # zero 0 under nemo-megatron keeps the recipes' distributed optimizer (FRAMEWORK_DEFAULTS)
    for key, value in defaults.items():
        if key in values:
            continue
        if value == "tp>1":
            value = tp > 1
        elif value == "bf16":  # on for bf16 training only
            value = values["precision"] == "bf16"
        if key == "expert_tensor_parallel_size" and not model.is_moe:
            continue
        values[key] = value
        used.append(Assumption(key, str(value)))
    if values.get("fsdp"):
        values.pop("use_distributed_optimizer", None)
    for item in _async_tp(row):
        values[item.key] = False
        used.append(item)
    chunks = vpp if vpp > 1 else 1
    recipe_model = (row.get("model_preset") or "").strip() if framework == "nemo-megatron" else ""
    split = _pipeline_split(model, pp, chunks, recipe_model)
    if split:
        used.append(Assumption("pipeline split", " + ".join(split)))
    values.update(split)
    train = TrainingSpec().with_values(**values)
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
