"""A closed-form step-time estimate of a geo placement, used only to rank candidates before simulating.

1F1B steady state runs one micro-batch per period, the largest of: the slowest stage (F + B + W); the busiest
WAN link direction (all N pipelines' transfers per micro-batch); and the round trip that 1F1B's in-flight
limit exposes: stage 0 holds at most p micro-batches, and one needs every stage's F and B plus every
boundary crossing twice, so period >= (sum of stage times + 2 * sum of crossing delays) / p. Fill and drain
add one full round trip: step ~ (m - 1) * period + round trip + gradient tail.
"""

from __future__ import annotations

from paraplan.geo.plan import GeoPlan, PipelineGroup
from paraplan.geo.topology import GeoSystem
from paraplan.geo.wan import rate_gbps, ring_allreduce_s, serialization_s
from paraplan.specs.schedule import schedule as schedule_named


def _group_pipeline_s(plan: GeoPlan, group: PipelineGroup, geo: GeoSystem) -> float:
    p, m, n = group.pp, plan.microbatches, group.count
    stage_s = [s.total_s for s in group.stages]
    delays, link_load = [], [0.0]
    for a, b in zip(group.stages, group.stages[1:], strict=False):
        if a.dc == b.dc:
            delays.append(a.p2p_intra_s)
            continue
        link = geo.link(a.dc, b.dc)
        if link is None:
            return float("inf")
        full = serialization_s(a.boundary_bytes, link.aggregate_gbps(plan.flows))
        own = serialization_s(a.boundary_bytes, rate_gbps(link, plan.flows, plan.sharing, n))
        load = n * full
        if plan.sharing == "temporal":  # mean wait behind the other pipelines' turns, when the link is busy
            own += (n - 1) / 2 * full * min(1.0, load / max(stage_s))
        delays.append(own + link.one_way_s)
        link_load.append(load)
    round_trip = sum(stage_s) + 2 * sum(delays)
    period = max(max(stage_s), max(link_load), round_trip / p)
    if schedule_named(plan.schedule).all_forwards_first:  # no in-flight bound: the round trip does not limit
        period = max(max(stage_s), max(link_load))
    return (m - 1) * period + round_trip


def estimate_step_s(plan: GeoPlan, geo: GeoSystem) -> float:
    pipeline = max(_group_pipeline_s(plan, g, geo) for g in plan.groups)
    tail = max(
        max(r + o + a for r, o, a in zip(g.grad_reduce_s, g.optimizer_s, g.param_gather_s, strict=True))
        for g in plan.groups
    )
    if plan.cross_dc_grad_bytes:
        order = plan.dc_order
        ring = [geo.link(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
        if any(link is None for link in ring):
            return float("inf")
        wan = sum(ring_allreduce_s(b, ring, plan.flows) for b in plan.cross_dc_grad_bytes)  # type: ignore[arg-type]
        tail += wan
    return pipeline + tail + plan.step_overhead_s
