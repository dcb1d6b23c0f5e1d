"""Issue 34, "the first hour": `measure` says when the machine was busy, and `fit` warns (stderr and the profile's
provenance) about samples measured on a busy machine and about a nearly empty profile; `--strict` refuses both."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.cost.profile import Profile
from paraplan.measure.device import BUSY_STALL_SHARE, LoadWatch, MachineLoad
from paraplan.measure.samples import busy_reason, sample_file_name, write_sample_table

runner = CliRunner()
GPU = "CPU-synthetic"
BUSY = MachineLoad(seconds=60.0, stall_share=0.6, load_avg_1m=5.0, cores=2)


def test_machine_load_judges_psi_first_then_the_load_average() -> None:
    assert BUSY.busy and "60%" in BUSY.busy
    assert MachineLoad(60.0, BUSY_STALL_SHARE / 2, 9.0, 2).busy is None  # PSI says quiet: the load is ignored
    assert MachineLoad(60.0, None, 3.0, 2).busy == "load average 3.0 on 2 cores"
    assert MachineLoad(60.0, None, 2.2, 2).busy is None


def test_load_watch_reads_the_stall_time_over_its_span(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    psi = tmp_path / "cpu"
    psi.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=5000000\nfull avg10=0.00 total=0\n")
    clock = [1000.0]
    monkeypatch.setattr("paraplan.measure.device.time.monotonic", lambda: clock[0])
    watch = LoadWatch(psi)
    clock[0] += 10.0
    psi.write_text("some avg10=40.00 avg60=0.00 avg300=0.00 total=9000000\nfull avg10=0.00 total=0\n")
    reading = watch.reading()
    assert reading.stall_share == pytest.approx(0.4)  # 4 s of stall in 10 s
    assert reading.busy is not None
    assert LoadWatch(tmp_path / "missing").reading().stall_share is None


def _synthetic_samples(root: Path, busy: bool) -> Path:
    """GEMM times that follow their FLOPs exactly (their regressors fit), and three per-token operators with too
    few samples to fit (a file cut short): 2 of 8 regressors pass the fit rule."""
    rng = random.Random(0)
    rows = []
    for _ in range(12):
        m, n, k = (int(math.exp(rng.uniform(math.log(32), math.log(2048)))) for _ in range(3))
        flops = 2 * m * n * k
        rows.append((m, n, k, flops / 5e4, 2 * flops / 5e4))
    write_sample_table(
        root / "operator" / sample_file_name(GPU, "gemm", "fp32"), ("m", "n", "k", "F_dur(us)", "B_dur(us)"), rows
    )
    for op in ("layernorm", "res_add", "RMSlayernorm"):
        noise = [
            (b, seq, d, rng.uniform(1, 1000), rng.uniform(1, 1000))
            for b in (1, 2)
            for seq in (64, 128, 256, 512)
            for d in (64, 128, 256, 512, 1024)
        ]
        write_sample_table(
            root / "operator" / sample_file_name(GPU, op, "fp32"), ("b", "l", "dim", "F_dur(us)", "B_dur(us)"), noise
        )
    metadata = {"device": GPU, "machine_load": (BUSY if busy else MachineLoad(60.0, 0.01, 1.0, 2)).to_dict()}
    (root / "measure.json").write_text(json.dumps(metadata))
    return root


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, object]:
    """The fit of the synthetic samples measured on a busy machine (one fit, 5-15 s), and the same fit as it
    would have come out of samples measured on a quiet one (the warnings of a quiet copy of the samples)."""
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the 'fit' extra)")
    from paraplan.measure.fit import fit_profile, fit_warnings

    root = tmp_path_factory.mktemp("doubtful")
    busy = fit_profile(_synthetic_samples(root / "busy", busy=True))
    warnings = fit_warnings(_synthetic_samples(root / "quiet", busy=False), busy.regressors)
    p = busy.profile
    provenance = {**p.provenance, "warnings": warnings}
    profile = Profile(p.gpu, p.source, p.precision, p.regressors, p.created_utc, provenance)
    quiet = replace(busy, warnings=warnings, profile=profile)
    return {False: quiet, True: busy}


def _fit_cli(cli_app, monkeypatch: pytest.MonkeyPatch, result: object, out: Path, *options: str):
    """`paraplan fit` with the fixture's fit (the command's own reading, warnings and writing)."""
    monkeypatch.setattr("paraplan.measure.fit.fit_profile", lambda *args, **kwargs: result)
    args = ["fit", "--samples", str(out.parent), "--out", str(out), *options]
    return runner.invoke(cli_app, args, env={"COLUMNS": "200"})


def test_fit_finds_a_nearly_empty_profile_and_a_busy_machine(fitted: dict[bool, object]) -> None:
    quiet, busy = fitted[False], fitted[True]
    assert len(quiet.profile.regressors) == 2 and len(quiet.regressors) == 8
    assert len(quiet.warnings) == 1 and quiet.warnings[0].startswith("nearly empty profile: 2 of 8 regressors")
    for name in ("layernorm.fwd", "residual.bwd", "rmsnorm.fwd"):
        assert name in quiet.warnings[0]
    assert "gemm" not in quiet.warnings[0]
    assert len(busy.warnings) == 2 and "were measured on a busy machine: tasks waited for a CPU 60%" in busy.warnings[0]
    assert busy.profile.provenance["warnings"] == busy.warnings  # in the profile file too


@pytest.mark.parametrize("busy", [False, True])
def test_fit_warns_on_stderr_and_in_the_profile(
    fitted: dict[bool, object], tmp_path: Path, cli_app, monkeypatch: pytest.MonkeyPatch, busy: bool
) -> None:
    out = tmp_path / "profile.json"
    result = _fit_cli(cli_app, monkeypatch, fitted[busy], out)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len([w for w in warnings if "nearly empty profile" in w]) == 1
    assert ("busy machine" in result.stderr) == busy
    assert "2 of 8 regressors" in result.stdout
    assert len(json.loads(out.read_text())["provenance"]["warnings"]) == (2 if busy else 1)


def test_fit_strict_refuses_a_doubtful_profile(
    fitted: dict[bool, object], tmp_path: Path, cli_app, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "profile.json"
    result = _fit_cli(cli_app, monkeypatch, fitted[True], out, "--strict")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert any("nearly empty" in e for e in errors) and any("busy machine" in e for e in errors)
    assert not out.exists() and "Traceback" not in result.output


def test_measure_records_and_warns_about_a_busy_machine(tmp_path: Path, cli_app, monkeypatch) -> None:
    """`paraplan measure` on this CPU with a tiny plan (one small GEMM file, no collectives), the machine made busy."""
    pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")
    from paraplan.measure import bench

    def tiny_plan(config: bench.BenchConfig) -> list[bench.BenchTask]:
        def rows() -> list[tuple[float, ...]]:
            import torch

            x = torch.randn(32, 32)
            return [(32, 32, 32, bench.time_us(lambda: x @ x, config), bench.time_us(lambda: x @ x, config))]

        return [bench.BenchTask("gemm", "operator", ("m", "n", "k", "F_dur(us)", "B_dur(us)"), rows)]

    class BusyWatch:
        def reading(self) -> MachineLoad:
            return BUSY

    monkeypatch.setattr(bench, "plan_benchmarks", tiny_plan)
    monkeypatch.setattr(bench, "run_collectives", lambda config, out, gpu: [])
    monkeypatch.setattr(bench, "LoadWatch", BusyWatch)
    out = tmp_path / "samples"
    env = {"PARAPLAN_PROGRESS_INTERVAL_S": "0", "COLUMNS": "200"}
    result = runner.invoke(cli_app, ["measure", "--device", "cpu", "--quick", "--out", str(out)], env=env)
    assert result.exit_code == 0, result.output
    assert "warning: the machine was busy while measuring: tasks waited for a CPU 60%" in result.stderr
    assert "measure: 2/2 files" in result.stderr and "measure:" not in result.stdout  # progress on stderr only
    metadata = json.loads((out / "measure.json").read_text())
    assert metadata["repeats"] == 5 and metadata["machine_load"]["cpu_stall_share"] == 0.6
    assert busy_reason(out / "measure.json") == BUSY.busy


def test_wait_until_quiet_backs_off_and_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from paraplan.measure import device

    states = iter(["busy", "busy", None])
    monkeypatch.setattr(device, "machine_busy", lambda cores=2: next(states))
    pauses: list[float] = []
    assert device.wait_until_quiet(max_wait_s=60, sleep=pauses.append) is None
    assert pauses == [5.0, 10.0]  # doubling pauses until quiet
    monkeypatch.setattr(device, "machine_busy", lambda cores=2: "load average 9.0 on 2 cores")
    pauses.clear()
    assert device.wait_until_quiet(max_wait_s=30, sleep=pauses.append) == "load average 9.0 on 2 cores"
    assert pauses == [5.0, 10.0, 15.0]  # 30 s in all, then why it is still busy
