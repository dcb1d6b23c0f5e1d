"""The multi-datacenter input file, validated with pydantic; every problem becomes one line naming its field.

```yaml
model: llama3.1-8b                  # preset name or a HuggingFace config.json path
training: {seq: 4096, mbs: 1, gbs: 256}
datacenters:
  - {name: west, gpu: h100-sxm5-80gb, gpus: 128}
  - {name: east, gpu: h100-sxm5-80gb, gpus: 128, nic_gbps: 400}
wan:
  - {between: [west, east], bandwidth_gbps: 200, rtt_ms: 40, tcp_window_mib: 16, max_flows: 64}
placements: {baseline_flows: 1}
bubbletea:                           # optional: fill pipeline bubbles with inference prefill
  serving_model: llama3.1-8b
  stream: {kind: poisson, rate_per_s: 400, duration_s: 20, seed: 1}
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from paraplan.errors import ConfigError
from paraplan.geo.wan import DEFAULT_MSS_BYTES
from paraplan.specs.schedule import DEFAULT_SCHEDULE, SCHEDULES
from paraplan.specs.training import TrainingSpec

GEO_TRAINING_FIELDS = {"schedule": "pipeline_schedule", "distributed_optimizer": "use_distributed_optimizer"}
"""The `training:` names that are not `TrainingSpec` fields or aliases -> the field (the rest are, `ALIASES`)."""

GEO_SCHEDULES = tuple(name for name, s in SCHEDULES.items() if s.chunks == 1 and not s.split_backward)
"""Schedules with one model chunk per rank (each datacenter then holds one contiguous run of stages) and the
backward in one piece (gpipe, 1f1b)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatacenterConfig(_Strict):
    name: str = Field(min_length=1)
    """Unique name the WAN links refer to."""
    gpu: str
    """GPU/system preset (`paraplan gpus`)."""
    gpus: int = Field(gt=0)
    """GPUs this datacenter can give the job (limited by what is free, or by its power budget)."""
    gpus_per_node: int | None = Field(default=None, gt=0)
    """Scale-up domain size override (default: the preset's)."""
    nic_gbps: float | None = Field(default=None, gt=0)
    """Scale-out bandwidth per GPU inside the datacenter, Gb/s (default: the preset's)."""
    scale_up_gbps: float | None = Field(default=None, gt=0)
    """NVLink/xGMI GB/s per GPU per direction (default: the preset's)."""


class WanLinkConfig(_Strict):
    between: tuple[str, str]
    """The two datacenters this link joins (both directions have the same capacity)."""
    bandwidth_gbps: float = Field(gt=0)
    """Capacity per direction, Gb/s (datacenter interconnects: 100 Gb/s to several Tb/s)."""
    rtt_ms: float = Field(gt=0)
    """Round-trip time, ms (same metro < 2, neighbouring regions 10-30, cross-continent 60-80)."""
    per_flow_gbps: float | None = Field(default=None, gt=0)
    """Measured throughput of one TCP flow; if absent, derived from the window, RTT and loss rate."""
    tcp_window_mib: float = Field(default=16.0, gt=0)
    """Largest TCP window (Linux net.ipv4.tcp_rmem max): one flow moves at most window / RTT."""
    loss_rate: float = Field(default=0.0, ge=0, lt=1)
    """Packet loss probability (Mathis et al. 1997 bound MSS / (RTT sqrt(p))); 0 ignores it."""
    mss_bytes: int = Field(default=DEFAULT_MSS_BYTES, gt=0)
    max_flows: int = Field(default=64, gt=0)
    """Parallel TCP flows allowed per direction."""


