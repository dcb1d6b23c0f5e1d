"""Split the error of a step into its per-step and per-micro-batch parts.

A synchronous training step is linear in the number of micro-batches m that each pipeline runs:
step = per-step time + m x time per micro-batch. The per-step part is paid once (the pipeline's fill and drain, the
data-parallel gradient reduction, the optimizer, the framework's per-step work); the per-micro-batch part is the
slowest stage's forward and backward in the steady state (1F1B: Narayanan et al., SC'21, section 2.2). Runs that
share everything but the global batch (same model, GPUs, layout and micro-batch) therefore give both parts, measured
and projected, by a least-squares line through (m, step time); comparing them says which half of the model is wrong,
where one step-time error per row cannot (a per-step constant too large can hide a per-micro-batch time too small).

The time per micro-batch splits again over cells that differ only in the model's depth (same width, GPUs, layout,
micro-batch): the busiest pipeline rank runs its L/pp decoder layers and the rest of its stage (embedding, final
norm, LM head and loss, per-micro-batch framework work), so per micro-batch = rest + layers x time per layer. The two
lines, measured and projected, say whether the layers or the rest of the stage are mis-costed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from paraplan.validate.report import RowResult


@dataclass(frozen=True)
class CellFit:
    """One cell (runs that differ only in the global batch): both parts, measured and projected."""

    cell: str
    source: str
    runs: int
    microbatches: tuple[int, ...]
    measured_per_step_s: float
    measured_per_microbatch_s: float
    projected_per_step_s: float
    projected_per_microbatch_s: float
    measured_mean_step_s: float
    measured_residual_pct: float
    """Largest deviation of a measured step time from the measured line (0 for two runs): how linear the
    measurements are in the micro-batch count."""
    layers_per_rank: int = 0
    depth_cell: str = ""
    depth_key: tuple = field(default=(), repr=False, compare=False)

    @property
    def per_microbatch_error_pct(self) -> float:
        return 100.0 * (self.projected_per_microbatch_s / self.measured_per_microbatch_s - 1.0)

    @property
    def per_step_error_s(self) -> float:
        return self.projected_per_step_s - self.measured_per_step_s

    def to_dict(self) -> dict:
        out = asdict(self)
        del out["depth_key"]
        return {
            **out,
            "microbatches": list(self.microbatches),
            "per_microbatch_error_pct": self.per_microbatch_error_pct,
            "per_step_error_s": self.per_step_error_s,
        }


@dataclass(frozen=True)
class SourceSplit:
    """A source's cells summed up: where its step-time error comes from."""

    source: str
    cells: int
    runs: int
    per_microbatch_mape_pct: float
    per_microbatch_mean_error_pct: float
    per_step_mean_error_s: float
    per_step_mean_abs_error_s: float
    measured_per_step_share_pct: float
    """Mean over the cells of the measured per-step part's share of the cell's mean measured step time."""
    worst_measured_residual_pct: float

    def to_dict(self) -> dict:
        return asdict(self)


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through the points."""
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


@dataclass(frozen=True)
class _Lines:
    """The measured and the projected line through one group's points, and how far the measurements depart."""

    measured: tuple[float, float]  # (intercept, slope)
    projected: tuple[float, float]
    measured_mean: float
    residual_pct: float


def _groups(items: Iterable, key: Callable, x: Callable) -> list[tuple[list, list[int]]]:
    """Items grouped by `key` (falsy: left out), each group sorted by `x`, with its distinct x values; groups with
    fewer than two of them are dropped (a line needs two)."""
    groups: dict[tuple, list] = defaultdict(list)
    for item in items:
        k = key(item)
        if k:
            groups[k].append(item)
    out = []
    for members in groups.values():
        values = sorted({x(m) for m in members})
        if len(values) >= 2:
            out.append((members, values))
    return out


def _lines(xs: Sequence[float], measured: Sequence[float], projected: Sequence[float]) -> _Lines:
    x, y, p = np.array(xs, dtype=float), np.array(measured), np.array(projected)
    m_line = _line(x, y)
    residual = np.abs(y - (m_line[0] + m_line[1] * x)) / y
    return _Lines(m_line, _line(x, p), float(y.mean()), 100.0 * float(residual.max()))


def cell_fits(rows: Iterable[RowResult]) -> list[CellFit]:
    """One fit per cell of two or more runs with different micro-batch counts (rows without a cell are skipped:
    memory rows and rows whose run has no micro-batch count)."""
    fits = []
    for members, counts in _groups(rows, lambda r: r.cell_key if r.microbatches > 0 else (), lambda r: r.microbatches):
        members.sort(key=lambda r: (r.microbatches, r.id))
        lines = _lines(
            [r.microbatches for r in members],
            [r.measured_step_s for r in members],
            [r.predicted_step_s for r in members],
        )
        fits.append(
            CellFit(
                cell=members[0].cell,
                source=members[0].source,
                runs=len(members),
                microbatches=tuple(counts),
                measured_per_step_s=lines.measured[0],
                measured_per_microbatch_s=lines.measured[1],
                projected_per_step_s=lines.projected[0],
                projected_per_microbatch_s=lines.projected[1],
                measured_mean_step_s=lines.measured_mean,
                measured_residual_pct=lines.residual_pct,
                layers_per_rank=members[0].layers_per_rank,
                depth_cell=members[0].depth_cell,
                depth_key=members[0].depth_key,
            )
        )
    return sorted(fits, key=lambda f: (f.source, f.cell))


