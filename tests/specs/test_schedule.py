"""The pipeline schedules' declarations: geometry, rules, names, and the registry as the only list of them."""

import ast
from pathlib import Path

import pytest

from paraplan.errors import ConfigError
from paraplan.specs.schedule import (
    DEFAULT_SCHEDULE,
    SCHEDULES,
    Layout,
    megatron_schedule,
    schedule,
    validate_schedule,
)
from paraplan.specs.training import TrainingSpec

SRC = Path(__file__).resolve().parents[2] / "src" / "paraplan"


def test_stage_order_layouts() -> None:
    assert schedule("1f1b").stage_order(4, 1) == [(0, 0), (1, 0), (2, 0), (3, 0)]
    # Megatron interleaved: chunk c of rank r holds virtual stage c*pp + r
    assert schedule("interleaved").stage_order(2, 3) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    v_shape = [(0, 0), (1, 0), (2, 0), (2, 1), (1, 1), (0, 1)]
    assert schedule("zb-v").stage_order(3, 2) == v_shape
    assert schedule("dualpipev").stage_order(3, 2) == v_shape
    assert schedule("dualpipe").stage_order(4, 2) == [(0, 0), (1, 0), (2, 0), (3, 0)]
    # dualpipe: rank r holds stage r (direction 0) and a copy of stage p-1-r (direction 1)
    assert schedule("dualpipe").chunk_model_stage(4, 2) == ((0, 3), (1, 2), (2, 1), (3, 0))
    assert schedule("dualpipe").stage_paths(4, 2)[1] == ((3, 1), (2, 1), (1, 1), (0, 1))
    assert schedule("zb-v").chunk_model_stage(3, 2) == ((0, 5), (1, 4), (2, 3))
    assert [s.model_stages(4, 3) for s in SCHEDULES.values()] == [4, 4, 12, 4, 8, 4, 8]


def test_chunks_and_copies() -> None:
    assert [s.chunks_per_rank(4) for s in SCHEDULES.values()] == [1, 1, 4, 1, 2, 2, 2]
    assert [s.param_copies for s in SCHEDULES.values()] == [1, 1, 1, 1, 1, 2, 1]
    with pytest.raises(ConfigError, match="unknown pipeline schedule 'pipedream'; choose one of gpipe, 1f1b"):
        schedule("pipedream")


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_every_model_stage_has_its_param_copies(name: str) -> None:
    """Each model stage is held by `param_copies` (rank, chunk)s, and every chunk of every rank holds one."""
    spec = SCHEDULES[name]
    for pp in (1, 2, 4):
        vpp = 3 if spec.interleaves else 1
        holder = spec.chunk_model_stage(pp, vpp)
        assert len(holder) == pp and all(len(row) == spec.chunks_per_rank(vpp) for row in holder)
        held = [stage for row in holder for stage in row]
        assert min(held) >= 0
        assert all(held.count(stage) == spec.param_copies for stage in range(spec.model_stages(pp, vpp)))


def test_validate_reports_every_rule_with_numbers() -> None:
    assert validate_schedule("1f1b", 4, 1, 8) == []
    assert validate_schedule("1f1b", 8, 2, 4) == [
        "vpp=2 needs the interleaved schedule (1f1b holds one chunk per rank)",
    ]
    assert validate_schedule("zb-h1", 8, 1, 4) == ["zb-h1 needs micro-batches >= pp (got 4 < 8)"]
    assert validate_schedule("dualpipe", 3, 2, 5) == [
        "dualpipe needs an even pp (got pp=3)",
        "dualpipe needs an even number of micro-batches (got 5)",
        "dualpipe needs micro-batches >= 2*pp (got 5 < 6)",
    ]
    assert validate_schedule("interleaved", 4, 1, 2) == [
        "interleaved 1F1B needs vpp >= 2 (got vpp=1); use 1f1b",
        "interleaved 1F1B needs micro-batches divisible by pp (got 2 % 4 = 2)",
        "interleaved 1F1B needs micro-batches >= pp (got 2 < 4)",
    ]
    assert validate_schedule("zb-v", 2, 3, 8) == ["zb-v holds exactly 2 chunks per rank (got vpp=3)"]
    assert validate_schedule("dualpipev", 4, 1, 6) == ["dualpipev needs micro-batches >= 2*pp (got 6 < 8)"]
    assert validate_schedule("dualpipev", 1, 1, 1) == []  # pp = 1: no micro-batch rule
    assert "unknown" in validate_schedule("nope", 4, 1, 8)[0]
    assert validate_schedule("gpipe", 0, 1, 8) == ["pipeline parallel size must be >= 1 (got pp=0)"]