class TrainingConfig(_Strict):
    """The `training:` section: short names (`seq mbs gbs recompute sp` are `TrainingSpec` aliases; `schedule` and
    `distributed_optimizer` are this file's, `GEO_TRAINING_FIELDS`). `to_spec` is the only reader of it."""

    seq: int = Field(default=4096, gt=0)
    mbs: int = Field(default=1, gt=0)
    gbs: int = Field(gt=0)
    recompute: Literal["none", "selective", "full"] = "none"
    precision: str = "bf16"
    schedule: str = DEFAULT_SCHEDULE
    """One of GEO_SCHEDULES."""
    distributed_optimizer: bool = True
    sequence_parallel: bool = True
    """Applied whenever tp > 1."""
    framework: str = "megatron-lm"

    @field_validator("schedule")
    @classmethod
    def _geo_schedule(cls, value: str) -> str:
        if value not in GEO_SCHEDULES:
            raise ValueError(f"geo plays {' or '.join(GEO_SCHEDULES)} (one chunk per rank, the backward whole)")
        return value

    @field_validator("precision")
    @classmethod
    def _known_precision(cls, value: str) -> str:
        from paraplan.specs.training import PRECISIONS

        if value not in PRECISIONS:
            raise ValueError(f"unknown precision; choose one of {', '.join(PRECISIONS)}")
        return value

    def to_spec(self) -> TrainingSpec:
        """The core's training spec these settings make (tp, pp and dp are each placement's)."""
        values = self.model_dump()
        return TrainingSpec().with_values(**{GEO_TRAINING_FIELDS.get(k, k): v for k, v in values.items()})


class PlacementConfig(_Strict):
    baseline_flows: int = Field(default=1, gt=0)
    """TCP flows per link direction for the two baselines (DP across and PP across datacenters)."""
    atlas_flows: int | None = Field(default=None, gt=0)
    """TCP flows per link direction for Atlas (default: each link's max_flows)."""
    tp: list[int] | None = None
    """Tensor-parallel sizes to consider (default 1, 2, 4, 8 where the model and node allow)."""
    pipelines: list[int] | None = None
    """DP pipeline counts to consider (default: every divisor of gbs / mbs)."""
    flow_sweep: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128])
    """What-if: Atlas step time for these flow counts."""
    pipeline_sweep: list[int] | None = None
    """What-if: temporal vs spatial sharing for these pipeline counts (default 1, 2, 4, ... up to Atlas's)."""
    select_datacenters: bool = True
    """Evaluate every connected subset of datacenters for Atlas (what-if table) and keep the fastest."""
    simulate_top: int = Field(default=2, gt=0)
    """Candidates (ranked by the analytic estimate) that are simulated in full, per placement."""

    @field_validator("tp", "pipelines", "flow_sweep", "pipeline_sweep")
    @classmethod
    def _positive(cls, values: list[int] | None) -> list[int] | None:
        if values is not None and any(v < 1 for v in values):
            raise ValueError(f"every entry must be >= 1 (got {values})")
        return values


class StreamConfig(_Strict):
    kind: Literal["poisson", "trace"]
    rate_per_s: float | None = Field(default=None, gt=0)
    """Poisson: mean arrivals per second. Trace: rescale the trace's time axis to this mean rate."""
    rate_scale: float = Field(default=1.0, gt=0)
    """Trace: speed-up of the trace's time axis (2 = twice the arrivals per second)."""
    trace: str = "conv"
    """Trace: "conv", "code" (the Azure LLM inference traces under $PARAPLAN_SHARED/data/inference-traces)
    or a path to a CSV with the same columns."""
    start_s: float = Field(default=0.0, ge=0)
    """Trace: offset into the trace."""
    duration_s: float = Field(default=30.0, gt=0)
    """Length of the request stream to place, s."""
    prompt_tokens_mean: float = Field(default=1155.0, gt=0)
    """Poisson: mean prompt length (lognormal; defaults are the Azure conv trace's mean and median)."""
    prompt_tokens_median: float = Field(default=1020.0, gt=0)
    prompt_tokens_max: int | None = Field(default=None, gt=0)
    """Longest prompt (Poisson default 8192; traces are not clipped unless this is set)."""
    prompt_tokens_min: int = Field(default=16, gt=0)
    seed: int = 0


class BubbleTeaConfig(_Strict):
    serving_model: str
    """Model whose prefill runs in the bubbles (preset or config.json)."""
    serving_tp: int | None = Field(default=None, gt=0)
    """GPUs per prefill instance (default: the training TP of the stage)."""
    stream: StreamConfig
    guard_fraction: float = Field(default=0.10, ge=0)
    """Admit a request only if predicted time * (1 + guard_fraction) + guard_s fits the bubble."""
    guard_s: float = Field(default=0.001, ge=0)
    max_ttft_s: float = Field(default=2.0, gt=0)
    """A request not finished within this time of its arrival is left to the serving cluster."""
    prediction_error: float = Field(default=0.05, ge=-0.99)
    """Actual prefill time = predicted * (1 + prediction_error), used to check that training is untouched."""
    lookahead: int = Field(default=64, gt=0)
    """Queued requests a bubble may pick from (a short request may fill a bubble a long one cannot)."""
    check_steps: int = Field(default=4, gt=0)
    """Training steps re-simulated with their prefills inserted to check the step time is unchanged."""


