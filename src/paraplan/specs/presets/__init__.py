"""Model and system presets shipped as data files, each fact with its source."""

from __future__ import annotations

from datetime import date
from functools import cache
from importlib import resources
from typing import Any

import yaml

from paraplan.errors import ConfigError
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import GpuSpec, SystemSpec


@cache
def _load(name: str) -> dict[str, dict[str, Any]]:
    text = resources.files("paraplan.specs.presets").joinpath(name).read_text()
    return yaml.safe_load(text)


def model_names() -> list[str]:
    return sorted(_load("models.yaml"))


def gpu_names() -> list[str]:
    return list(_load("gpus.yaml"))


def model_preset(name: str) -> ModelSpec:
    table = _load("models.yaml")
    key = name.lower()
    if key not in table:
        raise ConfigError(f"unknown model preset '{name}': choose one of {', '.join(sorted(table))}")
    return ModelSpec(name=key, **table[key])


def gpu_preset_table(name: str) -> dict[str, Any]:
    table = _load("gpus.yaml")
    key = name.lower()
    if key not in table:
        raise ConfigError(f"unknown GPU preset '{name}': choose one of {', '.join(table)}")
    return dict(table[key])


def system_preset(name: str, num_gpus: int) -> SystemSpec:
    entry = gpu_preset_table(name)
    gpu = GpuSpec(
        name=name.lower(),
        fp16_tflops=float(entry["peak_tflops"].get("fp16", 0)),
        bf16_tflops=float(entry["peak_tflops"].get("bf16", 0)),
        fp8_tflops=float(entry["peak_tflops"].get("fp8", 0)),
        fp4_tflops=float(entry["peak_tflops"].get("fp4", 0)),
        hbm_gib=float(entry["hbm_gib"]),
        hbm_tbps=float(entry["hbm_tbps"]),
        sm_count=int(entry["sm_count"]),
        exp_tera_per_s=float(entry.get("exp_tera_per_s", 0.0)),
        source=entry.get("source", ""),
    )
    return SystemSpec(
        gpu=gpu,
        num_gpus=num_gpus,
        gpus_per_node=int(entry["gpus_per_node"]),
        scale_up_gbps=float(entry["scale_up_gbps"]),
        nic_gbps=float(entry["nic_gbps"]),
        name=name.lower(),
    )


def variant_on(name: str, on: date) -> tuple[str, str]:
    """The preset of `name`'s chip that existed on `on`, and why it differs from `name` ('' when it does not).
    A measurement published before a part was announced ran on its `earlier_variant` (Megatron-LM's README of
    September 2020 cannot have used the 80 GB A100, announced in November 2020)."""
    entry = gpu_preset_table(name)
    announced, earlier = entry.get("announced"), entry.get("earlier_variant")
    if not isinstance(announced, date) or on >= announced or not earlier:
        return name.lower(), ""
    preset, why = variant_on(str(earlier), on)  # the variant may postdate the source as well
    why = why or f"after the source's {on.isoformat()}"
    return preset, f"{name.lower()} was announced {announced.isoformat()}, {why}"
