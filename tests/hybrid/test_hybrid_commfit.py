"""The alpha-beta fit to collectives timed among local devices (no torch needed)."""

from __future__ import annotations

import pytest

from paraplan.cost.calibration import Calibration
from paraplan.cost.comm import GroupPlacement, collective_time_s
from paraplan.graph.ops import CommKind
from paraplan.measure.hybrid.collectives import CollectiveSample
from paraplan.measure.hybrid.commfit import fit_comm
from paraplan.measure.hybrid.timing import Stats
from paraplan.specs.presets import system_preset

SIZES = [2**p for p in range(14, 26, 2)]


def _samples(bytes_per_s: float, latency_s: float, world: int = 2, slow_all_reduce: float = 1.0):
    out = []
    for kind in (CommKind.ALL_REDUCE, CommKind.ALL_GATHER, CommKind.ALL_TO_ALL, CommKind.SEND_RECV):
        for n in SIZES:
            if kind is CommKind.SEND_RECV:
                t = n / bytes_per_s + latency_s
            elif kind is CommKind.ALL_TO_ALL:
                t = n * (world - 1) / world / bytes_per_s + latency_s
            else:
                passes = 2 if kind is CommKind.ALL_REDUCE else 1
                t = passes * (world - 1) * (n / world / bytes_per_s + latency_s)
                t *= slow_all_reduce if kind is CommKind.ALL_REDUCE else 1.0
            out.append(CollectiveSample(kind, world, float(n), Stats(t, t, t, 0.0, 5)))
    return out


def test_fit_recovers_bandwidth_and_latency():
    fit = fit_comm(_samples(2e9, 50e-6), "synthetic")
    assert fit is not None
    assert fit.bytes_per_s == pytest.approx(2e9, rel=1e-6)
    assert fit.latency_s == pytest.approx(50e-6, rel=1e-6)
    assert max(fit.error_by_kind.values()) < 1e-6


def test_applied_fit_drives_the_core_model():
    fit = fit_comm(_samples(1.5e9, 80e-6), "synthetic")
    system, cal = fit.apply(system_preset("h100-sxm5-80gb", 2), Calibration())
    assert system.scale_up_gbps == pytest.approx(1.5) and cal.scale_up_efficiency == 1.0
    group = GroupPlacement(size=2, per_node=2, nodes=1)
    for kind in (CommKind.ALL_REDUCE, CommKind.SEND_RECV):
        core = collective_time_s(kind, 8e6, group, system, cal)
        assert core == pytest.approx(fit.time_s(kind, 8e6, 2), rel=1e-3)


def test_weights_pull_the_fit_towards_the_kind_the_target_uses():
    samples = _samples(2e9, 50e-6, slow_all_reduce=2.0)  # gloo-like: all-reduce slower per byte
    plain = fit_comm(samples, "synthetic")
    weighted = fit_comm(samples, "synthetic", weight=lambda s: 20.0 if s.kind is CommKind.ALL_REDUCE else 1.0)
    assert weighted.error_by_kind["all_reduce"] < plain.error_by_kind["all_reduce"]


def test_no_samples_no_fit():
    assert fit_comm([], "none") is None
