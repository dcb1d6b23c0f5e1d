"""Multi-datacenter (geo-distributed) training: datacenters and WAN links, the placements (DP across, PP
across, Atlas), their simulation with WAN links as event-engine streams, datacenter selection, and BubbleTea
(inference prefill in the pipeline bubbles). Palak et al. 2024, "Training LLMs across geo-distributed
datacenters" (Microsoft Research), for Atlas and BubbleTea.

    from paraplan.geo import load_geo_config, plan_geo
    report = plan_geo(load_geo_config("examples/geo/two-datacenters.yaml"))
    report.atlas.step_time_s, report.speedup_over_dp("atlas"), report.bubbletea.utilisation
"""

from paraplan.geo.config import GeoConfig, load_geo_config, parse_geo_config
from paraplan.geo.geosim import GeoSimResult, simulate_geo
from paraplan.geo.planner import GeoReport, plan_geo
from paraplan.geo.topology import Datacenter, GeoSystem, build_geo_system
from paraplan.geo.wan import WanLink, per_flow_gbps, transfer_time_s

__all__ = [
    "Datacenter",
    "GeoConfig",
    "GeoReport",
    "GeoSimResult",
    "GeoSystem",
    "WanLink",
    "build_geo_system",
    "load_geo_config",
    "parse_geo_config",
    "per_flow_gbps",
    "plan_geo",
    "simulate_geo",
    "transfer_time_s",
]
