"""WAN transfer model: one flow is window/RTT (or loss) bound, k flows reach min(k x per-flow, link)."""

import math

import pytest

from paraplan.geo.wan import (
    WanLink,
    loss_limited_gbps,
    per_flow_gbps,
    rate_gbps,
    ring_allreduce_s,
    transfer_time_s,
)

LINK = WanLink("a", "b", bandwidth_gbps=100.0, rtt_ms=40.0, per_flow_gbps=4.0, max_flows=16)


def test_one_flow_is_window_over_rtt():
    # DESIGN.md section 11: 16 MiB at 50 ms is about 2.7 Gb/s
    assert per_flow_gbps(50.0, 16.0) == pytest.approx(16 * 2**20 * 8 / 0.05 / 1e9)
    assert per_flow_gbps(50.0, 16.0) == pytest.approx(2.68, abs=0.01)


def test_loss_bound_mathis():
    assert loss_limited_gbps(1e-4, 0.05) == pytest.approx(math.sqrt(1.5) * 1460 * 8 / (0.05 * 0.01) / 1e9)
    assert per_flow_gbps(50.0, 16.0, loss_rate=1e-4) == pytest.approx(loss_limited_gbps(1e-4, 0.05))
    assert loss_limited_gbps(0.0, 0.05) == math.inf


@pytest.mark.parametrize(("flows", "gbps"), [(1, 4.0), (10, 40.0), (25, 64.0), (16, 64.0), (1000, 64.0)])
def test_parallel_flows_add_until_capped(flows, gbps):
    # 16 flows allowed: 16 x 4 = 64 Gb/s < 100 Gb/s link
    assert LINK.aggregate_gbps(flows) == pytest.approx(gbps)


def test_parallel_flows_stop_at_the_link():
    link = WanLink("a", "b", 100.0, 40.0, 4.0, max_flows=64)
    assert link.aggregate_gbps(24) == pytest.approx(96.0)
    assert link.aggregate_gbps(25) == pytest.approx(100.0)
    assert link.aggregate_gbps(64) == pytest.approx(100.0)
    assert link.saturating_flows == 25


def test_spatial_splits_temporal_takes_the_whole_link():
    assert rate_gbps(LINK, 16, "temporal", 8) == pytest.approx(64.0)
    assert rate_gbps(LINK, 16, "spatial", 8) == pytest.approx(8.0)
    nbytes = 1e9
    assert transfer_time_s(nbytes, LINK, 16, "temporal", 8) == pytest.approx(8e9 / 64e9 + 0.02)
    assert transfer_time_s(nbytes, LINK, 16, "spatial", 8) == pytest.approx(8e9 / 8e9 + 0.02)


def test_ring_allreduce_two_datacenters():
    # two datacenters: 2 steps of half the buffer each way, each paying one one-way delay
    assert ring_allreduce_s(1e9, [LINK, LINK], 16) == pytest.approx(2 * (0.5e9 * 8 / 64e9 + 0.02))
    assert ring_allreduce_s(1e9, [LINK], 16) == 0.0
