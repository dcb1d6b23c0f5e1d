import sqlite3

from paraplan.tune.tuner import ProgressUpdate, TuneOptions, score, tune


def test_interrupted_search_keeps_results_and_resumes(dense_problem, dense_limits, tmp_path) -> None:
    study = tmp_path / "study.db"
    reference = tune(dense_problem, dense_limits, TuneOptions(executor="serial", top_k=3))

    def interrupt(update: ProgressUpdate) -> None:
        if update.phase == "exhaustive" and update.done > update.total // 3:
            raise KeyboardInterrupt

    first = tune(
        dense_problem,
        dense_limits,
        TuneOptions(executor="serial", top_k=3, study_path=str(study), groups_per_task=16),
        progress=interrupt,
    )
    assert first.interrupted
    assert first.top, "what was found before Ctrl-C is kept"
    assert any("interrupted" in n for n in first.notes)
    with sqlite3.connect(study) as db:
        rows = db.execute("SELECT COUNT(*) FROM paraplan_evaluation").fetchone()[0]
        groups = db.execute("SELECT COUNT(*) FROM paraplan_group_done").fetchone()[0]
    assert rows == len(first.evaluations) and groups > 0

    second = tune(dense_problem, dense_limits, TuneOptions(executor="serial", top_k=3, study_path=str(study)))
    assert not second.interrupted
    assert second.resumed == rows
    assert second.evaluated < reference.evaluated  # finished groups are not searched again
    assert [e.candidate for e in second.top] == [e.candidate for e in reference.top]
    assert score(second.top[0]) == score(reference.top[0])

    third = tune(dense_problem, dense_limits, TuneOptions(executor="serial", top_k=3, study_path=str(study)))
    assert third.evaluated == 0  # everything known: nothing recomputed
    assert [e.candidate for e in third.top] == [e.candidate for e in reference.top]


def test_a_study_keeps_problems_apart(dense_problem, dense_limits, tmp_path) -> None:
    from dataclasses import replace

    study = str(tmp_path / "s.db")
    tune(dense_problem, dense_limits, TuneOptions(executor="serial", study_path=study, top_k=1))
    other = tune(replace(dense_problem, gbs=32), dense_limits, TuneOptions(executor="serial", study_path=study))
    assert other.resumed == 0


def test_time_limit_and_budget_stop_the_search(dense_problem, dense_limits) -> None:
    limited = tune(
        dense_problem, dense_limits, TuneOptions(executor="serial", budget=50, groups_per_task=4, seed_planner=False)
    )
    assert 50 <= limited.evaluated < 120
    assert limited.top
