"""Model and system presets shipped as data files, each fact with its source."""

from __future__ import annotations

from datetime import date
from functools import cache, lru_cache
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


def _squashed(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


@lru_cache(maxsize=256)
def gpu_chip(name: str) -> str:
    """The chip a GPU preset or device name stands for: the preset's first part, squashed ("a100-sxm4-80gb" ->
    "a100"), or the chip of the preset a device name maps to ("NVIDIAGH200120GB" -> "gh200"); "" when unknown."""
    preset = name.lower() if name.lower() in _load("gpus.yaml") else preset_for_device(name)
    return _squashed(preset.split("-")[0]) if preset else ""


def preset_for_device(device: str) -> str | None:
    """The GPU preset a sample file's device name (torch's, squashed) stands for, or None.

    Presets whose chip (the name's first part) starts the device name after "NVIDIA" compete; the longest
    chip wins, then a preset whose whole name starts the device name ("NVIDIAA100-SXM4-80GB" ->
    "a100-sxm4-80gb"), then one whose memory size the name holds, then the first listed ("NVIDIAH200" ->
    "h200-sxm-141gb", "NVIDIAGH200120GB" -> "gh200")."""
    squashed = _squashed(device).removeprefix("nvidia")
    chips = {name: _squashed(name.split("-")[0]) for name in gpu_names()}
    matches = [name for name, chip in chips.items() if squashed.startswith(chip)]
    if not matches:
        return None
    longest = max(len(chips[name]) for name in matches)
    matches = [name for name in matches if len(chips[name]) == longest]
    whole = [name for name in matches if squashed.startswith(_squashed(name))]
    if whole:
        return max(whole, key=len)
    sized = [name for name in matches if name.split("-")[-1].endswith("gb") and name.split("-")[-1] in squashed]
    return (sized or matches)[0]


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


DEFAULT_HOST_LINK_GBPS = 64.0  # PCIe Gen5 x16 per direction (`GpuSpec.host_link_gbps`)
DEFAULT_HOST_MEMORY_GBPS = 77.0  # a DGX H100's host DRAM per GPU (`GpuSpec.host_memory_gbps`)


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
        host_link_gbps=float(entry.get("host_link_gbps", DEFAULT_HOST_LINK_GBPS)),
        host_memory_gbps=float(entry.get("host_memory_gbps", DEFAULT_HOST_MEMORY_GBPS)),
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
