"""The figure builders (no plotting library needed): what each report shows adds up to paraplan's numbers."""

from __future__ import annotations

import pytest

from paraplan.report.build_geo import build_geo, utilisation_series, wan_busy_series
from paraplan.report.build_project import BUBBLE, build_project, compute_gaps, pipeline_timeline
from paraplan.report.build_tune import build_tune, describe, rank_labels
from paraplan.report.build_validate import build_validate, source_stats
from paraplan.report.figures import XY, Bars, Table, Timeline, pareto_front, union_coverage, weighted_coverage


def test_project_report_shows_step_bubble_and_memory(projection) -> None:
    report = build_project(projection)
    assert [type(f) for f in report.figures] == [Timeline, Bars, Bars]
    assert report.plot_count == 3
    values = {h.label: h.value for h in report.headlines}
    assert values["step time"] == f"{projection.step_time_s * 1e3:,.1f} ms"
    assert "FITS" in values["peak memory per GPU"]
    timeline, breakdown, memory = report.figures
    # the bubble segments of each stage add up to the simulator's per-rank idle time
    sim = projection.pipeline.sim
    for rank, bubble_s in enumerate(sim.bubble_s):
        row = f"stage {rank} · compute"
        drawn_ms = sum(s.length for s in timeline.segments if s.category == BUBBLE and s.row == row)
        assert drawn_ms == pytest.approx(bubble_s * 1e3, rel=1e-6, abs=1e-6)
    assert max(s.start + s.length for s in timeline.segments) == pytest.approx(projection.step_time_s * 1e3)
    # the breakdown bars add up to the step; the memory stacks to each stage's total, against HBM
    assert sum(breakdown.series[0].values) == pytest.approx(projection.step_time_s * 1e3)
    assert "pipeline bubble" in breakdown.categories
    totals = [sum(s.values[i] for s in memory.series) for i in range(len(memory.categories))]
    per_rank = [r.total_bytes / 2**30 for r in sorted(projection.memory.ranks, key=lambda r: r.rank)]
    assert totals == pytest.approx(per_rank)
    assert memory.lines[0].value == pytest.approx(projection.memory.capacity_bytes / 2**30)


def test_timeline_needs_events() -> None:
    from paraplan.api import project

    with pytest.raises(ValueError, match="record_events"):
        pipeline_timeline(project("llama3.1-8b", "h100-sxm5-80gb", 8, tp=2, pp=2, gbs=8, seq=2048))


def test_compute_gaps() -> None:
    from paraplan.sim.result import Event

    events = [Event(0, "compute", "F", 1.0, 1.0), Event(0, "compute", "B", 3.0, 1.0)]
    assert compute_gaps(events, 5.0) == [(0.0, 1.0), (2.0, 3.0), (4.0, 5.0)]


def test_pareto_front_and_coverage() -> None:
    points = [(10, 5), (20, 4), (20, 8), (30, 8), (5, 1), (40, 9)]
    assert pareto_front(points) == [4, 0, 2, 5]  # min memory, max throughput, in increasing memory
    edges = [0.0, 1.0, 2.0, 3.0, 4.0]
    assert union_coverage([(0.5, 1.5), (1.0, 2.0), (3.0, 3.25)], edges) == pytest.approx([0.5, 1.0, 0.0, 0.25])
    assert weighted_coverage([(0.0, 2.0, 0.5)], edges) == pytest.approx([0.5, 0.5, 0.0, 0.0])


def test_tune_report_from_csv_rows_and_json_top(tune_rows) -> None:
    rows, top = tune_rows
    report = build_tune(rows, top, top_k=10, title="t", capacity_gib=80)
    scatter, table = report.figures
    assert isinstance(scatter, XY) and isinstance(table, Table)
    names = [t.name for t in scatter.panels[0].traces]
    assert any(n.startswith("Pareto front") for n in names) and "top 3" in names
    fits = sum(r["fits"] == "True" for r in rows)
    assert f"fits ({fits:,})" in names and f"does not fit ({len(rows) - fits:,})" in names
    # the JSON top decides the order and brings the commands
    assert [row[6] for row in table.rows] == [t["command"] for t in top]
    assert report.headlines[0].value == describe(top[0])
    # without a top list, the top K are the fastest that fit
    alone = build_tune(rows, top_k=3)
    assert [row[3] for row in alone.figures[1].rows] == [row[3] for row in table.rows]


def test_tune_report_without_any_fitting_configuration() -> None:
    report = build_tune([{"tp": "8", "tokens_per_sec_per_gpu": "100", "peak_gib": "90", "fits": "False"}])
    assert report.headlines[0].value == "no configuration fits"
    assert report.figures[1].rows == ()


def test_describe_and_rank_labels(tune_rows) -> None:
    rows, _ = tune_rows
    assert describe(rows[1]) == "64 GPUs tp2 pp2 cp1 dp16 mbs2 1f1b bf16 rc:none dist_opt sp"
    report = build_tune(rows, top_k=4)
    points = report.figures[0].panels[0].traces[3]
    assert all(label.startswith("#") or label == "" for label in points.labels)

    class P:
        def __init__(self, gib: float, tps: float) -> None:
            self.peak_gib, self.tokens_per_sec_per_gpu = gib, tps

    assert rank_labels([P(1, 2), P(1, 2), P(3, 4)]) == ("#1-2", "", "#3")


def test_validate_report_per_source(validation) -> None:
    report = build_validate(validation)
    scatter, bars, table = report.figures
    assert len(scatter.panels) == 2  # step time and tokens/s, each on its own axes
    stats = source_stats(validation)
    assert stats["paper-a"]["mape_pct"] == pytest.approx(5.0)
    assert stats["paper-b"]["mean_error_pct"] == pytest.approx(-10.0)
    assert [row[0] for row in table.rows] == ["bench-c", "paper-a", "paper-b", "source-balanced"]
    assert table.rows[-1][2] == f"{validation.mape_pct:.1f}"
    assert bars.series[0].values == pytest.approx([20.0, 5.0, 10.0])
    names = {t.name for p in scatter.panels for t in p.traces}
    assert {"y = x", "±10%", "±25%", "paper-a", "bench-c"} <= names
    assert report.headlines[0].value == f"{validation.mape_pct:.1f}%"


def test_geo_report_matches_the_planner(geo_report) -> None:
    report = build_geo(geo_report)
    kinds = [type(f).__name__ for f in report.figures]
    assert kinds == ["Bars", "Bars", "Table", "XY", "Bars", "XY"]
    bt = geo_report.bubbletea
    # GPU utilisation over the whole horizon averages to BubbleTea's numbers
    _, train, prefill = utilisation_series(geo_report, steps=None)
    assert sum(train) / len(train) == pytest.approx(bt.utilisation_training, rel=1e-6)
    assert (sum(train) + sum(prefill)) / len(train) == pytest.approx(bt.utilisation, rel=1e-6)
    # WAN busy time over a step averages to the link utilisation the planner reports (Atlas: activations only)
    from paraplan.geo.geosim import simulate_geo

    atlas = geo_report.atlas
    _, series = wan_busy_series(simulate_geo(atlas.plan, geo_report.geo, record_events=True))
    for link, busy in series.items():
        assert sum(busy) / len(busy) == pytest.approx(atlas.sim.link_busy_s[link] / atlas.step_time_s, rel=1e-6)
    placements = report.figures[0]
    assert placements.categories[2].startswith("Atlas")
    step_ms = placements.series[0].values
    assert step_ms[2] == min(step_ms[:3])  # Atlas beats DP across and PP across
