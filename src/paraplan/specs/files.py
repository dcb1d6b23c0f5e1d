"""System and training settings from YAML files, checked field by field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paraplan.errors import ConfigError, unknown_name_problems
from paraplan.specs.fieldtypes import coerce_fields
from paraplan.specs.presets import system_preset
from paraplan.specs.system import GPU_FIELD_NAMES, SYSTEM_FIELD_NAMES, GpuSpec, SystemSpec
from paraplan.specs.training import SETTING_NAMES, TrainingSpec
from paraplan.textfiles import load_yaml, read_text_file

SYSTEM_FIELDS = SYSTEM_FIELD_NAMES - {"gpu"}
GPU_FIELDS = GPU_FIELD_NAMES


def read_yaml(path: str | Path, what: str = "") -> dict[str, Any]:
    """A YAML file's top-level mapping (keys are text); `what` names the option in error lines."""
    path = Path(path)
    data = load_yaml(read_text_file(path, what), str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise ConfigError(f"{path}: setting names must be text (got {', '.join(map(repr, bad_keys))})")
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
    if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
        problems.append(f"{path}: field 'num_gpus' must be an integer (got {n!r})")
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
        values, bad = coerce_fields(GpuSpec, dict(gpu), f"{path}: gpu field")
        links = {k: data[k] for k in ("gpus_per_node", "scale_up_gbps", "nic_gbps") if k in data}
        own, bad_own = coerce_fields(SystemSpec, links, f"{path}: field")
        if bad or bad_own:
            raise ConfigError(bad + bad_own)
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
            gpus_per_node=own["gpus_per_node"],
            scale_up_gbps=own["scale_up_gbps"],
            nic_gbps=own["nic_gbps"],
            name=str(values["name"]),
        )
    else:
        raise ConfigError(f"{path}: field 'gpu' must be a preset name or a mapping")
    overrides = {k: v for k, v in data.items() if k not in ("gpu", "num_gpus")}
    try:
        return system.with_overrides(**overrides)
    except ConfigError as exc:
        raise ConfigError([f"{path}: {p}" for p in exc.problems]) from None


def training_from_file(path: str | Path, base: TrainingSpec | None = None) -> TrainingSpec:
    path = Path(path)
    data = read_yaml(path)
    unknown = unknown_name_problems(data, SETTING_NAMES, "training setting", str(path))
    if unknown:
        raise ConfigError(unknown)
    try:
        return (base or TrainingSpec()).with_values(**data)
    except ConfigError as exc:
        raise ConfigError([f"{path}: {p}" for p in exc.problems]) from None
