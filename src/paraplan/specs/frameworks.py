"""What each training framework does when a run leaves a setting unstated, by release, and the family a framework
name outside paraplan's list belongs to.

Frameworks change their defaults across releases (Megatron-LM: unfused attention and the papers' full recompute in
2020-21, TransformerEngine's fused attention and no recompute today), so a default belongs to a framework and a
date range: `defaults_on(framework, day)` picks the era that holds `day` (a run's source date, or the release the
user names with `--framework-version`); an undated run takes the current era. Values are TrainingSpec fields, or
a rule the reader resolves against the run (`"tp>1"`: on when tensor parallelism is; `"tp>1 dense not nvfp4"`: the
same but off for MoE models and in NVFP4 runs; `"bf16"`: on for bf16 training; `"not fp16"`: on unless the run trains
in fp16; `"not b200"`: on unless the run's GPU is the B200; `"fp8 params"`: on in the precisions whose NeMo /
Megatron-Bridge recipe quantises the primary weights, `NEMO_QUANTIZED_PARAM_PRECISIONS`). `MODEL_RECIPES`:
what a framework's recipe of one model sets beyond its era's defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from types import MappingProxyType

from paraplan.errors import ConfigError
from paraplan.specs.training import FRAMEWORKS


@dataclass(frozen=True)
class DefaultsEra:
    """One framework's defaults over a date range [since, until) (None: open)."""

    framework: str
    label: str  # shown with every setting a run takes from it ("Megatron-LM 2020-21 papers")
    since: date | None
    until: date | None
    settings: Mapping[str, object]
    source: str

    def holds(self, day: date) -> bool:
        return (self.since is None or self.since <= day) and (self.until is None or day < self.until)


def _era(framework: str, label: str, since: date | None, until: date | None, source: str, **settings: object):
    return DefaultsEra(framework, label, since, until, MappingProxyType(dict(settings)), source)


# Megatron-LM's async backward TP collective (`--async-tensor-model-parallel-allreduce`, on by default) from late
# 2021; Korthikanti et al. 2022 build sequence parallelism's asynchronous reduce-scatter on it.
MEGATRON_ASYNC_TP_FROM = date(2022, 1, 1)
# Megatron-LM's transformer layer from TransformerEngine (`--transformer-impl transformer_engine`, the default of
# Megatron-core's 2024 releases; `--attention-backend auto` later), whose DotProductAttention runs flash / cuDNN fused
# attention; no activation recompute unless `--recompute-granularity` is given. The papers' era before it.
MEGATRON_CORE_FROM = date(2024, 1, 1)
# NeMo's performance scripts launch every run with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` on every GPU but
# the B200 ("as it causes an unexpected error") from nemo-toolkit 2.4.0 (scripts/performance/executors.py, wheel of
# 2025-07-25, the 25.07 container) through 2.7.1; nemo-toolkit 2.3.0 set it for Llama 4 E16 alone.
NEMO_EXPANDABLE_SEGMENTS_FROM = date(2025, 7, 1)
NEMO_QUANTIZED_PARAM_PRECISIONS = frozenset({"fp8", "fp8_cs", "mxfp8"})
"""The precisions whose NeMo / Megatron-Bridge mixed-precision recipe quantises the primary weights
(`TrainingSpec.fp8_param_gather`): nemo-toolkit 2.0.0 recipes/precision/mixed_precision.py `bf16_with_fp8_mixed`
(`fp8_params = True`, which MegatronMixedPrecision turns into `fp8_param_gather`); nemo-toolkit 2.5.0 and
megatron-bridge 0.3.0 (26.02) / 0.6.2 training/mixed_precision.py `bf16_with_fp8_mixed` /
`bf16_with_fp8_delayed_scaling_mixed`, `bf16_with_fp8_current_scaling_mixed` and `bf16_with_mxfp8_mixed` (with
`reuse_grad_buf_for_mxfp8_param_ag`), `fp8_param_gather = True`, which the performance scripts take (nemo-toolkit
2.5.0 scripts/performance/helpers.py `set_precision_configs`; megatron-bridge 0.6.2 perf_recipes/_common.py
`_perf_precision`). The subchannel (blockwise FP8) recipe sets it False, and the NVFP4 one too in 0.3.0 (0.6.2 adds
`fp4_param_gather = True`). Some MoE recipes of megatron-bridge 0.6.2 turn it off (Kimi-K2, GPT-OSS, DeepSeek-V3 on
H100, Qwen3-30B-A3B's GB200 dev configs): no measured row, no recipe entry."""
# torchtitan 0.1.0, its first PyPI release (wheel built 2025-06-18), compiles the loss whenever it compiles the model
TORCHTITAN_COMPILED_LOSS_FROM = date(2025, 6, 18)

