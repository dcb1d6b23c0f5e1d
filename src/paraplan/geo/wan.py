"""WAN transfers between datacenters: TCP flows, parallel flows, and how transfers share a link.

One TCP flow cannot fill a long fat pipe: it moves at most one congestion window per round trip,
window / RTT (16 MiB at 50 ms is about 2.7 Gb/s), and with packet loss p about
C * MSS / (RTT * sqrt(p)) with C = sqrt(3/2) (Mathis, Semke, Mahdavi, Ott 1997, "The macroscopic behavior
of the TCP congestion avoidance algorithm"). k parallel flows add up until the link is full:
min(k * per-flow, link) (the "multiple TCP connections" of Atlas: Palak et al. 2024, "Training LLMs across
geo-distributed datacenters", Microsoft Research).

Transfers that share a link either share it at once (spatial: each of n concurrent transfers gets 1/n of
the flows and of the link, so each takes n times longer) or take turns (temporal: one transfer at a time
uses every flow and the whole link, the others queue) — Atlas's temporal bandwidth sharing.
A transfer's time is its serialisation at the rate it gets plus the one-way propagation delay, RTT / 2
(light in fibre: about 5 us per km, DESIGN.md section 11).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Sharing = Literal["spatial", "temporal"]
SHARINGS: tuple[Sharing, ...] = ("spatial", "temporal")

MIB = 2**20
MATHIS_C = math.sqrt(1.5)  # Mathis et al. 1997, periodic-loss model constant
DEFAULT_MSS_BYTES = 1460  # Ethernet MTU 1500 - IPv4 and TCP headers


def window_limited_gbps(window_bytes: float, rtt_s: float) -> float:
    """One flow's ceiling set by its window: one window per round trip."""
    return window_bytes * 8 / rtt_s / 1e9


def loss_limited_gbps(loss_rate: float, rtt_s: float, mss_bytes: float = DEFAULT_MSS_BYTES) -> float:
    """One flow's ceiling set by packet loss (Mathis et al. 1997); infinite without loss."""
    if loss_rate <= 0:
        return math.inf
    return MATHIS_C * mss_bytes * 8 / (rtt_s * math.sqrt(loss_rate)) / 1e9


def per_flow_gbps(
    rtt_ms: float, window_mib: float, loss_rate: float = 0.0, mss_bytes: float = DEFAULT_MSS_BYTES
) -> float:
    """Throughput of one long-lived TCP flow: the lower of the window and loss ceilings."""
    rtt_s = rtt_ms / 1e3
    return min(window_limited_gbps(window_mib * MIB, rtt_s), loss_limited_gbps(loss_rate, rtt_s, mss_bytes))


@dataclass(frozen=True, slots=True)
class WanLink:
    """A datacenter-interconnect link between two datacenters, the same in both directions."""

    a: str
    b: str
    bandwidth_gbps: float
    """Link capacity per direction, Gb/s."""
    rtt_ms: float
    """Round-trip time, ms."""
    per_flow_gbps: float
    """Throughput one TCP flow reaches on this link (window/RTT or loss bound), Gb/s."""
    max_flows: int
    """Parallel TCP flows the link allows per direction (gateways, firewalls, NIC queues)."""

    @property
    def one_way_s(self) -> float:
        return self.rtt_ms / 2e3

    @property
    def saturating_flows(self) -> int:
        """Fewest flows that fill the link."""
        return max(1, math.ceil(self.bandwidth_gbps / self.per_flow_gbps - 1e-9))

    def joins(self, x: str, y: str) -> bool:
        return {self.a, self.b} == {x, y}

    def aggregate_gbps(self, flows: int) -> float:
        """What `flows` parallel flows reach together: min(k * per-flow, link), k capped at max_flows."""
        k = max(1, min(flows, self.max_flows))
        return min(k * self.per_flow_gbps, self.bandwidth_gbps)


def rate_gbps(link: WanLink, flows: int, sharing: Sharing, sharers: int) -> float:
    """Rate one transfer gets when `sharers` transfers use the link.

    Temporal: the transfer owns every flow and the link while it runs (the others wait their turn).
    Spatial: the flows and the link are split evenly, so each transfer gets 1/sharers of the aggregate."""
    total = link.aggregate_gbps(flows)
    return total if sharing == "temporal" else total / max(1, sharers)


def serialization_s(nbytes: float, gbps: float) -> float:
    """Seconds to push `nbytes` onto the wire at `gbps`."""
    return nbytes * 8 / (gbps * 1e9) if nbytes > 0 else 0.0


def transfer_time_s(nbytes: float, link: WanLink, flows: int, sharing: Sharing = "temporal", sharers: int = 1) -> float:
    """Time from the first byte sent to the last byte received for one transfer, without queueing."""
    return serialization_s(nbytes, rate_gbps(link, flows, sharing, sharers)) + link.one_way_s


def ring_allreduce_s(nbytes: float, ring: list[WanLink], flows: int) -> float:
    """Ring all-reduce of `nbytes` over the datacenters of `ring` (one link per hop): 2(D-1) steps of
    nbytes/D each, every hop paced by the slowest link, each step paying one one-way delay
    (Thakur et al. 2005; the WAN hop is the bottleneck of a hierarchical all-reduce)."""
    d = len(ring)
    if d < 2 or nbytes <= 0:
        return 0.0
    steps = 2 * (d - 1)
    slowest = min(link.aggregate_gbps(flows) for link in ring)
    return steps * (serialization_s(nbytes / d, slowest) + max(link.one_way_s for link in ring))
