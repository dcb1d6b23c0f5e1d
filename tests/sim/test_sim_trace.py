"""Chrome trace export of a simulated step."""

import json
from collections import defaultdict
from pathlib import Path

import pytest

from paraplan.report.trace import chrome_trace, write_chrome_trace
from paraplan.sim.costs import uniform_chunk, uniform_costs
from paraplan.sim.engine import simulate
from paraplan.sim.result import STREAMS

CHUNK = uniform_chunk(
    0.012,
    0.02,
    0.009,
    comm_total_s={"tp": 0.004, "ep": 0.006},
    comm_exposed_s={"tp": 0.001, "ep": 0.003},
    dp_grad_reduce_s=0.03,
    dp_param_gather_s=0.02,
)


@pytest.mark.parametrize(
    "schedule,pp,m,options",
    [
        ("1f1b", 4, 8, {"overlap_grad_reduce": True}),
        ("interleaved", 4, 8, {"vpp": 2, "overlap_param_gather": True, "overlap_grad_reduce": True}),
        ("zb-h1", 4, 8, {}),
        ("dualpipe", 4, 8, {"overlap_grad_reduce": True}),
        ("zb-v", 2, 6, {"overlap_param_gather": True}),
        ("dualpipev", 2, 6, {}),
        ("gpipe", 1, 3, {}),
    ],
)
def test_trace_round_trips_and_nests(tmp_path: Path, schedule: str, pp: int, m: int, options: dict) -> None:
    costs = uniform_costs(schedule, pp, m, CHUNK, p2p_s=0.002, optimizer_s=0.01, **options)
    result = simulate(costs, record_events=True)
    assert result.step_time_s == pytest.approx(simulate(costs).step_time_s, rel=1e-12)
    path = tmp_path / "trace.json"
    write_chrome_trace(result, path, title=schedule)
    trace = json.loads(path.read_text())
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {r: f"pipeline rank {r}" for r in range(pp)}  # one process per stage
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(set(threads.values())) == sorted(STREAMS)  # one thread per stream
    assert len(threads) == pp * len(STREAMS)

    complete = [e for e in events if e["ph"] == "X"]
    by_thread = defaultdict(list)
    for e in complete:
        assert e["dur"] >= 0
        by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    tol_us = 1e-6
    for spans in by_thread.values():  # slices on one thread only nest or are disjoint
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[float] = []
        for begin, end in spans:
            while stack and stack[-1] <= begin + tol_us:
                stack.pop()
            assert not stack or end <= stack[-1] + tol_us, (begin, end, stack)
            stack.append(end)
    last_us = max(e["ts"] + e["dur"] for e in complete)
    assert last_us == pytest.approx(result.step_time_s * 1e6, rel=1e-9)
    names = {e["name"] for e in complete}
    assert "optimizer step" in names
    assert any(name.startswith("send") for name in names) == (pp > 1)
    assert ("grad reduce bucket" if costs.overlap_grad_reduce else "grad reduce") in names


def test_trace_needs_events() -> None:
    result = simulate(uniform_costs("1f1b", 2, 2, CHUNK))
    with pytest.raises(ValueError, match="record_events=True"):
        chrome_trace(result)


def test_trace_with_fsdp_draws_the_dp_stream() -> None:
    chunk = uniform_chunk(1.0, 2.0, fsdp_gather_s=0.5, fsdp_reduce_scatter_s=0.4)
    result = simulate(uniform_costs("1f1b", 2, 4, chunk), record_events=True)
    dp = [e for e in result.events if e.stream == "dp"]
    assert {e.name for e in dp} == {"fsdp all-gather", "fsdp reduce-scatter"}
    assert max(e.end_s for e in result.events) == pytest.approx(result.step_time_s)
