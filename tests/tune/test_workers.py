"""The tuner's worker processes: they die with the tuner, a dead worker costs no result, a seeded sampling
search is the same on any executor, and a time limit holds."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.tune import tuner
from paraplan.tune.evaluate import Evaluator, Task, TaskReport
from paraplan.tune.executors import LocalPoolExecutor, SerialExecutor
from paraplan.tune.space import SearchSpace
from paraplan.tune.tuner import TuneOptions, tune

REPO = Path(__file__).resolve().parents[2]
NO_OPTUNA = "optuna is not installed (paraplan's 'tune' extra): the tpe search needs it"


# ----------------------------------------------------------------------------- workers die with the tuner
def _children(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is `pid`, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc (Linux)")
def test_workers_die_when_the_tuner_is_killed() -> None:
    """kill -9 of the tuner: its pool workers end within seconds and release its stdout."""
    command = [sys.executable, "-m", "paraplan", "tune", "--model", "deepseek-v3", "--gpu", "h100-sxm5-80gb",
               "--gpus", "2048", "--gbs", "4096", "--seq", "4096", "--method", "exhaustive", "--workers", "2",
               "--time-limit", "300", "--json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    tuner_process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO)
    workers: set[int] = set()
    try:
        give_up = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < give_up and tuner_process.poll() is None:
            time.sleep(0.2)
            workers = _children(tuner_process.pid)
        assert len(workers) >= 2, f"no pool workers appeared ({tuner_process.poll()=})"
        time.sleep(1.0)  # the workers are in the search now
        tuner_process.kill()
        tuner_process.communicate(timeout=30)  # EOF on stdout: no worker holds it any longer
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in workers), "pool workers outlived the killed tuner"
    finally:
        tuner_process.kill()
        for pid in workers:  # only the workers this test started
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


# ----------------------------------------------------------------------------- a worker that dies
_KILL = {"marker": None, "parent": 0, "tp": 0}


class _KillingEvaluator(Evaluator):
    """Test-only: in a pool worker, SIGKILLs its own process on a task holding a structure with tp == `tp`; once
    (a marker file records it), or every time when there is no marker."""

    def run(self, task: Task) -> TaskReport:
        marker = _KILL["marker"]
        hit = any(getattr(item, "tp", 0) == _KILL["tp"] for item in task.items)
        if os.getpid() != _KILL["parent"] and hit and (marker is None or _first(marker)):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().run(task)


def _first(marker: Path) -> bool:
    """Whether this process is the first to get here (the marker is created atomically, once)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


@pytest.fixture
def killing_evaluator(monkeypatch):
    monkeypatch.setitem(_KILL, "parent", os.getpid())
    monkeypatch.setattr(tuner, "Evaluator", _KillingEvaluator)  # forked workers inherit the patched class
    return _KILL


def test_a_worker_killed_once_costs_nothing(
    dense_problem, dense_limits, dense_serial_top5, killing_evaluator, monkeypatch, tmp_path
):
    monkeypatch.setitem(killing_evaluator, "marker", tmp_path / "killed")
    monkeypatch.setitem(killing_evaluator, "tp", 2)
    serial = dense_serial_top5  # the parent never kills: its serial run is the plain one
    pooled = tune(dense_problem, dense_limits, TuneOptions(workers=2, top_k=5, seed_planner=False))
    assert (tmp_path / "killed").exists(), "the test did not kill a worker"
    assert pooled.failed == 0
    assert [e.candidate for e in pooled.top] == [e.candidate for e in serial.top]
    assert pooled.evaluated == serial.evaluated
    assert any("started again 1 time(s)" in n and "SIGKILL" in n for n in pooled.notes), pooled.notes