_MEGATRON_PAPERS = dict(
    # unfused core attention (fused softmax kernel; flash attention arrived in 2022-23), torch DDP with overlapped
    # bucketed all-reduce (`--DDP-impl torch`, before megatron-core's DistributedDataParallel and its default
    # buckets), no distributed optimizer, full recompute as the papers' scripts ran it
    # (examples/academic_paper_scripts/sc21, `--checkpoint-activations`)
    attention_backend="unfused",
    overlap_grad_reduce=True,
    ddp_impl="torch",
    sequence_parallel=False,
    recompute_granularity="full",
    # `--accumulate-allreduce-grads-in-fp32` was off by default (forced on for bf16): fp16 gradients are all-reduced
    # in fp16 (Megatron-LM arguments.py, 2020-2022)
    grad_reduce_in_fp32="bf16",
)

ERAS: tuple[DefaultsEra, ...] = (
    _era(
        "megatron-lm",
        "Megatron-LM 2020-21 papers",
        None,
        MEGATRON_ASYNC_TP_FROM,
        "Megatron-LM README 2020, SC21 scripts; backward TP collective not yet asynchronous",
        **_MEGATRON_PAPERS,
        tp_async_backward=False,
    ),
    _era(
        "megatron-lm",
        "Megatron-LM 2022-23",
        MEGATRON_ASYNC_TP_FROM,
        MEGATRON_CORE_FROM,
        "Korthikanti et al. 2022 scripts; `--async-tensor-model-parallel-allreduce` on by default",
        **_MEGATRON_PAPERS,
    ),
    _era(
        # Megatron-core's arguments.py (2024-): `--use-distributed-optimizer`, `--overlap-grad-reduce`,
        # `--overlap-param-gather`, `--sequence-parallel`, `--tp-comm-overlap` and `--cross-entropy-loss-fusion`
        # all off unless given; `--recompute-granularity` None; bf16 (and fp8, which runs with --bf16) forces
        # fp32 gradient accumulation and reduction unless `--grad-reduce-in-bf16`
        "megatron-lm",
        "Megatron-core 2024-",
        MEGATRON_CORE_FROM,
        None,
        "Megatron-LM megatron/training/arguments.py (2024-25 releases)",
        attention_backend="flash",
        overlap_grad_reduce=False,
        sequence_parallel=False,
        recompute_granularity="none",
        grad_reduce_in_fp32="not fp16",
    ),
    _era(
        # Megatron-DeepSpeed as run by vTrain (MICRO'24): unfused attention, 1F1B, no gradient bucketing (grad
        # all-reduce after the backward, not overlapped); Megatron's `--accumulate-allreduce-grads-in-fp32` as above
        "megatron-deepspeed",
        "Megatron-DeepSpeed",
        None,
        None,
        "vTrain (MICRO'24) scripts",
        attention_backend="unfused",
        overlap_grad_reduce=False,
        sequence_parallel=False,
        recompute_granularity="full",
        grad_reduce_in_fp32="bf16",
    ),
    *(
        _era(
            # NeMo 24.07 / Megatron-Bridge 25.11 performance recipes (scripts/performance): flash attention (TE),
            # distributed optimizer with overlapped grad reduce-scatter and param all-gather, sequence parallel
            # whenever tp > 1, TP communication overlap (userbuffers) on, no activation recompute, expert TP 1 for MoE,
            # cross_entropy_loss_fusion on. Gradients reduced in bf16 (nemo-toolkit 2.5.0
            # scripts/performance/helpers.py `set_precision_configs`: `grad_reduce_in_fp32 = False` for every compute
            # dtype). MoE tokens: the alltoall dispatcher (TrainingSpec's default); megatron-bridge 0.3.1's recipes
            # name DeepEP / HybridEP, but the performance scripts behind the 25.11 rows are not released: run with the
            # flex dispatcher those 9 rows refitted to 5.51% source-balanced (5.54%) yet 8.9% held out (8.59%), so
            # they keep alltoall. The library recipes (megatron-bridge 0.3.1 recipes/qwen/qwen3_moe.py,
            # deepseek/deepseek_v3.py, gpt_oss/gpt_oss.py with training/flex_dispatcher_backend.py) give flex to Qwen3
            # MoE on H100/B200/B300 only (DeepEP; skipped on GB200/GB300), to DeepSeek-V3 everywhere (HybridEP) and
            # never to GPT-OSS; unrefitted that rule moved 25.11 from 9.5% to 10.1% (H100 Qwen3-235B -23% -> +12%,
            # B200 Qwen3-235B +14.5% -> +19.5%) and left 26.02 at 16.6% (H100 Qwen3-235B -25% -> +9%, B300
            # Qwen3-30B +3% -> +12%). From 25.07 the allocator runs with expandable segments but on the B200
            # (`NEMO_EXPANDABLE_SEGMENTS_FROM`).
            "nemo-megatron",
            label,
            since,
            until,
            source,
            attention_backend="flash",
            use_distributed_optimizer=True,
            overlap_grad_reduce=True,
            overlap_param_gather=True,
            sequence_parallel="tp>1",
            # TP communication overlapped with the GEMMs (userbuffers), except in NVFP4 runs: every NVFP4 Llama 3 /
            # 3.1 recipe of Megatron-Bridge sets `comm_overlap.tp_comm_overlap = False` on B200, B300, GB200 and
            # GB300, the MXFP8 and FP8 recipes of the same layouts keep it (megatron-bridge 0.6.2
            # perf_recipes/llama/*/llama3.py, llama31.py; the first release that ships the performance recipes).
            # Nor in MoE runs: each of the 29 MoE performance recipes of megatron-bridge 0.6.2 with tp > 1
            # (DeepSeek-V3, Kimi-K2, Qwen3-235B-A22B, Qwen3-VL / Qwen3.5-VL MoE, GPT-OSS-20B, Nemotron 3 Super /
            # Ultra, on H100, B200, B300, GB200 and GB300) sets `CommOverlapConfig(tp_comm_overlap=False)` or leaves
            # `comm_overlap` None (recipes/common.py `_pretrain_common`: no overlap), while every dense one keeps it
            # (Llama 3, Nemotron-H 56B); e.g. perf_recipes/qwen/h100/qwen3_moe.py (TP 2, EP 32) and the library
            # recipe recipes/deepseek/h100/deepseek_v3.py
            tp_comm_overlap="tp>1 dense not nvfp4",
            recompute_granularity="none",
            expert_tensor_parallel_size=1,
            cross_entropy_fusion=True,
            grad_reduce_in_fp32=False,
            # quantised primary weights in the FP8 recipes that set them (`NEMO_QUANTIZED_PARAM_PRECISIONS`)
            fp8_param_gather="fp8 params",
            **allocator,
        )
        for label, since, until, source, allocator in (
            (
                "NeMo 2 recipes before 25.07",
                None,
                NEMO_EXPANDABLE_SEGMENTS_FROM,
                "NeMo 24.07 scripts/performance",
                {},
            ),
            (
                "NeMo 25.07+ / Megatron-Bridge recipes",
                NEMO_EXPANDABLE_SEGMENTS_FROM,
                None,
                "nemo-toolkit 2.4.0-2.7.1 and Megatron-Bridge 25.11 scripts/performance",
                {"expandable_segments": "not b200"},
            ),
        )
    ),
    _era(
        # DeepSpeed: gradients are reduced in the training dtype under fp16 (config `fp32_allreduce`, off by default)
        "deepspeed",
        "DeepSpeed",
        None,
        None,
        "DeepSpeed config docs (`fp32_allreduce`)",
        grad_reduce_in_fp32="bf16",
    ),
    _era(
        # llm-foundry (MosaicML): FSDP FULL_SHARD with prefetch, flash attention, bf16 mixed precision (FSDP
        # `mixed_precision: DEFAULT`: bf16 parameters, fp32 gradient reduction); its loss, flash-attn's fused
        # cross-entropy (MPT's default `loss_fn`, `graph.layers.SIXTEEN_BIT_LOSS_FRAMEWORKS`), is one kernel, not
        # Megatron's eager chain
        "llm-foundry",
        "llm-foundry",
        None,
        None,
        "llm-foundry scripts/train/yamls, MPT benchmarks README",
        attention_backend="flash",
        fsdp=True,
        zero_stage=3,
        sequence_parallel=False,
        recompute_granularity="none",
        cross_entropy_fusion=True,
    ),
    *(
        _era(
            # torchtitan: FSDP2 FULL_SHARD, SDPA flash attention, `activation_checkpoint.mode = "selective"`, sequence
            # parallel in its TP plan, torch cross-entropy (torchtitan config_manager.py, train_configs/*.toml,
            # 2024-25). From 0.1.0 (PyPI wheel of 2025-06-18) the loss is compiled with the model
            # (`build_cross_entropy_loss`), as torch.compile (kernel fusion) is assumed on: its 16-bit logits saved.
            "torchtitan",
            label,
            since,
            until,
            source,
            attention_backend="flash",
            fsdp=True,
            zero_stage=3,
            sequence_parallel="tp>1",
            recompute_granularity="selective",
            cross_entropy_fusion=True,
            loss_compiled=compiled,
        )
        for label, since, until, source, compiled in (
            ("torchtitan", None, TORCHTITAN_COMPILED_LOSS_FROM, "torchtitan config_manager.py (2024)", False),
            (
                "torchtitan 0.1.0+",
                TORCHTITAN_COMPILED_LOSS_FROM,
                None,
                "torchtitan 0.1.0 components/loss.py, 0.2.0 config/job_config.py `Compile.components`",
                True,
            ),
        )
    ),
)


