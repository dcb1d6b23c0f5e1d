"""The caching allocator with expandable segments (`TrainingSpec.expandable_segments`): no fragmentation part in the
memory model, NeMo's default from 25.07 on every GPU but the B200, the CLI flag and the Megatron launch script's
`PYTORCH_CUDA_ALLOC_CONF`."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest
from typer.testing import CliRunner

from paraplan.api import memory
from paraplan.cli.main import app
from paraplan.errors import ConfigError
from paraplan.formats import emit, read_config
from paraplan.memory.model import FRAGMENTATION, moment_peak
from paraplan.specs.frameworks import NEMO_EXPANDABLE_SEGMENTS_FROM, era_training_values, resolve_rule
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.validate.measured import run_from_row

LLAMA_8B = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=8, tp=2, pp=2, mbs=1, gbs=16, seq=4096)


def test_no_fragmentation_with_expandable_segments() -> None:
    caching = memory(**LLAMA_8B)
    expandable = memory(**LLAMA_8B, expandable_segments=True)
    assert not caching.expandable_segments and expandable.expandable_segments
    for before, after in zip(caching.ranks, expandable.ranks, strict=True):
        assert before.parts["allocator_fragmentation"] == pytest.approx(FRAGMENTATION * before.parts["activations"])
        assert after.parts["allocator_fragmentation"] == 0.0
        assert after.allocated_bytes == before.allocated_bytes  # the tensors are the same
        assert after.reserved_bytes == after.allocated_bytes  # no cached logits here: reserved = allocated
        assert after.total_bytes == pytest.approx(before.total_bytes - before.parts["allocator_fragmentation"])
    assert expandable.to_dict()["expandable_segments"] is True


def test_the_worst_moment_weighs_no_fragmentation_with_expandable_segments() -> None:
    # two moments: 10 GiB of activations, or 9.6 GiB with 0.41 GiB of unsharded parameters; 5% of holes on the
    # activations makes the first the worse, none the second
    moments = np.array([[1.0, 0.0, 0.0, 0.0], [0.96, 1.0, 0.0, 0.0]])
    args = (moments, [10.0], [0.41], [0.0], [0.0])
    assert moment_peak(*args) == (10.0, 0.0)
    assert moment_peak(*args, fragmentation=0.0) == pytest.approx((9.6, 0.41))


def test_nemo_sets_it_from_25_07_on_every_gpu_but_the_b200() -> None:
    assert resolve_rule("not b200", 1, "bf16", "b200") is False
    for gpu in ("gb200-nvl72", "b300", "h100-sxm5-80gb"):  # the GB200 is not the B200
        assert resolve_rule("not b200", 1, "bf16", gpu) is True
    day = date(2025, 11, 1)
    assert era_training_values("nemo-megatron", day, 1, "bf16", False, "h100-sxm5-80gb")["expandable_segments"]
    assert not era_training_values("nemo-megatron", day, 1, "bf16", False, "b200")["expandable_segments"]
    before = era_training_values("nemo-megatron", date(2024, 7, 1), 1, "bf16", False, "h100-sxm5-80gb")
    assert "expandable_segments" not in before
    assert date(2024, 7, 1) < NEMO_EXPANDABLE_SEGMENTS_FROM <= day
    for framework in ("megatron-lm", "torchtitan"):
        assert "expandable_segments" not in era_training_values(framework, day, 1, "bf16", False, "h100-sxm5-80gb")


def _row(source: str, gpu: str) -> dict[str, str]:
    return {
        "id": "x", "source": source, "model": "LLAMA3_8B", "model_preset": "llama3.1-8b", "arch": "llama",
        "num_layers": "32", "hidden": "4096", "ffn_hidden": "14336", "num_heads": "32", "seq_len": "8192",
        "gpu_preset": gpu, "num_gpus": "8", "tp": "1", "pp": "1", "mbs": "1", "gbs": "128", "precision": "bf16",
        "framework": "nemo-megatron", "metric": "step_time_s", "value": "1.0",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("source", "gpu", "expected"),
    [
        ("MegatronBridge_perf_summary_25.11", "gb200-nvl72", True),
        ("MegatronBridge_perf_summary_25.11", "b200", False),
        ("NeMo_perf_summary_24.07", "h100-sxm5-80gb", False),
    ],
)
def test_measured_rows_take_the_era_and_gpu_rule(source: str, gpu: str, expected: bool) -> None:
    run = run_from_row(_row(source, gpu))
    assert run.train.expandable_segments is expected
    assumed = [a for a in run.defaults_used if a.key == "expandable_segments"]
    assert [a.value for a in assumed] == ([str(expected)] if source.endswith("25.11") else [])


def test_cli_flag_and_breakdown() -> None:
    args = ["memory", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--tp", "2", "--gbs", "16"]
    result = CliRunner().invoke(app, [*args, "--expandable-segments"])
    assert result.exit_code == 0, result.output
    assert "expandable segments" in result.output
    plain = CliRunner().invoke(app, args)
    assert plain.exit_code == 0 and "expandable segments" not in plain.output


def test_megatron_launch_script_round_trip() -> None:
    script = (
        'export PYTORCH_CUDA_ALLOC_CONF="garbage_collection_threshold:0.8,expandable_segments:True"\n'
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 512 --num-attention-heads 8 "
        "--seq-length 1024 --micro-batch-size 1 --global-batch-size 8\n"
    )
    _, train, _ = read_config(script, "megatron", env={})
    assert train.expandable_segments
    system = system_preset("h100-sxm5-80gb", 8)
    text = emit("megatron", model_preset("llama3.1-8b"), system, train.with_values(dp=8), strict=True)
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    assert read_config(text, "megatron", env={}).train.expandable_segments
    # the caller's environment is not the script's: only an assignment in the script counts
    _, plain, _ = read_config(script.split("\n", 1)[1], "megatron", env={"PYTORCH_CUDA_ALLOC_CONF": "x"})
    assert not plain.expandable_segments
    assert "PYTORCH_CUDA_ALLOC_CONF" not in emit("megatron", model_preset("llama3.1-8b"), system, TrainingSpec())
    with pytest.raises(ConfigError, match="expandable_segments takes True or False"):
        read_config("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:yes " + script.split("\n", 1)[1], "megatron")