class GeoConfig(_Strict):
    model: str
    training: TrainingConfig
    datacenters: list[DatacenterConfig] = Field(min_length=1)
    wan: list[WanLinkConfig] = Field(default_factory=list)
    placements: PlacementConfig = Field(default_factory=PlacementConfig)
    bubbletea: BubbleTeaConfig | None = None


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def pydantic_problems(exc: ValidationError, where: str) -> list[str]:
    lines = []
    for err in exc.errors():
        field = _loc(err["loc"])
        if err["type"] == "missing":
            lines.append(f"{where}: missing field '{field}'")
        elif err["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown field '{field}'")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: field '{field}': {msg} (got {err.get('input')!r})")
    return lines


def _preset_problems(data: dict, where: str) -> list[str]:
    """Unknown model and GPU presets, found on the raw mapping so they are reported with every other problem."""
    from paraplan.api import resolve_model
    from paraplan.specs.presets import gpu_preset_table

    problems = []
    checks: list[tuple[str, Any, Any]] = [("model", data.get("model"), resolve_model)]
    bubbletea = data.get("bubbletea")
    if isinstance(bubbletea, dict):
        checks.append(("bubbletea.serving_model", bubbletea.get("serving_model"), resolve_model))
    dcs = data.get("datacenters")
    for i, dc in enumerate(dcs if isinstance(dcs, list) else []):
        if isinstance(dc, dict):
            checks.append((f"datacenters[{i}].gpu", dc.get("gpu"), gpu_preset_table))
    for field, value, resolve in checks:
        if isinstance(value, str):
            try:
                resolve(value)
            except ConfigError as exc:
                problems += [f"{where}: field '{field}': {p}" for p in exc.problems]
    return problems


def reference_problems(data: dict, where: str) -> list[str]:
    """Cross-field rules pydantic cannot see, checked on the raw mapping (so they are reported even when a
    field is malformed): unique datacenter names, links between known, distinct datacenters, gbs % mbs."""
    problems = []
    dcs = data.get("datacenters")
    names = [dc.get("name") for dc in dcs if isinstance(dc, dict)] if isinstance(dcs, list) else []
    for name in sorted({n for n in names if isinstance(n, str) and names.count(n) > 1}):
        problems.append(f"{where}: datacenter name '{name}' appears {names.count(name)} times")
    wan = data.get("wan")
    seen: set[frozenset[str]] = set()
    for i, link in enumerate(wan if isinstance(wan, list) else []):
        between = link.get("between") if isinstance(link, dict) else None
        if not isinstance(between, list | tuple) or len(between) != 2:
            continue
        a, b = between
        for end in (a, b):
            if end not in names:
                known = ", ".join(str(n) for n in names)
                problems.append(f"{where}: field 'wan[{i}].between' names unknown datacenter '{end}' (known: {known})")
        if a == b:
            problems.append(f"{where}: field 'wan[{i}].between' joins '{a}' to itself")
        elif frozenset((a, b)) in seen:
            problems.append(f"{where}: field 'wan[{i}]' repeats the link {a}-{b}")
        seen.add(frozenset((a, b)))
    training = data.get("training")
    if isinstance(training, dict):
        gbs, mbs = training.get("gbs"), training.get("mbs", 1)
        if isinstance(gbs, int) and isinstance(mbs, int) and mbs > 0 and gbs > 0 and gbs % mbs:
            problems.append(f"{where}: field 'training.gbs' {gbs} must be divisible by training.mbs {mbs}")
    return problems


def parse_geo_config(data: Any, where: str = "config") -> GeoConfig:
    """Validate a mapping (already parsed YAML); raise ConfigError with one line per problem, all at once."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of settings at the top level (got {type(data).__name__})")
    problems: list[str] = []
    cfg = None
    try:
        cfg = GeoConfig.model_validate(data)
    except ValidationError as exc:
        problems += pydantic_problems(exc, where)
    problems += reference_problems(data, where) + _preset_problems(data, where)
    if problems or cfg is None:
        raise ConfigError(problems)
    return cfg


def load_geo_config(path: str | Path) -> GeoConfig:
    from paraplan.specs.files import read_yaml

    return parse_geo_config(read_yaml(path), str(path))
