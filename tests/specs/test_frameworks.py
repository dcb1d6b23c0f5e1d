"""Framework defaults by release (`paraplan.specs.frameworks`) and unknown framework names mapped to a family."""

from __future__ import annotations

from datetime import date

import pytest

from paraplan.errors import ConfigError
from paraplan.specs.frameworks import (
    ERAS,
    MEGATRON_ASYNC_TP_FROM,
    MEGATRON_CORE_FROM,
    MODEL_RECIPES,
    defaults_on,
    era_training_values,
    framework_family,
    model_recipe,
    parse_version,
)
from paraplan.specs.presets import gpu_names, model_names
from paraplan.specs.training import FRAMEWORKS, TrainingSpec


def test_every_era_names_a_known_framework_its_source_and_real_fields() -> None:
    fields = set(TrainingSpec.__dataclass_fields__)
    for era in ERAS:
        assert era.framework in FRAMEWORKS and era.source and era.label
        assert set(era.settings) <= fields, era.label
        assert era.since is None or era.until is None or era.since < era.until


def test_eras_of_one_framework_do_not_overlap() -> None:
    for framework in FRAMEWORKS:
        eras = [e for e in ERAS if e.framework == framework]
        for day in (date(2019, 1, 1), date(2021, 6, 1), date(2023, 1, 1), date(2025, 6, 1), date(2027, 1, 1)):
            assert sum(e.holds(day) for e in eras) <= 1, (framework, day)


def test_megatron_lm_defaults_follow_its_release() -> None:
    papers = defaults_on("megatron-lm", date(2020, 9, 11))  # Megatron-LM README 2020
    assert papers.settings["attention_backend"] == "unfused" and papers.settings["recompute_granularity"] == "full"
    assert papers.settings["tp_async_backward"] is False
    korthikanti = defaults_on("megatron-lm", date(2022, 5, 1))
    assert korthikanti.settings["attention_backend"] == "unfused" and "tp_async_backward" not in korthikanti.settings
    assert MEGATRON_ASYNC_TP_FROM <= date(2022, 5, 1) < MEGATRON_CORE_FROM
    for day in (date(2025, 3, 1), None):  # a 2024-25 run, and a run that gives no date: today's Megatron-core
        core = defaults_on("megatron-lm", day)
        assert core.settings["attention_backend"] == "flash" and core.settings["recompute_granularity"] == "none"
    assert defaults_on("megatron-lm", date(2010, 1, 1)) is defaults_on("megatron-lm", date(2020, 1, 1))
    assert defaults_on("pytorch-cpu", None) is None


def test_versions_read_as_release_dates() -> None:
    assert parse_version("24.07") == date(2024, 7, 1)
    assert parse_version("2025-06") == date(2025, 6, 1)
    assert parse_version(" 2021-04-12 ") == date(2021, 4, 12)
    for bad in ("core_r0.12.0", "2024-13", "24.13", "latest"):
        with pytest.raises(ConfigError, match="framework version"):
            parse_version(bad)


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("primus", "megatron-lm"),
        ("primus-megatron", "megatron-lm"),
        ("Primus (torchtitan backend)", "torchtitan"),
        ("nemo-automodel", "torchtitan"),
        ("megatron-bridge", "nemo-megatron"),
        ("NeMo", "nemo-megatron"),
        ("pytorch-fsdp2", "torchtitan"),
        ("hf-accelerate", "torchtitan"),
        ("composer", "llm-foundry"),
        ("DeepSpeed-Megatron", "megatron-deepspeed"),
        ("deepspeed-zero3", "deepspeed"),
    ],
)
def test_unknown_frameworks_map_to_their_family_with_a_warning(name: str, family: str) -> None:
    mapped = framework_family(name)
    assert mapped.framework == family and name in mapped.warning and family in mapped.warning


def test_known_framework_has_no_warning_and_a_name_of_no_family_is_refused() -> None:
    assert framework_family("nemo-megatron").warning == ""
    with pytest.raises(ConfigError, match="no family"):
        framework_family("maxtext-jax")


def test_nemo_recipes_overlap_tp_communication_except_in_nvfp4_and_moe() -> None:
    def overlap(tp: int, precision: str, moe: bool = False) -> object:
        return era_training_values("nemo-megatron", None, tp, precision, moe=moe)["tp_comm_overlap"]

    assert overlap(2, "mxfp8") is True and overlap(4, "fp8_cs") is True and overlap(2, "bf16") is True
    assert overlap(2, "nvfp4") is False and overlap(4, "nvfp4") is False  # megatron-bridge perf recipes
    assert overlap(1, "mxfp8") is False and overlap(1, "nvfp4") is False
    # MoE recipes with TP (DeepSeek-V3, Qwen3-235B-A22B on H100, ...) leave it off whatever the precision
    assert overlap(2, "bf16", moe=True) is False and overlap(2, "fp8_cs", moe=True) is False


def test_model_recipes_name_known_fields_models_and_gpus_and_hold_on_their_gpus_only() -> None:
    fields = set(TrainingSpec.__dataclass_fields__)
    for recipe in MODEL_RECIPES:
        assert recipe.framework in FRAMEWORKS and recipe.source and recipe.label
        assert set(recipe.settings) <= fields and recipe.model in model_names(), recipe.label
        assert recipe.gpus is None or recipe.gpus <= set(gpu_names()), recipe.label
    # megatron-bridge 0.6.2 perf_recipes/qwen: EP overlap in the H100 recipe of Qwen3-235B-A22B only
    h100 = model_recipe("nemo-megatron", "qwen3-235b-a22b", "h100-sxm5-80gb")
    assert h100 is not None and h100.settings == {"moe_ep_overlap": True}
    assert all(model_recipe("nemo-megatron", "qwen3-235b-a22b", g) is None for g in ("b200", "b300", "gb200-nvl72"))
    assert model_recipe("megatron-lm", "qwen3-235b-a22b", "h100-sxm5-80gb") is None
    assert model_recipe("nemo-megatron", "deepseek-v3", "b200") is not None  # a recipe of every GPU
