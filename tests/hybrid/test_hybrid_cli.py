"""`paraplan project --hybrid`: measured/simulated marks, and the fallbacks without PyTorch or a device."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import paraplan.measure.device
from paraplan.cli.main import app

runner = CliRunner()
GPU_TARGET = ["project", "--model", "llama3.1-8b", "--gpu", "h200-sxm-141gb", "--gpus", "8", "--gbs", "64", "--hybrid"]


def test_importing_paraplan_does_not_import_torch():
    code = (
        "import sys, paraplan, paraplan.cli.main, paraplan.cli.hybrid, paraplan.cli.measure, paraplan.measure.device\n"
        "import paraplan.measure.hybrid.api, paraplan.measure.hybrid.plan, paraplan.measure.e2e\n"
        "import paraplan.measure.processes, paraplan.measure.reference\n"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_pytorch_it_falls_back_with_a_message(monkeypatch):
    monkeypatch.setattr(paraplan.measure.device, "torch_available", lambda: False)
    result = runner.invoke(app, GPU_TARGET)
    assert result.exit_code == 0, result.output
    assert "PyTorch is not installed" in result.output and "analytic model" in result.output
    assert "step time" in result.output


def test_without_a_gpu_cuda_falls_back_with_a_message():
    pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    result = runner.invoke(app, [*GPU_TARGET, "--device", "cuda", "--json"])
    assert result.exit_code == 0, result.output
    assert "no CUDA device" in result.output
    out = json.loads(result.output[result.output.index("{") :])
    assert out["cost_sources"]["measured_fraction"] == 0.0 and "hybrid" not in out


def test_a_cpu_cannot_stand_for_a_gpu_target():
    pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")
    result = runner.invoke(app, [*GPU_TARGET, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "the device at hand is a CPU" in result.output


def test_hybrid_on_this_cpu_marks_every_part(tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")
    from paraplan.measure.hybrid.local import local_cpu_system, system_file_text

    monkeypatch.setenv("PARAPLAN_HYBRID_CACHE", str(tmp_path / "h.sqlite"))
    system_file = tmp_path / "cpu.yaml"
    system_file.write_text(system_file_text(local_cpu_system(2, cache_path=str(tmp_path / "h.sqlite"))))
    args = ["project", "--system-file", str(system_file), "--num-layers", "2", "--hidden-size", "128",
            "--ffn-hidden-size", "352", "--num-attention-heads", "4", "--num-query-groups", "2",
            "--vocab-size", "1000", "--seq", "64", "--mbs", "1", "--gbs", "4", "--pp", "2", "--hybrid"]  # fmt: skip
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{") :])
    assert out["cost_sources"]["measured_fraction"] > 0.99
    sources = out["hybrid"]["sources"]
    assert set(sources) == set(out["breakdown"])
    assert sources["forward_compute"]["origin"] == "measured"
    assert sources["pipeline_bubble"]["origin"] == "simulated"
    assert out["hybrid"]["comm_fit"]["source"].startswith("gloo among 2")
    assert any(line.startswith("pp 2 -> 1") for line in out["hybrid"]["plan"]["cuts"])
    table = runner.invoke(app, args)  # cached now: prints the marked breakdown
    assert table.exit_code == 0, table.output
    assert "measured" in table.output and "simulated" in table.output
