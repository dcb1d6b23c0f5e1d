"""Every collective of a projection is timed here: measured (a fitted profile's regressor) or modelled.

`timed_collective` is the one function the projection calls for a collective (TP/SP, CP, EP all-to-all, PP
send/recv, DP gradient reduction and parameter gather, FSDP): it asks the profile (`ProjectionOptions.profile`)
for a measured time and falls back to the analytic alpha-beta model (`cost.comm.collective_time_s`), and says
which it used ("measured:<regressor>" or "modelled:<why>", `Modelled`). The projection adds those up per parallel
axis and collective kind (`CollectiveSource`), so the breakdown says which collectives were measured.

When a measured collective applies (`measured_collective`): the operator-level method behind the shipped profiles
(arXiv 2509.22832) predicts communication from NCCL samples of the system it runs on, and a sample holds only for
the links it crossed. So:
- the GPU must be the profile's (the same chip: its NVLink generation and, in its usual server, its NIC class);
- the node must be the measured one: as many GPUs per node as the measured system had (the most GPUs per node of
  its collective topologies). The scale-up tier is a property of the node, not of the GPU alone: on Perlmutter's
  4-GPU A100 nodes two GPUs share 4 direct NVLinks, on an 8-GPU DGX A100 they reach each other through NVSwitch
  over all 12; the shipped A100 samples of a 2-GPU all-reduce take 3.0x the DGX model's time, those of a 4-GPU
  one (every link busy on both) 1.0x. Likewise the scale-out samples time the measured fabric, not the target's
  (Perlmutter's multi-node all-reduce and all-gather samples take 15-20x the DGX A100 model's time);
- the group must be placed as the samples were (the tier): `<kind>.<nodes>x<gpus per node>` times a group spread
  over `nodes` scale-up domains with that many members in each, so a regressor measured inside one NVLink domain
  applies to groups inside one domain of that size, and one measured across nodes to groups split the same way;
  a send/recv inside a domain is `send_recv.1x2`, across domains `send_recv.2x1`;
- the message must lie inside the sampled sizes (`cost.profile.OUT_OF_RANGE_FACTOR`), with no extrapolation.
Anything else is modelled. Collectives are not precision-bound: the bytes decide, whatever the samples' dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from paraplan.cost.calibration import Calibration
from paraplan.cost.comm import GroupPlacement, Modelled, collective_time_s
from paraplan.graph.ops import CommAxis, CommKind, CommShape
from paraplan.specs.system import SystemSpec

if TYPE_CHECKING:
    from paraplan.cost.profile import Profile

MEASURED = "measured"
MODELLED = "modelled"


class CollectiveTimer(Protocol):
    """A fitted profile that times collectives (`cost.profiled.ProfileRef`): (seconds, regressor) or why not."""

    def collective(
        self, comm: CommShape, group: GroupPlacement, system: SystemSpec
    ) -> tuple[float, str] | Modelled: ...


def measured_collective(
    profile: Profile, comm: CommShape, group: GroupPlacement, system: SystemSpec
) -> tuple[float, str] | Modelled:
    """The profile's time of one collective on `system` (seconds, regressor), or why the model applies (the rule in
    the module docstring)."""
    from paraplan.specs.presets import gpu_chip

    chip = gpu_chip(profile.gpu)
    if not chip or chip != gpu_chip(system.gpu.name):
        return Modelled.OTHER_GPU
    if not profile.has_collective(comm.kind) or comm.routing is not None:
        return Modelled.NO_SAMPLES
    if system.gpus_per_node != profile.measured_gpus_per_node:
        return Modelled.OTHER_SYSTEM
    if comm.kind is CommKind.SEND_RECV:
        nodes, per_node = (1, 2) if group.nodes == 1 else (2, 1)
    else:
        nodes, per_node = group.nodes, group.per_node
    answer = profile.collective(comm, nodes, per_node)
    return answer if isinstance(answer, Modelled) else (answer[1], answer[0])


def timed_collective(
    kind: CommKind,
    nbytes: float,
    group: GroupPlacement,
    system: SystemSpec,
    cal: Calibration,
    *,
    axis: CommAxis,
    routing: tuple[int, int] | None = None,
    timer: object | None = None,
) -> tuple[float, str]:
    """(seconds, source) of one collective: the fitted profile's measurement where it applies, else the analytic
    model (`cost.comm.collective_time_s`; `nbytes` and `routing` as there). `timer`: the projection's profile; one
    without collective samples (a plain op timer) leaves every collective modelled. Source: "measured:<regressor>"
    or "modelled:<why>" (`Modelled`); "" for a collective that takes no time (a group of one, an empty message)."""
    if group.size <= 1 or nbytes <= 0:
        return 0.0, ""
    lookup = getattr(timer, "collective", None)
    answer: tuple[float, str] | Modelled = Modelled.NO_PROFILE if timer is None else Modelled.NO_SAMPLES
    if lookup is not None:
        answer = lookup(CommShape(kind, axis, group.size, nbytes, routing), group, system)
    if isinstance(answer, Modelled):
        return collective_time_s(kind, nbytes, group, system, cal, routing), _MODELLED_SOURCE[answer]
    return answer[0], f"{MEASURED}:{answer[1]}"


# the modelled sources and the kinds' names, built once: an enum's `.value` is a property (issue 35)
_MODELLED_SOURCE = {why: f"{MODELLED}:{why.value}" for why in Modelled}
_KIND_VALUE = {kind: kind.value for kind in CommKind}


SourceKey = tuple[str, str, str]
"""(axis label, collective kind, source) of recorded collective time (`record`)."""


def record(into: dict[SourceKey, float], label: str, kind: CommKind, source: str, seconds: float) -> None:
    """Add `seconds` of a collective to `into` under its axis label ("tp", "dp", "fsdp", ...), kind and source."""
    if seconds > 0 and source:
        key = (label, _KIND_VALUE[kind], source)
        into[key] = into.get(key, 0.0) + seconds


def add_records(into: dict[SourceKey, float], other: Mapping[SourceKey, float], times: float = 1.0) -> None:
    for key, seconds in other.items():
        into[key] = into.get(key, 0.0) + seconds * times


@dataclass(frozen=True, slots=True)
class CollectiveSource:
    """One collective kind on one axis, measured or modelled, with its share of the axis's communication."""

    axis: str
    """The breakdown's communication label: "tp", "cp", "ep", "pp", "dp", "fsdp"."""
    collective: str
    """`CommKind` value: "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"."""
    measured: bool
    detail: str
    """The regressor that timed it ("all_reduce.1x2"), or why it was modelled (`Modelled`)."""
    time_s: float
    """Its part of the axis's communication total on the critical rank per step (`communication.total_s`)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "axis": self.axis,
            "collective": self.collective,
            "source": MEASURED if self.measured else MODELLED,
            "detail": self.detail,
            "time_s": self.time_s,
        }


def collective_sources(
    records: Mapping[SourceKey, float], comm_total_s: Mapping[str, float]
) -> tuple[CollectiveSource, ...]:
    """The recorded collectives per axis, kind and source, each scaled to its share of the axis's total on the
    critical rank (`records` weigh the collectives of one axis alike: per micro-batch, or per step)."""
    by_axis: dict[str, float] = {}
    for (label, _, _), seconds in records.items():
        by_axis[label] = by_axis.get(label, 0.0) + seconds
    out = []
    for (label, kind, source), seconds in records.items():
        total = comm_total_s.get(label)
        share = seconds if total is None else total * seconds / by_axis[label]
        origin, _, detail = source.partition(":")
        out.append(CollectiveSource(label, kind, origin == MEASURED, detail, share))
    return tuple(sorted(out, key=lambda s: (s.axis, s.collective, not s.measured, s.detail)))
