"""Collectives on a tiered network: scale-up domain (NVLink/xGMI) and scale-out fabric (IB/RoCE).

Alpha-beta models per algorithm (Thakur et al. 2005; NCCL's ring and tree): a ring all-reduce of S
bytes over n ranks moves 2(n-1)/n * S per rank; all-gather and reduce-scatter (n-1)/n * S. A group
that spans several scale-up domains runs hierarchically: inside each domain over NVLink, across
domains over the k NICs of the domain's members in parallel (NCCL's rings and trees pair each GPU with the
same local rank on other nodes), so the inter-node part carries S/k per NIC. The scale-out tier is one
non-blocking fabric in which every NIC runs at its line rate: a rail-optimised fabric (same local rank, same
leaf switch) and a full-bisection fat tree give the same bandwidth, and the model has no oversubscription or
switch-hop term that would tell them apart (`SystemSpec` has no rail field for that reason). Bandwidth
efficiency grows with message size: eff(S) = S / (S + S_half).

Group placement follows Megatron-core's rank order (tp, cp, [ep], dp, pp from fastest varying): a
group of `size` ranks with `stride` between members puts min(size, gpus_per_node // stride) of them in
one scale-up domain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from paraplan.cost.calibration import Calibration
from paraplan.graph.ops import CommKind
from paraplan.specs.system import SystemSpec


class Modelled(StrEnum):
    """Why a collective was timed by this model rather than measured (`cost.collectives`: a fitted profile's
    measurement applies only where it was taken)."""

    NO_PROFILE = "no profile"
    OTHER_GPU = "other GPU"  # the profile was measured on another chip
    NO_SAMPLES = "no samples"  # the profile has no regressor of this collective (or of a routed MoE dispatch)
    OTHER_SYSTEM = "other system"  # measured on nodes with another number of GPUs
    OTHER_TIER = "other tier"  # no regressor for this group's placement (domains x members per domain)
    OUT_OF_RANGE = "out of range"  # the message lies outside the sampled sizes


@dataclass(frozen=True, slots=True)
class GroupPlacement:
    size: int
    per_node: int  # members that share one scale-up domain
    nodes: int  # scale-up domains the group spans


def place_group(size: int, stride: int, gpus_per_node: int) -> GroupPlacement:
    if size <= 1:
        return GroupPlacement(1, 1, 1)
    per_node = 1 if stride >= gpus_per_node else max(1, min(size, gpus_per_node // stride))
    return GroupPlacement(size, per_node, math.ceil(size / per_node))


def _bw(nbytes: float, bytes_per_s: float, eff: float, half: float) -> float:
    """Seconds to move `nbytes` at `bytes_per_s` with size-dependent efficiency."""
    if nbytes <= 0:
        return 0.0
    return nbytes / (bytes_per_s * eff * nbytes / (nbytes + half))


def hit_probability(experts: int, topk: int, share: int) -> float:
    """Probability that a token's top-k experts, drawn uniformly without repetition from `experts` (balanced
    routing), include at least one of a given `share` of them: 1 - C(E - share, k) / C(E, k)."""
    miss = 1.0
    for i in range(min(topk, experts)):
        miss *= max(0.0, (experts - share - i) / (experts - i))
    return 1.0 - miss


def _flex_dispatch_bytes(nbytes: float, routing: tuple[int, int], group: GroupPlacement) -> tuple[float, float]:
    """(NVLink, network) bytes one rank sends in a deduplicating token dispatch (DeepEP, HybridEP): one copy of a
    token per destination rank in its node; across nodes one copy per destination node, sent over RDMA to the
    GPU of the same local index there, which forwards it over NVLink (deepseek-ai/DeepEP README, 2025: the
    internode "normal" kernels). Averaged over ranks, each GPU forwards what it receives, so NVLink carries a
    node's share for every node. `nbytes` counts one copy per chosen expert (the alltoall dispatcher's volume)."""
    experts, topk = routing
    n, k, nodes = group.size, group.per_node, group.nodes
    token_bytes = nbytes / topk
    rank_hit = hit_probability(experts, topk, max(1, experts // n))
    node_hit = hit_probability(experts, topk, max(1, experts * k // n))
    return token_bytes * (k - 1) * rank_hit * nodes, token_bytes * (nodes - 1) * node_hit


def collective_time_s(
    kind: CommKind,
    nbytes: float,
    group: GroupPlacement,
    system: SystemSpec,
    cal: Calibration,
    routing: tuple[int, int] | None = None,
) -> float:
    """Time of one collective. `nbytes`: the full buffer (all-reduce, all-gather output, reduce-scatter
    input); for all-to-all the bytes one rank sends; for send/recv the message. `routing`: (experts, top-k)
    of a deduplicating MoE token dispatch (an all-to-all of Megatron's flex dispatcher)."""
    n = group.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    k, nodes = group.per_node, group.nodes
    up_bw, up_eff, up_lat = system.scale_up_bytes_per_s, cal.scale_up_efficiency, system.scale_up_latency_us * 1e-6
    net_bw, net_eff, net_lat = system.nic_bytes_per_s, cal.scale_out_efficiency, system.nic_latency_us * 1e-6
    half = cal.comm_half_bytes
    if kind is CommKind.SEND_RECV:
        if nodes == 1:
            return _bw(nbytes, up_bw, up_eff, half) + up_lat
        return _bw(nbytes, net_bw, net_eff, half) + net_lat
    if kind is CommKind.ALL_TO_ALL:
        if routing is None:
            intra_bytes, inter_bytes = nbytes * (k - 1) / n, nbytes * (n - k) / n
        else:
            intra_bytes, inter_bytes = _flex_dispatch_bytes(nbytes, routing, group)
        intra = _bw(intra_bytes, up_bw, up_eff, half / n)
        inter = _bw(inter_bytes, net_bw, net_eff, half / n) if nodes > 1 else 0.0
        lat = (n - 1) * (net_lat if nodes > 1 else up_lat) / max(1, min(n - 1, 8))
        return max(intra, inter) + lat
    passes = 2.0 if kind is CommKind.ALL_REDUCE else 1.0
    # inside the scale-up domain (the whole collective when nodes == 1)
    intra = passes * (k - 1) / k * _bw(nbytes, up_bw, up_eff, half) if k > 1 else 0.0
    intra_lat = passes * (k - 1) * up_lat
    if nodes == 1:
        return intra + intra_lat
    # across domains: each of the k members carries 1/k of the buffer over its own NIC
    inter = passes * (nodes - 1) / nodes * _bw(nbytes / k, net_bw, net_eff, half / k)
    if kind is CommKind.ALL_REDUCE:  # NCCL switches to (double binary) trees at scale: log latency
        inter_lat = 2 * min(nodes - 1, 2 * math.ceil(math.log2(nodes))) * net_lat
    else:  # all-gather and reduce-scatter are rings only: n - 1 steps, each paced by the slowest hop
        inter_lat = (n - 1) * net_lat
    return intra + intra_lat + inter + inter_lat