def test_a_task_that_always_kills_its_worker_is_reported(
    dense_problem, dense_limits, dense_serial_top5, killing_evaluator, monkeypatch
):
    monkeypatch.setitem(killing_evaluator, "marker", None)
    monkeypatch.setitem(killing_evaluator, "tp", 8)
    serial = dense_serial_top5  # the parent never kills: its serial run is the plain one
    pooled = tune(dense_problem, dense_limits, TuneOptions(workers=2, top_k=5, seed_planner=False))
    tp8 = [e for e in serial.evaluations if e.candidate.tp == 8]
    assert tp8, "the test needs tp 8 structures in the space"
    assert pooled.failed > 0 and pooled.top
    assert not any(e.candidate.tp == 8 for e in pooled.evaluations)
    assert any("not evaluated" in n and "died when it ran alone" in n and "SIGKILL" in n for n in pooled.notes)
    others = sorted((e.candidate.key(), e.step_time_s) for e in serial.evaluations if e.candidate.tp != 8)
    kept = sorted((e.candidate.key(), e.step_time_s) for e in pooled.evaluations)
    assert set(kept) <= set(others)  # what was evaluated is exact; only tasks holding tp 8 were lost


def test_pool_retries_lost_tasks_and_isolates_the_culprit(dense_problem, killing_evaluator, monkeypatch) -> None:
    monkeypatch.setitem(killing_evaluator, "marker", None)
    monkeypatch.setitem(killing_evaluator, "tp", 4)
    space = SearchSpace(dense_problem)
    ones = [s for s in space.structures() if s.tp == 1][:16]
    fours = [s for s in space.structures() if s.tp == 4][:4]
    structures = ones[:4] + fours[:2] + ones[4:12] + fours[2:] + ones[12:]
    tasks = [Task("groups", (s,), "test", tag=i + 1) for i, s in enumerate(structures)]
    expected = {r.tag: r for r in SerialExecutor(Evaluator(dense_problem, space)).run(tasks) if r.tag}
    pool = LocalPoolExecutor(_KillingEvaluator(dense_problem, space), workers=2)
    try:
        reports = {r.tag: r for r in pool.run(tasks)}
    finally:
        pool.close()
    assert set(reports) == {t.tag for t in tasks}  # one report per task, whatever died
    for task in tasks:
        report = reports[task.tag]
        if task.items[0].tp == 4:
            assert report.failures and report.failed_items == 1 and not report.evaluations
        else:
            assert not report.failures
            assert [e.step_time_s for e in report.evaluations] == [
                e.step_time_s for e in expected[task.tag].evaluations
            ]
    assert pool.restarts >= 1 and "killed by SIGKILL" in pool.deaths


# ----------------------------------------------------------------------------- a seeded TPE is reproducible
def test_seeded_tpe_is_the_same_on_any_executor(dense_problem, dense_limits) -> None:
    pytest.importorskip("optuna", reason=NO_OPTUNA)

    def trials(executor: str, workers: int | None) -> tuple[int, list]:
        options = TuneOptions(method="tpe", seed=11, budget=150, executor=executor, workers=workers)
        result = tune(dense_problem, dense_limits, options)
        return result.evaluated, [(e.candidate.key(), e.step_time_s, e.source) for e in result.evaluations]

    serial = trials("serial", None)
    assert serial[0] > 50
    assert trials("local", 2) == serial
    assert trials("local", 2) == serial


# ----------------------------------------------------------------------------- the time limit holds
def test_a_time_limit_holds_on_a_large_space() -> None:
    """An exhaustive search of a space of 46,092 structures (minutes on two workers) stopped at 2 s: the results
    found so far are printed, and the output says the limit stopped the search."""
    limit_s = 2.0
    args = ["tune", "--model", "llama3.1-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "1024,2048", "--gbs", "1024",
            "--seq", "8192", "--precision", "bf16,fp8", "--method", "exhaustive", "--workers", "2",
            "--time-limit", str(limit_s), "--json"]  # fmt: skip
    tuner._warm_up_loops()  # loading the compiled loops is not the limit's business in this test
    started = time.monotonic()
    result = CliRunner().invoke(app, args)
    wall_s = time.monotonic() - started
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    # margins for a busy machine: one projection in flight, closing the pool, the output
    assert out["elapsed_s"] < limit_s + 6.0, f"{out['elapsed_s']:.1f} s in the tuner for a {limit_s} s limit"
    assert wall_s < limit_s + 10.0, f"{wall_s:.1f} s for a {limit_s} s limit"
    assert out["top"], "what was found before the limit is printed"
    assert out["stopped_by"] == "time limit"
    assert any(f"time limit of {limit_s:g} s stopped" in n for n in out["notes"]), out["notes"]