def test_properties() -> None:
    assert [n for n, s in SCHEDULES.items() if s.split_backward] == ["zb-h1", "zb-v", "dualpipe", "dualpipev"]
    assert [n for n, s in SCHEDULES.items() if s.pairs_forward_backward] == ["dualpipe", "dualpipev"]
    assert [n for n, s in SCHEDULES.items() if s.all_forwards_first] == ["gpipe"]
    assert [n for n, s in SCHEDULES.items() if s.interleaves] == ["interleaved"]
    assert {s.layout for s in SCHEDULES.values()} == set(Layout)
    assert DEFAULT_SCHEDULE == TrainingSpec().pipeline_schedule == "1f1b"
    assert megatron_schedule(1).name == "1f1b" and megatron_schedule(4).name == "interleaved"
    assert TrainingSpec(pipeline_schedule="dualpipev").overlaps_ep
    assert not TrainingSpec(pipeline_schedule="zb-v").overlaps_ep
    assert not TrainingSpec(pipeline_schedule="nope").overlaps_ep  # unknown: the validator says so
    assert TrainingSpec(pipeline_schedule="zb-v").schedule is SCHEDULES["zb-v"]


def test_framework_names() -> None:
    """Megatron-core runs 1F1B and interleaved 1F1B; torchtitan and Primus name the ones they run."""
    names = {n: dict(s.framework_names) for n, s in SCHEDULES.items()}
    assert [n for n in SCHEDULES if "megatron" in names[n]] == ["1f1b", "interleaved"]
    torchtitan = {n: names[n]["torchtitan"] for n in SCHEDULES if "torchtitan" in names[n]}
    assert torchtitan == {
        "gpipe": "GPipe",
        "1f1b": "1F1B",
        "interleaved": "Interleaved1F1B",
        "zb-v": "ZBVZeroBubble",
        "dualpipev": "DualPipeV",
    }
    assert {n: names[n]["primus"] for n in SCHEDULES if "primus" in names[n]} == {
        "zb-h1": "enable_zero_bubble",
        "zb-v": "zero_bubble_v_schedule",
    }
    assert hash(SCHEDULES["1f1b"]) != hash(SCHEDULES["interleaved"])  # hashable despite the mapping field


# ------------------------------------------------------------------ the registry is the only list
def test_no_module_spells_a_schedule_name_but_the_registry() -> None:
    """Code reads schedule properties instead of comparing names: no string constant anywhere in the
    package equals a schedule's name, except in its declaration (docstrings and messages may mention them)."""
    names = set(SCHEDULES)
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "specs" / "schedule.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r}")
    assert not found, "\n".join(found)


def test_cli_help_lists_every_schedule() -> None:
    import typer.main

    from paraplan.cli.main import app

    project = typer.main.get_command(app).commands["project"]  # type: ignore[attr-defined]
    (option,) = [p for p in project.params if p.name == "schedule"]
    assert option.help.split("(default:")[0].split() == list(SCHEDULES)


def test_the_tuner_searches_every_schedule_but_the_dominated_ones() -> None:
    from paraplan.tune.space import DEFAULT_SCHEDULES, parse_axis_value

    assert DEFAULT_SCHEDULES == tuple(n for n, s in SCHEDULES.items() if not s.all_forwards_first)
    assert [parse_axis_value("schedule", n) for n in SCHEDULES] == list(SCHEDULES)
    with pytest.raises(ValueError):
        parse_axis_value("schedule", "pipedream")


def test_formats_take_their_schedule_names_from_the_registry() -> None:
    from paraplan.formats import chakra, primus, torchtitan

    assert torchtitan.SCHEDULES == {
        s.framework_names["torchtitan"]: n for n, s in SCHEDULES.items() if "torchtitan" in s.framework_names
    }
    assert set(primus.PRIMUS_SCHEDULES.values()) == {n for n, s in SCHEDULES.items() if "primus" in s.framework_names}
    assert chakra.EXPORTED_SCHEDULES == ("gpipe", "1f1b", "interleaved", "zb-h1")
