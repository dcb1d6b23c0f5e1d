"""`--trace` and `--chakra` say what they wrote and refuse, before writing, an output over `--trace-max-mib`
(issue 34: 1-2 GB were written without a word)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.api import project
from paraplan.cli.main import app
from paraplan.errors import ConfigError
from paraplan.formats.chakra import export_chakra
from paraplan.projection import ProjectionOptions
from paraplan.report.trace import MIB, expected_trace_bytes, write_projection_trace
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

runner = CliRunner()
PLAN = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--tp", "8", "--pp", "8",
        "--sp", "--gbs", "64"]  # fmt: skip


def refused(args: list[str], fragment: str) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert fragment in result.output, result.output
    return result.output


def test_written_size_is_said_and_true(tmp_path: Path) -> None:
    path = tmp_path / "step.json"
    result = runner.invoke(app, [*PLAN, "--trace", str(path)])
    assert result.exit_code == 0, result.output
    said = re.search(r"wrote .*step\.json: ([\d,]+) events, ([\d.,]+) MiB", result.output)
    assert said, result.output
    assert float(said.group(2)) == pytest.approx(path.stat().st_size / MIB, abs=0.005)


def test_refused_before_the_simulation_when_the_layout_shows_it(tmp_path: Path, monkeypatch) -> None:
    def simulate(*_: object, **__: object) -> None:
        pytest.fail("simulated a step whose trace the layout alone shows too large")

    monkeypatch.setattr("paraplan.projection.play_pipeline", simulate)
    path = tmp_path / "step.json"
    out = refused([*PLAN, "--trace", str(path), "--trace-max-mib", "0.1"], "the trace would be about 0.27 MiB")
    assert "1,024 forward and backward tasks, 896 pipeline sends, 150 bytes an event" in out
    assert "more than --trace-max-mib 0.1" in out
    assert not path.exists()


def test_refused_after_the_simulation_from_the_events(tmp_path: Path) -> None:
    """The layout's estimate (0.27 MiB) leaves out the collectives drawn beside the compute: the events count them."""
    path = tmp_path / "step.json"
    out = refused([*PLAN, "--trace", str(path), "--trace-max-mib", "0.35"], "the trace would be about 0.44 MiB")
    assert re.search(r"\(2,952 events x 1\d\d bytes\)", out), out
    assert not path.exists()


def test_the_estimate_from_the_events_is_within_a_few_percent(tmp_path: Path) -> None:
    p = project("llama3.1-8b", "h100-sxm5-80gb", 16, tp=2, pp=4, vpp=2, pipeline_schedule="interleaved", gbs=32, sp=True, fsdp=True,
                options=ProjectionOptions(record_events=True))  # fmt: skip
    _, nbytes = write_projection_trace(p, tmp_path / "a.json")
    assert expected_trace_bytes(p.train) <= nbytes  # the layout's figure stays below: it refuses no trace wrongly
    write_projection_trace(p, tmp_path / "b.json", max_mib=nbytes * 1.05 / MIB)
    with pytest.raises(ConfigError, match="the trace would be about"):
        write_projection_trace(p, tmp_path / "c.json", max_mib=nbytes * 0.95 / MIB)
    assert not (tmp_path / "c.json").exists()


def test_a_step_at_the_simulators_limit_is_refused_at_once(tmp_path: Path, monkeypatch) -> None:
    """pp 4096 x 256 micro-batches: 650 MB of trace, 120 s and 5.9 GB to simulate before; now refused first."""
    monkeypatch.setattr("paraplan.projection.play_pipeline", lambda *_, **__: pytest.fail("simulated"))
    args = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "4096", "--pp", "4096",
            "--num-layers", "8192", "--gbs", "256", "--trace", str(tmp_path / "t.json")]  # fmt: skip
    refused(args, "the trace would be about 600 MiB")


@pytest.mark.parametrize("limit", ["0", "-1", "nan"])
def test_the_limit_must_be_positive(tmp_path: Path, limit: str) -> None:
    refused([*PLAN, "--trace", str(tmp_path / "t.json"), "--trace-max-mib", limit], "--trace-max-mib must be > 0")


