"""The geo planner: a config in, the placements side by side, the what-if tables and BubbleTea out."""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.errors import ConfigError
from paraplan.geo.bubbletea import BubbleTeaResult, BubbleTeaSettings, run_bubbletea
from paraplan.geo.config import GeoConfig
from paraplan.geo.placements import (
    Evaluated,
    PlacementOutcome,
    choose,
    dp_candidates,
    pipeline_options,
    pp_candidates,
    tp_options,
)
from paraplan.geo.plan import PLACEMENT_TITLES
from paraplan.geo.prefill import serving_weight_bytes
from paraplan.geo.requests import stream_from_config
from paraplan.geo.stages import TrainSetup
from paraplan.geo.topology import GeoSystem, build_geo_system
from paraplan.geo.whatif import (
    FlowRow,
    SelectionRow,
    SharingRow,
    flow_sweep,
    select_datacenters,
    sharing_sweep,
)
from paraplan.memory.model import GIB
from paraplan.specs.model import ModelSpec


def _resolve_model(name: str, field: str, where: str) -> ModelSpec:
    from paraplan.api import resolve_model

    try:
        return resolve_model(name)
    except ConfigError as exc:
        raise ConfigError([f"{where}: field '{field}': {p}" for p in exc.problems]) from None


def setup_from_config(cfg: GeoConfig, where: str = "config") -> TrainSetup:
    return TrainSetup(model=_resolve_model(cfg.model, "model", where), train=cfg.training.to_spec())


def _precision_problems(setup: TrainSetup, geo: GeoSystem, where: str) -> list[str]:
    return [
        f"{where}: field 'training.precision' {setup.precision} is not supported by datacenter '{dc.name}' "
        f"({dc.system.gpu.name})"
        for dc in geo.datacenters
        if not dc.system.gpu.supports(setup.precision)
    ]


@dataclass(frozen=True)
class GeoReport:
    config: GeoConfig
    setup: TrainSetup
    geo: GeoSystem
    placements: dict[str, PlacementOutcome]
    """"dp-across", "pp-across" (all datacenters, baseline flows) and "atlas" (the best datacenter subset)."""
    atlas_all: PlacementOutcome
    """Atlas on every datacenter (the selection may drop some)."""
    ablations: dict[str, PlacementOutcome]
    """The baselines with Atlas's flows, to split its gain into more flows and temporal sharing."""
    selection: tuple[SelectionRow, ...]
    flows: tuple[FlowRow, ...]
    sharing: tuple[SharingRow, ...]
    bubbletea: BubbleTeaResult | None

    @property
    def atlas(self) -> Evaluated:
        best = self.placements["atlas"].best
        assert best is not None
        return best

    def speedup_over_dp(self, kind: str) -> float | None:
        dp, other = self.placements["dp-across"].best, self.placements[kind].best
        if dp is None or other is None:
            return None
        return dp.step_time_s / other.step_time_s

    def to_dict(self) -> dict:
        return report_dict(self)


STATE_BYTES_PER_PARAM = 18  # bf16 weights 2 + fp32 main grads 4 + fp32 master weights and Adam moments 12


def _total_memory_hint(setup: TrainSetup, geo: GeoSystem) -> str:
    """Why nothing fits: the model states alone against all the memory there is, or a hint."""
    params = serving_weight_bytes(setup.model, 1) / 2
    need = params * STATE_BYTES_PER_PARAM
    have = sum(dc.gpus * dc.system.gpu.hbm_bytes for dc in geo.datacenters)
    if need > have:
        return (
            f"{setup.model.name} ({params / 1e9:,.0f}B parameters) needs at least {need / GIB:,.0f} GiB for weights, "
            f"gradients and optimizer states ({STATE_BYTES_PER_PARAM} bytes per parameter); the {geo.num_gpus} GPUs "
            f"have {have / GIB:,.0f} GiB"
        )
    return "no layout fits in memory: add GPUs, set training.recompute to full, or shorten training.seq"


