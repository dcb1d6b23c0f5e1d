"""System and training settings from YAML files, checked field by field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from paraplan.errors import ConfigError, unknown_name_problems
from paraplan.specs.presets import system_preset
from paraplan.specs.system import GPU_FIELD_NAMES, SYSTEM_FIELD_NAMES, GpuSpec, SystemSpec
from paraplan.specs.training import SETTING_NAMES, TrainingSpec

SYSTEM_FIELDS = SYSTEM_FIELD_NAMES - {"gpu"}
GPU_FIELDS = GPU_FIELD_NAMES


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    return data


def _typed(path: Path, key: str, value: Any, expected: type) -> Any:
    if expected is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{path}: field '{key}' must be {expected.__name__} (got {value!r})")


def system_from_file(path: str | Path, num_gpus: int | None = None) -> SystemSpec:
    """A system file: `gpu:` preset name (or a `gpu:` mapping of GpuSpec fields), `num_gpus`, and any
    SystemSpec/GpuSpec field as an override."""
    path = Path(path)
    data = read_yaml(path)
    problems = unknown_name_problems(data, SYSTEM_FIELDS | GPU_FIELDS | {"gpu"}, "system field", str(path))
    gpu = data.get("gpu")
    n = num_gpus or data.get("num_gpus")
    if gpu is None:
        problems.append(f"{path}: missing field 'gpu' (a preset name or a mapping of GPU fields)")
    if n is None:
        problems.append(f"{path}: missing field 'num_gpus' (or pass --gpus)")
    if problems:
        raise ConfigError(problems)
    if isinstance(gpu, str):
        system = system_preset(gpu, int(n))
    elif isinstance(gpu, dict):
        missing = sorted({"name", "bf16_tflops", "hbm_gib", "hbm_tbps", "sm_count"} - set(gpu))
        bad = unknown_name_problems(gpu, GPU_FIELDS, "gpu field", str(path))
        if missing or bad:
            raise ConfigError([f"{path}: gpu mapping is missing '{k}'" for k in missing] + bad)
        values = {k: gpu[k] for k in gpu}
        values.setdefault("fp16_tflops", values["bf16_tflops"])
        values.setdefault("fp8_tflops", 0.0)
        values.setdefault("fp4_tflops", 0.0)
        for key in ("gpus_per_node", "scale_up_gbps", "nic_gbps"):
            if key not in data:
                problems.append(f"{path}: missing field '{key}' (required with a custom gpu)")
        if problems:
            raise ConfigError(problems)
        system = SystemSpec(
            gpu=GpuSpec(**values),
            num_gpus=int(n),
            gpus_per_node=int(data["gpus_per_node"]),
            scale_up_gbps=float(data["scale_up_gbps"]),
            nic_gbps=float(data["nic_gbps"]),
            name=str(values["name"]),
        )
    else:
        raise ConfigError(f"{path}: field 'gpu' must be a preset name or a mapping")
    overrides = {k: v for k, v in data.items() if k not in ("gpu", "num_gpus")}
    return system.with_overrides(**overrides)


def training_from_file(path: str | Path, base: TrainingSpec | None = None) -> TrainingSpec:
    path = Path(path)
    data = read_yaml(path)
    unknown = unknown_name_problems(data, SETTING_NAMES, "training setting", str(path))
    if unknown:
        raise ConfigError(unknown)
    values = dict(data)
    if values.get("pipeline_layout") is not None:
        values["pipeline_layout"] = tuple(int(x) for x in values["pipeline_layout"])
    return (base or TrainingSpec()).with_values(**values)