def test_chakra_written_size_is_said_and_true(tmp_path: Path) -> None:
    folder = tmp_path / "et"
    args = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "4", "--pp", "2", "--tp", "2",
            "--sp", "--gbs", "4", "--num-layers", "4", "--chakra", str(folder)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    said = re.search(r"wrote 4 Chakra traces \(([\d,]+) nodes, ([\d.,]+) MiB\)", result.output)
    assert said, result.output
    written = sum(p.stat().st_size for p in folder.glob("*.et"))
    assert float(said.group(2)) == pytest.approx(written / MIB, abs=0.005)


def test_chakra_refused_before_anything_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "et"
    args = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "4", "--pp", "2", "--tp", "2",
            "--sp", "--gbs", "64", "--num-layers", "4", "--chakra", str(folder), "--trace-max-mib", "0.05"]  # fmt: skip
    out = refused(args, "the Chakra traces would be about")
    assert "programs at 1 micro-batch scaled to 64" in out and "more than --trace-max-mib 0.05" in out
    assert "step time" not in out  # refused before the projection is printed
    assert not folder.exists() or not any(folder.iterdir())


def test_chakra_refused_from_one_micro_batch_of_programs(tmp_path: Path, monkeypatch) -> None:
    """4096 micro-batches on one GPU (301 MiB, 5 M nodes, minutes and gigabytes to build): refused from the program
    of one micro-batch, scaled."""
    import paraplan.formats.chakra as chakra

    built: list[int] = []
    real = chakra.rank_program

    def rank_program(model, system, train, *args, **kw):  # noqa: ANN001, ANN202
        built.append(train.num_microbatches)
        return real(model, system, train, *args, **kw)

    monkeypatch.setattr(chakra, "rank_program", rank_program)
    args = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "1", "--gbs", "4096",
            "--chakra", str(tmp_path / "et")]  # fmt: skip
    refused(args, "programs at 1 micro-batch scaled to 4,096, 1 traces), more than --trace-max-mib 256")
    assert built == [1]


def test_chakra_estimate_is_within_a_few_percent(tmp_path: Path) -> None:
    model = model_preset("llama3.1-8b").with_overrides(num_layers=8)
    system = system_preset("h100-sxm5-80gb", 4)
    for values in ({"pp": 2, "tp": 2, "sp": True, "gbs": 16},
                   {"pp": 2, "vpp": 2, "pipeline_schedule": "interleaved", "tp": 2, "sp": True, "gbs": 16}):  # fmt: skip
        train = TrainingSpec().with_values(**values)
        written = export_chakra(model, system, train, tmp_path / "a").bytes_written
        with pytest.raises(ConfigError, match="would be about") as refusal:
            export_chakra(model, system, train, tmp_path / "b", max_mib=written * 0.9 / MIB)
        estimate_mib = float(re.search(r"about ([\d.]+) MiB", str(refusal.value)).group(1))
        assert estimate_mib == pytest.approx(written / MIB, rel=0.05)
        export_chakra(model, system, train, tmp_path / "c", max_mib=written * 1.1 / MIB)


def test_convert_to_chakra_takes_the_limit_too(tmp_path: Path) -> None:
    source = tmp_path / "small.sh"
    source.write_text(
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 512 --num-attention-heads 8 \\\n"
        "  --vocab-size 32000 --swiglu --normalization RMSNorm --position-embedding-type rope --bf16 \\\n"
        "  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel \\\n"
        "  --micro-batch-size 1 --global-batch-size 64 --seq-length 1024 --use-distributed-optimizer\n"
    )
    out = tmp_path / "et"
    args = ["convert", "--input", str(source), "--to", "chakra", "-o", str(out), "--gpu", "h100-sxm5-80gb"]
    refused([*args, "--trace-max-mib", "0.05"], "the Chakra traces would be about")
    assert not out.exists()
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert re.search(r"wrote 8 Chakra traces \([\d,]+ nodes, [\d.]+ MiB\)", result.output), result.output
