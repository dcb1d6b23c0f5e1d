"""The option tables (cli/spec_options.py): every target is a spec field, and every option of `paraplan project`
is packed by a table or declared as not a spec setting, so none can be packed under a wrong name or forgotten."""

import inspect
from dataclasses import fields

from paraplan.cli.project import _projection_command
from paraplan.cli.spec_options import MODEL_OPTIONS, SYSTEM_OPTIONS, TRAINING_OPTIONS, spec_values
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import GpuSpec, SystemSpec
from paraplan.specs.training import TrainingSpec

NOT_SPEC_SETTINGS = {
    "ctx", "model", "gpu", "gpus", "config_file", "system_file", "as_json", "trace", "trace_max_mib", "profile", "analytic",
    "megatron_args", "from_config", "config_format", "emit_format", "emit_file", "chakra", "html", "png", "hybrid",
    "device", "hybrid_cache", "framework_version",
}  # fmt: skip
"""Options of `project` that choose inputs, outputs or modes rather than set a spec field."""


def test_every_target_is_a_field() -> None:
    assert set(TRAINING_OPTIONS.values()) <= {f.name for f in fields(TrainingSpec)}
    assert set(MODEL_OPTIONS.values()) <= {f.name for f in fields(ModelSpec)}
    assert set(SYSTEM_OPTIONS.values()) <= {f.name for f in fields(SystemSpec)} | {f.name for f in fields(GpuSpec)}


def test_every_project_option_is_packed_once_or_declared() -> None:
    params = set(inspect.signature(_projection_command).parameters)
    tables = [set(TRAINING_OPTIONS), set(MODEL_OPTIONS), set(SYSTEM_OPTIONS), NOT_SPEC_SETTINGS]
    assert sum(len(t) for t in tables) == len(set().union(*tables)), "an option is in two tables"
    assert set().union(*tables) == params


def test_spec_values() -> None:
    params = {"tp": 2, "ep_overlap": True, "as_json": False, "framework": None}
    assert spec_values(params, TRAINING_OPTIONS) == {
        "tensor_model_parallel_size": 2,
        "moe_ep_overlap": True,
        "framework": None,
    }
    assert spec_values(params, TRAINING_OPTIONS, only=("framework", "kernel_fusion")) == {"framework": None}