def plan_geo(cfg: GeoConfig, where: str = "config") -> GeoReport:
    """Compare the placements of the job in `cfg`; raise ConfigError if none can run it."""
    setup = setup_from_config(cfg, where)
    geo = build_geo_system(cfg, where)
    problems = _precision_problems(setup, geo, where)
    tps = tp_options(setup, geo, cfg.placements.tp)
    if not tps:
        problems.append(
            f"{where}: no tensor-parallel size fits: tried {cfg.placements.tp or [1, 2, 4, 8]}; "
            f"{setup.model.name} has {setup.model.num_attention_heads} heads and {setup.model.kv_groups} KV groups"
        )
    pipelines = pipeline_options(setup, cfg.placements.pipelines)
    if not pipelines:
        problems.append(f"{where}: field 'placements.pipelines' {cfg.placements.pipelines}: none divides gbs/mbs")
    if problems:
        raise ConfigError(problems)
    pc = cfg.placements
    base_flows = pc.baseline_flows
    atlas_flows = pc.atlas_flows or max((lk.max_flows for lk in geo.links), default=1)
    top = pc.simulate_top
    dp = choose("dp-across", dp_candidates(setup, geo, tps, base_flows), setup, geo, top)
    pp = choose(
        "pp-across", pp_candidates(setup, geo, tps, pipelines, base_flows, "spatial", "pp-across"), setup, geo, top
    )
    selection: tuple[SelectionRow, ...] = ()
    if pc.select_datacenters:
        selection = select_datacenters(setup, geo, tps, pipelines, atlas_flows, top)
    full = [r for r in selection if set(r.datacenters) == set(geo.names)]
    if full:
        atlas_all = full[0].outcome
    else:
        plans = pp_candidates(setup, geo, tps, pipelines, atlas_flows, "temporal", "atlas")
        atlas_all = choose("atlas", plans, setup, geo, top)
    atlas = selection[0].outcome if selection and selection[0].outcome.best else atlas_all
    placements = {"dp-across": dp, "pp-across": pp, "atlas": atlas}
    ablations = {
        "dp-across": choose("dp-across", dp_candidates(setup, geo, tps, atlas_flows), setup, geo, top),
        "pp-across": choose(
            "pp-across", pp_candidates(setup, geo, tps, pipelines, atlas_flows, "spatial", "pp-across"), setup, geo, top
        ),
    }
    if atlas.best is None:
        lines = [f"{where}: the job cannot run on these datacenters:"]
        for kind, outcome in placements.items():
            lines += [f"{where}: {PLACEMENT_TITLES[kind]}: {p}" for p in outcome.problems]
        lines.append(f"{where}: {_total_memory_hint(setup, geo)}")
        raise ConfigError(lines)
    best = atlas.best
    flows = flow_sweep(best.plan, geo, pc.flow_sweep)
    sharing = sharing_sweep(setup, geo, best.plan, pc.pipeline_sweep)
    bubbletea = None
    if cfg.bubbletea is not None:
        bt = cfg.bubbletea
        serving = _resolve_model(bt.serving_model, "bubbletea.serving_model", where)
        settings = BubbleTeaSettings(
            guard_fraction=bt.guard_fraction,
            guard_s=bt.guard_s,
            max_ttft_s=bt.max_ttft_s,
            prediction_error=bt.prediction_error,
            lookahead=bt.lookahead,
            check_steps=bt.check_steps,
            serving_tp=bt.serving_tp,
        )
        bubbletea = run_bubbletea(best.sim, geo, best.memory, serving, stream_from_config(bt.stream), settings)
    return GeoReport(cfg, setup, geo, placements, atlas_all, ablations, selection, flows, sharing, bubbletea)


def _evaluated_dict(e: Evaluated | None, dp_step: float | None) -> dict | None:
    if e is None:
        return None
    plan, sim = e.plan, e.sim
    return {
        "layout": plan.describe(),
        "datacenters": list(plan.dc_order),
        "gpus": plan.num_gpus,
        "gpus_per_datacenter": plan.gpus_per_dc,
        "tp": plan.tp,
        "pp": plan.pp,
        "pipelines": plan.pipelines,
        "microbatches_per_pipeline": plan.microbatches,
        "layers_per_stage": [s.num_layers for s in plan.groups[0].stages],
        "tcp_flows_per_link": plan.flows,
        "sharing": plan.sharing if plan.placement != "dp-across" else None,
        "step_time_s": sim.step_time_s,
        "estimate_s": e.estimate_s,
        "tokens_per_s": sim.tokens_per_s,
        "speedup_vs_dp_across": dp_step / sim.step_time_s if dp_step else None,
        "breakdown_s": sim.breakdown_s,
        "wan_bytes_per_step": sim.link_bytes,
        "wan_link_utilisation": {k: v / sim.step_time_s for k, v in sim.link_busy_s.items()},
        "peak_memory_gib": max(m.peak_bytes for m in e.memory) / GIB,
    }


def report_dict(r: GeoReport) -> dict:
    dp_best = r.placements["dp-across"].best
    dp_step = dp_best.step_time_s if dp_best else None
    return {
        "model": r.setup.model.name,
        "training": {"seq": r.setup.seq, "mbs": r.setup.mbs, "gbs": r.setup.gbs, "schedule": r.setup.schedule},
        "datacenters": [{"name": dc.name, "gpu": dc.system.gpu.name, "gpus": dc.gpus} for dc in r.geo.datacenters],
        "wan": [
            {
                "between": [lk.a, lk.b],
                "bandwidth_gbps": lk.bandwidth_gbps,
                "rtt_ms": lk.rtt_ms,
                "per_flow_gbps": lk.per_flow_gbps,
                "max_flows": lk.max_flows,
                "saturating_flows": lk.saturating_flows,
            }
            for lk in r.geo.links
        ],
        "placements": {
            kind: {
                "title": PLACEMENT_TITLES[kind],
                "plan": _evaluated_dict(out.best, dp_step),
                "problems": list(out.problems),
                "candidates": out.considered,
            }
            for kind, out in r.placements.items()
        },
        "with_atlas_flows": {
            kind: {
                "title": f"{PLACEMENT_TITLES[kind]}, Atlas's flows",
                "plan": _evaluated_dict(out.best, dp_step),
                "problems": list(out.problems),
                "candidates": out.considered,
            }
            for kind, out in r.ablations.items()
        },
        "datacenter_selection": [
            {
                "datacenters": list(row.datacenters),
                "gpus_available": row.gpus_available,
                "step_time_s": row.step_time_s if row.outcome.best else None,
                "tokens_per_s": row.outcome.best.sim.tokens_per_s if row.outcome.best else None,
                "layout": row.outcome.best.plan.describe() if row.outcome.best else None,
                "problems": list(row.outcome.problems),
            }
            for row in r.selection
        ],
        "flow_sweep": [
            {
                "flows": f.flows,
                "aggregate_gbps": f.aggregate_gbps,
                "step_time_s": f.step_time_s,
                "saturated": f.link_saturated,
            }
            for f in r.flows
        ],
        "sharing_sweep": [
            {
                "pipelines": s.pipelines,
                "gpus": s.gpus,
                "spatial_step_s": s.spatial_step_s,
                "temporal_step_s": s.temporal_step_s,
                "temporal_gain": s.gain,
            }
            for s in r.sharing
        ],
        "bubbletea": r.bubbletea.to_dict() if r.bubbletea else None,
    }
