"""`paraplan project --trace`: a Chrome trace whose events add up to the reported step time."""

import json
from pathlib import Path

from typer.testing import CliRunner

from paraplan.cli.main import app

runner = CliRunner()


def test_trace_structure_and_step_time(tmp_path: Path) -> None:
    trace_path = tmp_path / "step.json"
    result = runner.invoke(app, ["project", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                                 "--tp", "2", "--pp", "4", "--vpp", "2", "--gbs", "32", "--seq", "4096", "--sp",
                                 "--distributed-optimizer", "--overlap-grad-reduce", "--json",
                                 "--trace", str(trace_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    step = json.loads(result.stdout)["step_time_s"]  # the "wrote" line goes to stderr
    trace = json.loads(trace_path.read_text())
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    processes = {e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert processes == {0, 1, 2, 3}  # one process per pipeline stage
    assert {e["pid"] for e in events} == processes
    assert all((e["pid"], e["tid"]) in names for e in events)  # one named thread per stream
    end_us = max(e["ts"] + e["dur"] for e in events)
    assert abs(end_us / 1e6 - step) <= 1e-6 * step
    # events on one thread only nest or are disjoint
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple[float, float]] = []
        for start, end in spans:
            while stack and stack[-1][1] <= start + 1e-6:
                stack.pop()
            if stack:
                assert end <= stack[-1][1] + 1e-6, "partial overlap on one thread"
            stack.append((start, end))