@dataclass(frozen=True)
class ModelRecipe:
    """What a framework's recipe of one model (a model preset) sets beyond its era's defaults."""

    framework: str
    model: str  # a model preset (`specs/presets/models.yaml`)
    label: str  # shown with every setting a run takes from it
    settings: Mapping[str, object]
    source: str
    gpus: frozenset[str] | None = None
    """The GPU presets whose recipe of the model this is (None: the recipe of every GPU)."""

    def holds_on(self, gpu: str) -> bool:
        return self.gpus is None or gpu in self.gpus


MODEL_RECIPES: tuple[ModelRecipe, ...] = (
    ModelRecipe(
        # the precision-aware optimizer with fp32 main parameters, bf16 main gradients and bf16 Adam moments (the
        # recipe's "BF16 optimizer"); the recipe's selective recompute is reset by the performance scripts unless
        # given (nemo-toolkit 2.5.0 scripts/performance/llm/pretrain_deepseek_v3.py), so it is no default here
        "nemo-megatron",
        "deepseek-v3",
        "NeMo / Megatron-Bridge DeepSeek-V3 recipe",
        MappingProxyType(
            {
                "use_precision_aware_optimizer": True,
                "main_params_dtype": "fp32",
                "main_grads_dtype": "bf16",
                "exp_avg_dtype": "bf16",
                "exp_avg_sq_dtype": "bf16",
            }
        ),
        "nemo-toolkit 2.5.0 nemo/collections/llm/recipes/deepseek_v3.py; megatron-bridge 0.3.1 "
        "recipes/deepseek/deepseek_v3.py",
    ),
    ModelRecipe(
        # the H100 recipe of Qwen3-235B-A22B (TP 2, PP 8, VPP 4, EP 32 over 4 nodes of 8: the only Qwen3 MoE recipe
        # whose EP group crosses InfiniBand) keeps the alltoall dispatcher and hides its all-to-all behind another
        # micro-batch's compute: `CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True,
        # delay_wgrad_compute=True)` in both its BF16 and FP8-CS variants. The same model's B200, B300, GB200 and
        # GB300 recipes leave EP overlap off (EP inside the NVLink domain), as do the DeepSeek-V3, Kimi-K2 and
        # GPT-OSS performance recipes but one, so it is no era default of MoE runs. megatron-core runs it from
        # 0.14.0 (Oct 2025; transformer_config.py `overlap_moe_expert_parallel_comm`), before the 25.11 container.
        "nemo-megatron",
        "qwen3-235b-a22b",
        "Megatron-Bridge Qwen3-235B-A22B H100 recipe",
        MappingProxyType({"moe_ep_overlap": True}),
        "megatron-bridge 0.6.2 perf_recipes/qwen/h100/qwen3_moe.py (qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config,"
        " _fp8cs_config); perf_recipes/qwen/{b200,b300,gb200,gb300}/qwen3_moe.py",
        gpus=frozenset({"h100-sxm5-80gb"}),
    ),
)


