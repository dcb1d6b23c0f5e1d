"""Datacenters and the WAN between them, as frozen values built from a validated config."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from paraplan.errors import ConfigError
from paraplan.geo.config import GeoConfig
from paraplan.geo.wan import WanLink, per_flow_gbps
from paraplan.specs.presets import system_preset
from paraplan.specs.system import SystemSpec


@dataclass(frozen=True, slots=True)
class Datacenter:
    name: str
    system: SystemSpec
    """GPU type, GPU count and the network inside the datacenter."""

    @property
    def gpus(self) -> int:
        return self.system.num_gpus


@dataclass(frozen=True, slots=True)
class GeoSystem:
    datacenters: tuple[Datacenter, ...]
    links: tuple[WanLink, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dc.name for dc in self.datacenters)

    @property
    def num_gpus(self) -> int:
        return sum(dc.gpus for dc in self.datacenters)

    def dc(self, name: str) -> Datacenter:
        for dc in self.datacenters:
            if dc.name == name:
                return dc
        raise KeyError(name)

    def link(self, a: str, b: str) -> WanLink | None:
        for link in self.links:
            if link.joins(a, b):
                return link
        return None

    def subset(self, names: Sequence[str]) -> GeoSystem:
        """The datacenters `names`, in that order, and the links among them."""
        chosen = set(names)
        return GeoSystem(
            tuple(self.dc(n) for n in names),
            tuple(lk for lk in self.links if lk.a in chosen and lk.b in chosen),
        )

    def is_chain(self, order: Sequence[str]) -> bool:
        """Whether consecutive datacenters of `order` are joined by a link."""
        return all(self.link(a, b) is not None for a, b in itertools.pairwise(order))

    def chains(self, names: Sequence[str], limit: int = 720) -> Iterator[tuple[str, ...]]:
        """Orders of `names` in which every consecutive pair has a link (a pipeline path), at most `limit`;
        a path and its reverse count once."""
        count = 0
        rank = {n: i for i, n in enumerate(names)}
        for order in itertools.permutations(names):
            if len(order) > 1 and rank[order[0]] > rank[order[-1]]:
                continue
            if self.is_chain(order):
                yield order
                count += 1
                if count >= limit:
                    return

    def ring(self, names: Sequence[str]) -> tuple[str, ...] | None:
        """An order of `names` whose consecutive pairs and last-to-first pair all have links (None if none);
        two datacenters form a ring over their one link."""
        if len(names) <= 2:
            return tuple(names) if len(names) < 2 or self.link(*names) is not None else None
        first, rest = names[0], names[1:]
        for perm in itertools.permutations(rest):
            order = (first, *perm)
            if self.is_chain(order) and self.link(order[-1], order[0]) is not None:
                return order
        return None

    def connected(self, names: Sequence[str]) -> bool:
        if not names:
            return False
        seen, todo = {names[0]}, [names[0]]
        while todo:
            x = todo.pop()
            for y in names:
                if y not in seen and self.link(x, y) is not None:
                    seen.add(y)
                    todo.append(y)
        return len(seen) == len(names)


def build_geo_system(cfg: GeoConfig, where: str = "config") -> GeoSystem:
    """Resolve GPU presets and per-flow rates; ConfigError lines name the field."""
    problems: list[str] = []
    dcs = []
    for i, dc in enumerate(cfg.datacenters):
        try:
            system = system_preset(dc.gpu, dc.gpus)
        except ConfigError as exc:
            problems += [f"{where}: field 'datacenters[{i}].gpu': {p}" for p in exc.problems]
            continue
        system = system.with_overrides(
            gpus_per_node=dc.gpus_per_node, nic_gbps=dc.nic_gbps, scale_up_gbps=dc.scale_up_gbps
        )
        dcs.append(Datacenter(dc.name, system))
    if problems:
        raise ConfigError(problems)
    links = []
    for link in cfg.wan:
        flow = link.per_flow_gbps or per_flow_gbps(link.rtt_ms, link.tcp_window_mib, link.loss_rate, link.mss_bytes)
        links.append(WanLink(link.between[0], link.between[1], link.bandwidth_gbps, link.rtt_ms, flow, link.max_flows))
    return GeoSystem(tuple(dcs), tuple(links))