def by_source(fits: Sequence[CellFit]) -> list[SourceSplit]:
    """Per source: the per-micro-batch error (%) and the per-step error (seconds) over its cells."""
    grouped: dict[str, list[CellFit]] = defaultdict(list)
    for fit in fits:
        grouped[fit.source].append(fit)
    out = []
    for source, members in sorted(grouped.items()):
        micro = [f.per_microbatch_error_pct for f in members]
        step = [f.per_step_error_s for f in members]
        shares = [f.measured_per_step_s / f.measured_mean_step_s for f in members]
        out.append(
            SourceSplit(
                source=source,
                cells=len(members),
                runs=sum(f.runs for f in members),
                per_microbatch_mape_pct=float(np.mean(np.abs(micro))),
                per_microbatch_mean_error_pct=float(np.mean(micro)),
                per_step_mean_error_s=float(np.mean(step)),
                per_step_mean_abs_error_s=float(np.mean(np.abs(step))),
                measured_per_step_share_pct=100.0 * float(np.mean(shares)),
                worst_measured_residual_pct=max(f.measured_residual_pct for f in members),
            )
        )
    return out


@dataclass(frozen=True)
class DepthFit:
    """Cells that differ only in the model's depth: the time per micro-batch split into the busiest rank's layers
    and the rest of its stage, measured and projected."""

    cell: str
    source: str
    cells: int
    layers_per_rank: tuple[int, ...]
    measured_per_layer_s: float
    measured_rest_s: float
    projected_per_layer_s: float
    projected_rest_s: float
    measured_mean_microbatch_s: float
    measured_residual_pct: float
    """Largest deviation of a measured time per micro-batch from the measured line: how linear in the depth."""

    @property
    def per_layer_error_pct(self) -> float:
        return 100.0 * (self.projected_per_layer_s / self.measured_per_layer_s - 1.0)

    @property
    def rest_error_s(self) -> float:
        return self.projected_rest_s - self.measured_rest_s

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "layers_per_rank": list(self.layers_per_rank),
            "per_layer_error_pct": self.per_layer_error_pct,
            "rest_error_s": self.rest_error_s,
        }


@dataclass(frozen=True)
class DepthSplit:
    """A source's depth cells summed up: its time per micro-batch's error, per layer and in the rest of the stage."""

    source: str
    cells: int
    per_layer_mape_pct: float
    per_layer_mean_error_pct: float
    rest_mean_error_s: float
    rest_mean_abs_error_s: float
    measured_rest_share_pct: float
    """Mean over the cells of the measured rest's share of the cell's mean measured time per micro-batch."""

    def to_dict(self) -> dict:
        return asdict(self)


def depth_fits(fits: Iterable[CellFit]) -> list[DepthFit]:
    """One fit per group of cells that differ only in depth, with two or more layer counts on the busiest rank."""
    out = []
    for members, layers in _groups(
        fits, lambda f: f.depth_key if f.layers_per_rank > 0 else (), lambda f: f.layers_per_rank
    ):
        members.sort(key=lambda f: (f.layers_per_rank, f.cell))
        lines = _lines(
            [f.layers_per_rank for f in members],
            [f.measured_per_microbatch_s for f in members],
            [f.projected_per_microbatch_s for f in members],
        )
        out.append(
            DepthFit(
                cell=members[0].depth_cell,
                source=members[0].source,
                cells=len(members),
                layers_per_rank=tuple(layers),
                measured_per_layer_s=lines.measured[1],
                measured_rest_s=lines.measured[0],
                projected_per_layer_s=lines.projected[1],
                projected_rest_s=lines.projected[0],
                measured_mean_microbatch_s=lines.measured_mean,
                measured_residual_pct=lines.residual_pct,
            )
        )
    return sorted(out, key=lambda f: (f.source, f.cell))


def depth_by_source(fits: Sequence[DepthFit]) -> list[DepthSplit]:
    """Per source: the per-layer error (%) and the error of the rest of the stage (seconds) over its depth cells."""
    grouped: dict[str, list[DepthFit]] = defaultdict(list)
    for fit in fits:
        grouped[fit.source].append(fit)
    out = []
    for source, members in sorted(grouped.items()):
        layer = [f.per_layer_error_pct for f in members]
        rest = [f.rest_error_s for f in members]
        out.append(
            DepthSplit(
                source=source,
                cells=len(members),
                per_layer_mape_pct=float(np.mean(np.abs(layer))),
                per_layer_mean_error_pct=float(np.mean(layer)),
                rest_mean_error_s=float(np.mean(rest)),
                rest_mean_abs_error_s=float(np.mean(np.abs(rest))),
                measured_rest_share_pct=100.0
                * float(np.mean([f.measured_rest_s / f.measured_mean_microbatch_s for f in members])),
            )
        )
    return out