def model_recipe(framework: str, model: str, gpu: str = "") -> ModelRecipe | None:
    """`framework`'s recipe of model preset `model` on GPU preset `gpu` (None when it has none recorded)."""
    return next((r for r in MODEL_RECIPES if r.framework == framework and r.model == model and r.holds_on(gpu)), None)


def eras_of(framework: str) -> list[DefaultsEra]:
    """`framework`'s eras, oldest first."""
    return sorted((e for e in ERAS if e.framework == framework), key=lambda e: e.since or date.min)


def defaults_on(framework: str, day: date | None) -> DefaultsEra | None:
    """The era of `framework`'s defaults that holds on `day` (the latest when `day` is None; the earliest when `day`
    precedes them all); None for a framework without recorded defaults."""
    eras = eras_of(framework)
    if not eras:
        return None
    if day is None:
        return eras[-1]
    return next((e for e in eras if e.holds(day)), eras[0])


def resolve_rule(value: object, tp: int, precision: str, gpu: str = "", moe: bool = False) -> object:
    """A setting's value for one run on GPU preset `gpu` of a MoE model or not (`moe`): the rules (`"tp>1"`,
    `"tp>1 dense not nvfp4"`, `"bf16"`, `"not fp16"`, `"not b200"`, `"fp8 params"`) resolved, other values as is."""
    if value == "tp>1":
        return tp > 1
    if value == "tp>1 dense not nvfp4":
        return tp > 1 and not moe and precision != "nvfp4"
    if value == "bf16":  # on for bf16 training only
        return precision == "bf16"
    if value == "not fp16":  # on unless fp16 (bf16 and the 8/4-bit recipes, which run with --bf16)
        return precision != "fp16"
    if value == "not b200":  # NeMo's executors.py: `gpu.lower() not in ['b200']` (the GB200 is another GPU)
        return gpu != "b200"
    if value == "fp8 params":
        return precision in NEMO_QUANTIZED_PARAM_PRECISIONS
    return value


