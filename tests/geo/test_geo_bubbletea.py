"""BubbleTea: request streams, the prefill cost model, placement inside bubbles, the no-slowdown check."""

from dataclasses import replace

import numpy as np
import pytest

from paraplan.geo.bubbletea import BubbleTeaSettings, idle_intervals, run_bubbletea
from paraplan.geo.prefill import PrefillModel, prefill_time_s
from paraplan.geo.requests import poisson_stream, read_trace, trace_stream
from paraplan.specs.presets import model_preset, system_preset

H100 = system_preset("h100-sxm5-80gb", 8)
LLAMA8B = model_preset("llama3.1-8b")


def test_poisson_stream_is_deterministic_and_has_its_rate():
    a = poisson_stream(500.0, 20.0, seed=11)
    b = poisson_stream(500.0, 20.0, seed=11)
    c = poisson_stream(500.0, 20.0, seed=12)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.arrival_s, c.arrival_s[: a.count])
    assert abs(a.count - 10_000) < 5 * 100  # Poisson: sd = sqrt(10,000)
    assert np.all(np.diff(a.arrival_s) >= 0) and a.arrival_s[-1] < 20.0
    assert a.prompt_tokens.min() >= 16 and a.prompt_tokens.max() <= 8192
    assert np.median(a.prompt_tokens) == pytest.approx(1020, rel=0.05)  # conv-trace-like lengths


def test_azure_traces_are_read_with_their_crlf_and_timestamps(traces):
    for name, rows, rate, first in (("conv", 19_366, 5.53, 374), ("code", 8_819, 2.57, 4808)):
        arrivals, prompts = read_trace(traces / f"AzureLLMInferenceTrace_{name}.csv")
        assert arrivals.size == prompts.size == rows
        assert arrivals[0] == 0.0 and np.all(np.diff(arrivals) >= 0)
        assert rows / arrivals[-1] == pytest.approx(rate, abs=0.01)  # the README's mean arrival rates
        assert prompts[0] == first
    conv = trace_stream("conv", 10.0, rate_per_s=1000.0)
    assert conv.rate_per_s == pytest.approx(1000.0, rel=0.1)


def test_prefill_time_comes_from_the_cost_model():
    times = [prefill_time_s(LLAMA8B, H100, 1, n) for n in (64, 256, 1024, 4096)]
    assert times == sorted(times)
    flops = 2 * 7.5e9 * 4096  # 2 * parameters * tokens, attention aside
    assert flops / 989e12 < times[-1] < 4 * flops / 989e12
    assert prefill_time_s(LLAMA8B, H100, 8, 4096) < times[-1]  # TP 8 is faster
    model = PrefillModel(LLAMA8B, H100, 1)
    tokens = np.array([1, 64, 65, 1000])
    assert model.times_s(tokens)[0] == model.times_s(tokens)[1] < model.times_s(tokens)[2]  # 64-token buckets
    assert model.times_s(tokens)[3] == pytest.approx(model.time_s(1000))


def test_every_prefill_sits_inside_a_bubble_of_its_stage(tiny_report):
    bt, sim = tiny_report.bubbletea, tiny_report.atlas.sim
    assert bt.admitted > 0
    for p in bt.placed:
        start = p.start_s - p.step * sim.step_time_s
        gaps = idle_intervals(sim, bt.lane_slots[p.lane])
        assert any(a - 1e-12 <= start and start + p.reserved_s <= b + 1e-12 for a, b in gaps), p
        assert p.actual_s <= p.reserved_s
    assert (bt.ttft_s > 0).all() and (bt.ttft_s <= tiny_report.config.bubbletea.max_ttft_s + 1e-9).all()
    shares = bt.to_dict()["gpu_time_shares"]
    assert sum(shares.values()) == pytest.approx(1.0)


def test_a_prediction_error_beyond_the_guard_band_is_caught(tiny_report):
    sim, geo = tiny_report.atlas.sim, tiny_report.geo
    stream = poisson_stream(300.0, 3.0, seed=5)
    settings = BubbleTeaSettings(guard_fraction=0.0, guard_s=0.0, prediction_error=0.25, serving_tp=1)
    bad = run_bubbletea(sim, geo, tiny_report.atlas.memory, LLAMA8B, stream, settings)
    assert bad.admitted > 0
    assert not bad.check.unchanged
    assert bad.check.local_overrun_s > 0 and bad.check.max_job_delay_s > 0
    good = run_bubbletea(sim, geo, tiny_report.atlas.memory, LLAMA8B, stream, replace(settings, guard_fraction=0.3))
    assert good.check.unchanged


def test_trace_driven_stream_on_the_tiny_plan(tiny_report, traces):
    stream = trace_stream("conv", 4.0, rate_per_s=200.0)
    result = run_bubbletea(
        tiny_report.atlas.sim, tiny_report.geo, tiny_report.atlas.memory, LLAMA8B, stream, BubbleTeaSettings()
    )
    assert result.admitted > 0.8 * result.requests
    assert result.check.unchanged
    assert result.utilisation > result.utilisation_training


def test_a_serving_model_that_does_not_fit_is_kept_out(tiny_report):
    stream = poisson_stream(100.0, 2.0, seed=1)
    huge = model_preset("llama3.1-405b")
    result = run_bubbletea(
        tiny_report.atlas.sim, tiny_report.geo, tiny_report.atlas.memory, huge, stream, BubbleTeaSettings()
    )
    assert result.lanes == 0 and result.admitted == 0
    assert result.excluded and all("GiB" in line for line in result.excluded)
    assert result.utilisation == pytest.approx(result.utilisation_training)
