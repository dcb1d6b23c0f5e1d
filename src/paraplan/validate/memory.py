"""Measured peak memory per GPU (`metric` memory_gib) against the projection's memory, scored apart from step time.

Each row's notes say which GPU the figure is and what it counts (shared/data/measured/README.md): torchtitan's
benchmarks log the peak *reserved* memory, the max over all GPUs; Megatron-LM's functional-test golden values the
peak *allocated* memory of the last rank (the only one with a TensorBoard writer), which sits on the last pipeline
stage. The projection's memory has one result per pipeline rank (`MemoryResult.ranks`), so a last-rank figure is
compared with the last pipeline rank and a max-over-GPUs figure with the peak over the ranks. Each figure is
compared with its own quantity (`memory.model.RankMemory`): a peak-allocated figure with the projected allocated
bytes, a peak-reserved one with the reserved bytes (allocated plus the allocator's fragmentation); a figure whose
notes name neither with the reserved bytes (what `torch.cuda.memory_reserved` and most logs report).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from paraplan.memory.model import GIB, MemoryResult
from paraplan.validate.measured import Assumption

MAX_OVER_GPUS = "max over GPUs"
LAST_RANK = "last rank"

_LAST_RANK = re.compile(r"\blast rank\b", re.IGNORECASE)
_MAX_OVER = re.compile(r"\bmax(imum)? over all GPUs\b", re.IGNORECASE)
_RESERVED = re.compile(r"\bpeak reserved\b|reserved_bytes", re.IGNORECASE)
_ALLOCATED = re.compile(r"\bpeak allocated\b|allocated_bytes\.all\.peak|max_memory_allocated", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """What a measured memory figure is: which GPU (`MAX_OVER_GPUS` or `LAST_RANK`) and which counter."""

    gpu: str
    quantity: str  # "reserved", "allocated", or "unstated"
    stated: bool  # whether the notes name the GPU (else the peak over the ranks is assumed)


def reading_of(notes: str) -> MemoryReading:
    """The GPU and counter a row's notes name; a row naming no GPU is compared with the peak over all ranks."""
    last, most = bool(_LAST_RANK.search(notes)), bool(_MAX_OVER.search(notes))
    quantity = "reserved" if _RESERVED.search(notes) else "allocated" if _ALLOCATED.search(notes) else "unstated"
    return MemoryReading(LAST_RANK if last and not most else MAX_OVER_GPUS, quantity, last or most)


@dataclass(frozen=True, slots=True)
class MemoryRow:
    id: str
    source: str
    measured_gib: float
    predicted_gib: float
    reading: MemoryReading
    compared_rank: int  # the pipeline rank whose projected memory is compared
    pipeline_ranks: int
    fits: bool  # whether the projected peak fits the GPU's usable HBM
    assumed: tuple[Assumption, ...] = ()

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_gib - self.measured_gib) / self.measured_gib

    @property
    def compared_quantity(self) -> str:
        """The projected quantity the figure is compared with: allocated for a peak-allocated figure, else reserved."""
        return "allocated" if self.reading.quantity == "allocated" else "reserved"

    @property
    def compared(self) -> str:
        """Which projected figure the measurement is compared with, in words."""
        if self.reading.gpu == LAST_RANK:
            return f"pipeline rank {self.compared_rank} of {self.pipeline_ranks} (the last)"
        unstated = "" if self.reading.stated else " (the notes name no GPU)"
        return f"peak over {self.pipeline_ranks} pipeline ranks (rank {self.compared_rank}){unstated}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "metric": "memory_gib",
            "measured": self.measured_gib,
            "predicted": self.predicted_gib,
            "error_pct": self.error_pct,
            "measured_is": f"peak {self.reading.quantity}, {self.reading.gpu}",
            "predicted_is": f"peak {self.compared_quantity}",
            "compared_with": self.compared,
            "fits": self.fits,
            "assumed": [str(item) for item in self.assumed],
        }


def memory_row(
    row_id: str, source: str, measured_gib: float, notes: str, memory: MemoryResult, assumed: tuple[Assumption, ...]
) -> MemoryRow:
    """Score one measured memory figure against the projection's rank that the figure's notes name."""
    reading = reading_of(notes)
    quantity = "allocated" if reading.quantity == "allocated" else "reserved"
    if reading.gpu == LAST_RANK:
        rank = memory.ranks[-1]
    else:
        rank = max(memory.ranks, key=lambda r: r.quantity_bytes(quantity))
    return MemoryRow(
        id=row_id,
        source=source,
        measured_gib=measured_gib,
        predicted_gib=rank.quantity_bytes(quantity) / GIB,
        reading=reading,
        compared_rank=rank.rank,
        pipeline_ranks=len(memory.ranks),
        fits=memory.fits,
        assumed=assumed,
    )


def per_source(rows: Sequence[MemoryRow]) -> dict[str, dict[str, float]]:
    """Per source: rows, MAPE and mean signed error (%)."""
    errors: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        errors[r.source].append(r.error_pct)
    return {
        s: {"n": len(v), "mape_pct": sum(map(abs, v)) / len(v), "mean_error_pct": sum(v) / len(v)}
        for s, v in sorted(errors.items())
    }


def source_balanced_mape_pct(rows: Sequence[MemoryRow]) -> float:
    ps = per_source(rows)
    return sum(v["mape_pct"] for v in ps.values()) / len(ps) if ps else float("nan")


def summary(rows: Sequence[MemoryRow], skipped: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """The `memory` section of `paraplan validate --json`: per-source MAPE, every row, and the memory rows that
    could not be projected."""
    return {
        "per_source": per_source(rows),
        "mape_pct": source_balanced_mape_pct(rows),
        "rows": [r.to_dict() for r in rows],
        "skipped": [{"id": i, "reason": reason} for i, reason in skipped],
    }