def era_training_values(
    framework: str, day: date | None, tp: int, precision: str, moe: bool, gpu: str = ""
) -> dict[str, object]:
    """The TrainingSpec values `framework`'s era on `day` gives a run with tensor parallelism `tp` and `precision` on
    GPU preset `gpu` (expert TP only for MoE models)."""
    era = defaults_on(framework, day)
    if era is None:
        return {}
    return {
        key: resolve_rule(value, tp, precision, gpu, moe)
        for key, value in era.settings.items()
        if moe or key != "expert_tensor_parallel_size"
    }


def parse_version(text: str) -> date:
    """A framework release as a date: an ISO date ("2024-06-01"), a month ("2024-06"), or a NeMo / Megatron-Bridge
    container release YY.MM ("24.07", "26.02": the month it was cut)."""
    text = text.strip()
    if m := re.fullmatch(r"(\d{4})-(\d{2})(?:-(\d{2}))?", text):
        try:
            return date(int(m.group(1)), int(m.group(2)), int(m.group(3) or 1))
        except ValueError:
            pass
    elif (m := re.fullmatch(r"(\d{2})\.(\d{2})(?:\.\d+)?", text)) and 1 <= int(m.group(2)) <= 12:
        return date(2000 + int(m.group(1)), int(m.group(2)), 1)
    raise ConfigError(
        f"framework version '{text}': give a release date (YYYY-MM or YYYY-MM-DD) or a NeMo / Megatron-Bridge "
        "release (YY.MM, e.g. 24.07)"
    )


# Framework names outside FRAMEWORKS -> the family whose runtime and defaults they share, by a word in the name,
# first match wins. Primus (AMD) runs Megatron-LM or torchtitan backends; NeMo AutoModel runs HuggingFace models on
# torch FSDP2 (as torchtitan does); NeMo and Megatron-Bridge run Megatron-core with the performance recipes.
FAMILY_PATTERNS: tuple[tuple[str, str, str], ...] = (
    (r"torchtitan", "torchtitan", "torchtitan backend"),
    (r"automodel", "torchtitan", "NeMo AutoModel: HuggingFace models on torch FSDP2"),
    (r"nemo|bridge", "nemo-megatron", "Megatron-core under NeMo / Megatron-Bridge recipes"),
    (r"megatron.*deepspeed|deepspeed.*megatron", "megatron-deepspeed", "Megatron-DeepSpeed"),
    (r"deepspeed", "deepspeed", "DeepSpeed"),
    (r"megatron|primus|mcore", "megatron-lm", "Megatron-core based"),
    (r"foundry|composer|mosaic", "llm-foundry", "MosaicML Composer FSDP"),
    (r"fsdp|torch|pytorch|accelerate|transformers|hf|huggingface|lightning", "torchtitan", "torch FSDP trainer"),
)


@dataclass(frozen=True)
class FrameworkFamily:
    framework: str  # a name in FRAMEWORKS
    warning: str = ""  # why it stands for the name given ("" when the name is known)


def framework_family(name: str) -> FrameworkFamily:
    """The known framework that `name` stands for. An unknown name maps to its family with a warning; a name of no
    family is refused (ConfigError naming the families)."""
    key = name.strip().lower()
    if key in FRAMEWORKS:
        return FrameworkFamily(key)
    for pattern, family, what in FAMILY_PATTERNS:
        if re.search(pattern, key):
            return FrameworkFamily(
                family, f"framework '{name}' is not one paraplan knows: projected as {family} ({what})"
            )
    raise ConfigError(
        f"unknown framework '{name}': no family matches it; name one of {', '.join(FRAMEWORKS)}, or a Megatron-based, "
        "DeepSpeed or torch FSDP trainer"
    )
