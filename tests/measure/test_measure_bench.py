"""`paraplan measure --device cpu --quick` writes samples that `paraplan fit` reads (torch and sklearn needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.cost.profile import Profile
from paraplan.measure.samples import find_sample_files, read_sample_table

pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")
pytest.importorskip("sklearn", reason="scikit-learn is not installed (the 'fit' extra)")


@pytest.mark.slow
def test_measure_quick_then_fit(tmp_path: Path, cli_app) -> None:
    out = tmp_path / "samples"
    runner = CliRunner()
    # one thread per process: steadier timings when other jobs share the CPU
    result = runner.invoke(cli_app, ["measure", "--device", "cpu", "--quick", "--threads", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    files = find_sample_files(out)
    ops = {f.op for f in files}
    assert {"gemm", "flash_atten", "layernorm", "RMSlayernorm", "gelu", "res_add", "RoPE"} <= ops
    assert {"cross_entropy", "embedding", "middleStage_optimizer", "allreduce", "allgather", "p2p"} <= ops
    for file in files:
        table = read_sample_table(file)  # same layout as the kernel samples
        assert len(table) >= 6 and file.precision == "fp32"
        assert (table.values > 0).all()
        if file.op == "flash_atten":
            assert (table.column("causal") == 1).all()  # timed with a causal mask, unlike the public samples
    assert json.loads((out / "measure.json").read_text())["threads"] == 1

    profile_path = tmp_path / "cpu.json"
    result = runner.invoke(cli_app, ["fit", "--samples", str(out), "--out", str(profile_path)])
    assert result.exit_code == 0, result.output
    profile = Profile.load(profile_path)
    assert profile.gpu.startswith("CPU-") and profile.precision == "fp32"
    assert len(profile.provenance["files"]) == len(files)
    assert profile.regressors  # timings on a busy CPU are noisy; at least some regressors pass the fit rule


def test_measure_bad_input(tmp_path: Path, cli_app) -> None:
    runner = CliRunner()
    result = runner.invoke(cli_app, ["measure", "--device", "tpu", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--device must be cpu or cuda" in result.stderr
    result = runner.invoke(cli_app, ["measure", "--dtype", "int8", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--dtype" in result.stderr
    file = tmp_path / "file"
    file.write_text("")
    result = runner.invoke(cli_app, ["measure", "--out", str(file)])
    assert result.exit_code == 2 and "must be a folder" in result.stderr


def test_measure_cuda_without_a_gpu(tmp_path: Path, cli_app) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    result = CliRunner().invoke(cli_app, ["measure", "--device", "cuda", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "no CUDA device" in result.stderr


def test_cache_flush_buffer_is_twice_the_last_level_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Operators are timed cold: the flush buffer is twice the largest cache sysfs lists (K/M suffixes)."""
    from paraplan.measure import bench

    for index, size in enumerate(("48K", "1024K", "32M")):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    real_path = bench.Path
    monkeypatch.setattr(
        bench, "Path", lambda p: tmp_path if str(p) == "/sys/devices/system/cpu/cpu0/cache" else real_path(p)
    )
    assert bench._cpu_cache_bytes() == 32 * 2**20
    monkeypatch.setattr(bench, "Path", lambda p: tmp_path / "missing")
    assert bench._cpu_cache_bytes() == bench.FLUSH_DEFAULT_BYTES // 2
