"""Sizes the tool works in proportion to are refused by the validator, before any of that work (issue 34).

No wall clock: every step that builds something per pipeline stage or per micro-batch is replaced by one that
fails the test, so a refusal that reaches them (or a limit that comes after them) shows as a failure, however fast
the machine.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from paraplan.api import project
from paraplan.cli.main import app
from paraplan.errors import ConfigError
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import MAX_MODEL_STAGES, MAX_PIPELINE_WORK, size_problems

runner = CliRunner()
PROJECT = ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb"]

# what a projection builds per model stage or per micro-batch, each where its caller looks it up
PER_STAGE_OR_MICROBATCH = (
    "paraplan.projection.pipeline_split",
    "paraplan.projection.split_stages",
    "paraplan.projection.play_pipeline",
    "paraplan.sim.pipeline.simulate",
    "paraplan.sim.engine.build_plan",
    "paraplan.specs.schedule._stage_paths",
    "paraplan.specs.schedule._chunk_model_stage",
)


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    def work(*_: object, **__: object) -> None:
        pytest.fail("work proportional to the pipeline started before the size was refused")

    for target in PER_STAGE_OR_MICROBATCH:
        monkeypatch.setattr(target, work)


def refused(args: list[str], *fragments: str) -> None:
    result = runner.invoke(app, [*PROJECT, *args])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    errors = " ".join(line for line in result.output.splitlines() if line.startswith("error:"))
    for fragment in fragments:
        assert fragment in errors, result.output


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--gpus", "8", "--pp", "100000000"], ["pp*vpp = 100000000*1 = 100000000 model stages", "4096 accepted"]),
        (
            ["--gpus", "8192", "--pp", "4096", "--vpp", "2", "--schedule", "interleaved"],
            ["pp*vpp = 4096*2 = 8192 model stages is more than the 4096 accepted"],
        ),
        (
            ["--gpus", "4096", "--pp", "4096", "--schedule", "dualpipev"],
            ["pp*chunks per rank (dualpipev) = 4096*2 = 8192 model stages"],
        ),
        (["--gpus", "8", "--gbs", "10000000"], ["micro-batches x model stages = 1250000 x 1 = 1250000", "1048576"]),
        (
            ["--gpus", "8", "--pp", "8", "--gbs", "131072", "--schedule", "dualpipev"],
            ["micro-batches x model stages = 131072 x 16 = 2097152 is more than the 1048576"],
        ),
        (["--gpus", "8", "--num-layers", "100000000"], ["num_layers must be >= 1 and <= 10000"]),
        (["--gpus", "8", "--mbs", "0"], ["mbs, gbs and seq must be >= 1 (got mbs=0"]),
    ],
)
def test_refused_before_the_work(no_work: None, args: list[str], fragments: list[str]) -> None:
    refused(args, *fragments)


def test_library_refuses_before_the_work(no_work: None) -> None:
    with pytest.raises(ConfigError, match="model stages is more than the 4096 accepted"):
        project("llama3.1-8b", "h100-sxm5-80gb", 8, pp=100_000_000)


def test_the_limits_themselves_are_accepted() -> None:
    """The largest size accepted passes the size rules and one micro-batch more is refused: the rules are arithmetic
    on the spec, so this costs nothing."""
    at_limit = TrainingSpec().with_values(pp=MAX_MODEL_STAGES, dp=1, mbs=1, gbs=MAX_PIPELINE_WORK // MAX_MODEL_STAGES)
    assert at_limit.num_microbatches * MAX_MODEL_STAGES == MAX_PIPELINE_WORK
    assert size_problems(at_limit) == []
    assert size_problems(at_limit.with_values(gbs=at_limit.gbs + 1)) == [
        f"micro-batches x model stages = 257 x 4096 = {257 * 4096} is more than the {MAX_PIPELINE_WORK} the "
        "simulator plays (lower gbs or raise mbs)"
    ]
    assert size_problems(TrainingSpec().with_values(pp=MAX_MODEL_STAGES + 1, dp=1)) == [
        f"pp*vpp = {MAX_MODEL_STAGES + 1}*1 = {MAX_MODEL_STAGES + 1} model stages is more than the 4096 accepted"
    ]


def test_published_layouts_are_far_inside_the_limits() -> None:
    """Megatron-style layouts of real runs: 4096 micro-batches on pp 16 x vpp 4, DualPipeV on pp 16."""
    for values in (
        {"pp": 16, "vpp": 4, "pipeline_schedule": "interleaved", "dp": 8, "mbs": 1, "gbs": 4096 * 8},
        {"pp": 16, "pipeline_schedule": "dualpipev", "dp": 128, "mbs": 1, "gbs": 15360},
    ):
        assert size_problems(TrainingSpec().with_values(**values)) == []


def test_a_valid_layout_reaches_the_guarded_work(no_work: None) -> None:
    """The guard bites: a size inside the limits goes on to the per-stage work, which fails the test here."""
    with pytest.raises(pytest.fail.Exception, match="work proportional to the pipeline"):
        project("llama3.1-8b", "h100-sxm5-80gb", 8, pp=2, gbs=8)
