"""What the agent reads before it proposes: the projection's breakdown of the incumbent, its memory, its stages.

`diagnose` projects a training spec once with the named parts of the step (`sim.breakdown.BreakdownPart`: they
sum to the step time), the per-GPU memory model's verdict, and, with a pipeline, each model stage's busy time per
micro-batch (`projection.stage_costs`) and each decoder layer's, which the layout rule balances.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from paraplan.cost.calibration import calibration_for
from paraplan.graph.partition import VirtualStage
from paraplan.memory.model import GIB
from paraplan.projection import ProjectionOptions, project_specs, stage_costs
from paraplan.result import Projection
from paraplan.sim.breakdown import BreakdownPart
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.tune.candidate import TuneProblem


@dataclass(frozen=True)
class LayerCosts:
    """Busy seconds per micro-batch (forward + both backward halves) of each decoder layer alone on a stage, and
    what the embedding (first stage) and the head, loss and MTP modules (last stage) add."""

    layers_s: tuple[float, ...]
    embedding_s: float
    head_s: float

    def stage_s(self, layout: tuple[int, ...]) -> tuple[float, ...]:
        """Busy seconds of each model stage under a layout (decoder layers per stage, in model order)."""
        out, start = [], 0
        for index, count in enumerate(layout):
            busy = sum(self.layers_s[start : start + count])
            busy += self.embedding_s if index == 0 else 0.0
            busy += self.head_s if index == len(layout) - 1 else 0.0
            out.append(busy)
            start += count
        return tuple(out)


@dataclass(frozen=True)
class Diagnosis:
    """One projected configuration as the agent sees it."""

    model: ModelSpec
    system: SystemSpec
    train: TrainingSpec
    """Resolved by the validator (dp filled in)."""
    projection: Projection

    @property
    def step_time_s(self) -> float:
        return self.projection.step_time_s

    @property
    def parts(self) -> dict[str, float]:
        """Seconds per named part of the step (`BreakdownPart` values as keys)."""
        return {str(k): v for k, v in self.projection.breakdown.items()}

    def share(self, *parts: BreakdownPart) -> float:
        """The named parts' fraction of the step."""
        found = self.parts
        return sum(max(0.0, found.get(str(p), 0.0)) for p in parts) / self.step_time_s

    def seconds(self, *parts: BreakdownPart) -> float:
        found = self.parts
        return sum(max(0.0, found.get(str(p), 0.0)) for p in parts)

    @property
    def peak_gib(self) -> float:
        return self.projection.memory.peak_gib

    @property
    def usable_gib(self) -> float:
        return self.projection.memory.usable_bytes / GIB

    @property
    def fits(self) -> bool:
        return self.projection.memory.fits

    @property
    def headroom_gib(self) -> float:
        """Usable HBM left at the peak (negative: over by that much)."""
        return self.projection.memory.headroom_bytes / GIB

    @property
    def headroom_share(self) -> float:
        return self.headroom_gib / self.usable_gib

    @cached_property
    def layer_costs(self) -> LayerCosts | None:
        """Per-layer busy times (None without a pipeline: nothing to balance)."""
        if self.train.pp == 1:
            return None
        return layer_costs(self.model, self.system, self.train)

    @cached_property
    def layout(self) -> tuple[int, ...]:
        """Decoder layers per model stage, in model order, as the spec splits them."""
        from paraplan.graph.partition import layers_per_virtual_stage

        return tuple(layers_per_virtual_stage(self.model, self.train))

    @cached_property
    def stage_busy_s(self) -> tuple[float, ...]:
        costs = self.layer_costs
        return () if costs is None else costs.stage_s(self.layout)

    def summary(self) -> dict[str, object]:
        """The figures a proposer is shown (the LLM prompt, the log)."""
        return {
            "step_time_s": round(self.step_time_s, 4),
            "breakdown_s": {k: round(v, 4) for k, v in self.parts.items() if abs(v) >= 1e-5},
            "memory": {
                "peak_gib": round(self.peak_gib, 2),
                "usable_gib": round(self.usable_gib, 2),
                "fits": self.fits,
            },
            "microbatches": self.train.num_microbatches,
            "stage_layers": list(self.layout) if self.train.pp > 1 else None,
            "stage_busy_s_per_microbatch": [round(s, 5) for s in self.stage_busy_s] or None,
        }


def projection_options(problem: TuneProblem, train: TrainingSpec) -> ProjectionOptions:
    system = problem.systems[0]
    return ProjectionOptions(
        calibration=calibration_for(system.gpu.name, train.framework), profile=problem.profile, breakdown=True
    )


def diagnose(problem: TuneProblem, train: TrainingSpec) -> Diagnosis:
    """Project a spec with its breakdown (raises ConfigError when the validator refuses it)."""
    system = problem.systems[0]
    projection = project_specs(problem.model, system, train, projection_options(problem, train))
    return Diagnosis(problem.model, system, projection.train, projection)


def layer_costs(model: ModelSpec, system: SystemSpec, train: TrainingSpec) -> LayerCosts:
    """Each decoder layer's busy seconds as a stage of its own, at the spec's shard shapes (`stage_costs`;
    equal layers are costed once by its cache), and the embedding's and head's extra."""
    n = model.num_layers
    singles = tuple(VirtualStage(i, i, 1, False, False) for i in range(n))
    edges = (VirtualStage(0, 0, 1, True, False), VirtualStage(n - 1, n - 1, 1, False, True))
    costs = stage_costs(model, system, train, singles + edges)
    layers = tuple(c.busy_s for c in costs[:n])
    return LayerCosts(layers, costs[n].busy_s - layers[0], costs[n + 1].busy_s - layers[-1])
