"""`paraplan geo`: side-by-side output, JSON, Chrome trace, and bad input (one line per problem, exit 2)."""

import json
from pathlib import Path

import pytest
from geo_paths import EXAMPLES, TINY
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.geo import load_geo_config

runner = CliRunner()


def geo(*args: str):
    return runner.invoke(app, ["geo", *args], env={"COLUMNS": "200"})


def assert_bad(result, *fragments: str) -> list[str]:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    for fragment in fragments:
        assert any(fragment in ln for ln in lines), (fragment, result.output)
    return lines


def test_json_and_trace(tmp_path: Path):
    trace = tmp_path / "atlas.json"
    result = geo("--config", str(TINY), "--json", "--trace", str(trace))
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert set(d["placements"]) == {"dp-across", "pp-across", "atlas"}
    assert d["placements"]["atlas"]["plan"]["speedup_vs_dp_across"] > 1
    assert d["flow_sweep"] and d["sharing_sweep"] and d["datacenter_selection"]
    assert d["bubbletea"]["no_slowdown_check"]["unchanged"]
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert "WAN a->b" in names and "WAN b->a" in names
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in spans} >= {"compute", "prefill", "a->b", "b->a", "dp"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)


def test_table_output():
    result = geo("--config", str(TINY))
    assert result.exit_code == 0, result.output
    for fragment in ("placements side by side", "DP across", "Atlas", "TCP flows per link", "BubbleTea"):
        assert fragment in result.output


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_examples_are_valid(path: Path):
    cfg = load_geo_config(path)
    assert len(cfg.datacenters) >= 2 and cfg.wan


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "geo.yaml"
    path.write_text(text)
    return str(path)


GOOD = """
model: llama3.1-8b
training: {seq: 2048, gbs: 32}
datacenters:
  - {name: a, gpu: h100-sxm5-80gb, gpus: 16}
  - {name: b, gpu: h100-sxm5-80gb, gpus: 16}
wan:
  - {between: [a, b], bandwidth_gbps: 100, rtt_ms: 20}
"""


def test_malformed_yaml(tmp_path):
    assert_bad(geo("--config", write(tmp_path, "model: x\ntraining: {gbs: 3\n")), "not valid YAML")


def test_missing_file():
    assert_bad(geo("--config", "/nonexistent/geo.yaml"), "file not found")


def test_unknown_presets_are_reported_together(tmp_path):
    text = GOOD.replace("h100-sxm5-80gb, gpus: 16}\n  - {name: b", "h900, gpus: 16}\n  - {name: b").replace(
        "llama3.1-8b", "llama9"
    )
    lines = assert_bad(
        geo("--config", write(tmp_path, text)),
        "field 'datacenters[0].gpu': unknown GPU preset 'h900'",
        "field 'model': unknown model preset 'llama9'",
    )
    assert len(lines) == 2


def test_missing_and_bad_fields_and_unknown_datacenters(tmp_path):
    text = """
model: llama3.1-8b
training: {seq: 2048, mbs: 3}
datacenters:
  - {name: a, gpu: h100-sxm5-80gb, gpus: -4, colour: blue}
  - {name: b, gpu: h100-sxm5-80gb}
wan:
  - {between: [a, c], bandwidth_gbps: 100, rtt_ms: 20}
  - {between: [b, b], bandwidth_gbps: 100}
"""
    lines = assert_bad(
        geo("--config", write(tmp_path, text)),
        "missing field 'training.gbs'",
        "field 'datacenters[0].gpus': Input should be greater than 0 (got -4)",
        "unknown field 'datacenters[0].colour'",
        "missing field 'datacenters[1].gpus'",
        "missing field 'wan[1].rtt_ms'",
        "field 'wan[0].between' names unknown datacenter 'c' (known: a, b)",
        "field 'wan[1].between' joins 'b' to itself",
    )
    assert len(lines) == 7


def test_batch_rules(tmp_path):
    assert_bad(
        geo("--config", write(tmp_path, GOOD.replace("gbs: 32", "gbs: 33, mbs: 2"))),
        "field 'training.gbs' 33 must be divisible by training.mbs 2",
    )


def test_a_job_that_cannot_fit(tmp_path):
    text = GOOD.replace("llama3.1-8b", "llama3.1-405b")
    lines = assert_bad(geo("--config", write(tmp_path, text)), "cannot run on these datacenters", "GiB per GPU")
    assert any("needs at least" in ln and "18 bytes per parameter" in ln for ln in lines)
