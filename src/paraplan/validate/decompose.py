"""Split the error of a step into its per-step and per-micro-batch parts.

A synchronous training step is linear in the number of micro-batches m that each pipeline runs:
step = per-step time + m x time per micro-batch. The per-step part is paid once (the pipeline's fill and drain, the
data-parallel gradient reduction, the optimizer, the framework's per-step work); the per-micro-batch part is the
slowest stage's forward and backward in the steady state (1F1B: Narayanan et al., SC'21, section 2.2). Runs that
share everything but the global batch (same model, GPUs, layout and micro-batch) therefore give both parts, measured
and projected, by a least-squares line through (m, step time); comparing them says which half of the model is wrong,
where one step-time error per row cannot (a per-step constant too large can hide a per-micro-batch time too small).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

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

    @property
    def per_microbatch_error_pct(self) -> float:
        return 100.0 * (self.projected_per_microbatch_s / self.measured_per_microbatch_s - 1.0)

    @property
    def per_step_error_s(self) -> float:
        return self.projected_per_step_s - self.measured_per_step_s

    def to_dict(self) -> dict:
        return {
            **asdict(self),
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


def cell_fits(rows: Iterable[RowResult]) -> list[CellFit]:
    """One fit per cell of two or more runs with different micro-batch counts (rows without a cell are skipped:
    memory rows and rows whose run has no micro-batch count)."""
    cells: dict[tuple, list[RowResult]] = defaultdict(list)
    for r in rows:
        if r.cell_key and r.microbatches > 0:
            cells[r.cell_key].append(r)
    fits = []
    for members in cells.values():
        counts = sorted({r.microbatches for r in members})
        if len(counts) < 2:
            continue
        members.sort(key=lambda r: (r.microbatches, r.id))
        x = np.array([r.microbatches for r in members], dtype=float)
        measured = np.array([r.measured_step_s for r in members])
        projected = np.array([r.predicted_step_s for r in members])
        m_step, m_micro = _line(x, measured)
        p_step, p_micro = _line(x, projected)
        residual = np.abs(measured - (m_step + m_micro * x)) / measured
        fits.append(
            CellFit(
                cell=members[0].cell,
                source=members[0].source,
                runs=len(members),
                microbatches=tuple(counts),
                measured_per_step_s=m_step,
                measured_per_microbatch_s=m_micro,
                projected_per_step_s=p_step,
                projected_per_microbatch_s=p_micro,
                measured_mean_step_s=float(measured.mean()),
                measured_residual_pct=100.0 * float(residual.max()),
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
