"""How well the shipped calibration reproduces measured runs like the one being projected: the fitted and held-out
(leave-one-source-out) error of every source with rows on the same GPU family, read from calibration.yaml, so that
`paraplan project` shows the validation behind its numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paraplan.cost.calibration import family_of, fitted_table


@dataclass(frozen=True, slots=True)
class SourceError:
    source: str
    fitted_mape_pct: float
    held_out_mape_pct: float | None


@dataclass(frozen=True, slots=True)
class Evidence:
    family: str
    sources: tuple[SourceError, ...]  # sources with rows on this GPU family
    balanced: SourceError | None  # the source-balanced means over every source

    def to_dict(self) -> dict[str, Any]:
        def one(e: SourceError) -> dict[str, Any]:
            return {"fitted_mape_pct": e.fitted_mape_pct, "held_out_mape_pct": e.held_out_mape_pct}

        return {
            "gpu_family": self.family,
            "sources": {e.source: one(e) for e in self.sources},
            "source_balanced": one(self.balanced) if self.balanced else None,
        }

    def line(self) -> str:
        """One line: this family's sources, then all of them (fitted MAPE, held out in parentheses)."""
        if self.balanced is None:
            return "no fitted calibration: defaults only"

        def fmt(e: SourceError) -> str:
            held = f" ({e.held_out_mape_pct:.1f}% held out)" if e.held_out_mape_pct is not None else ""
            return f"{e.fitted_mape_pct:.1f}%{held}"

        own = ", ".join(f"{e.source} {fmt(e)}" for e in self.sources) or f"no measured {self.family} runs"
        return f"{own}; all sources {fmt(self.balanced)}"


def evidence_for(gpu: str, table: dict[str, Any] | None = None) -> Evidence:
    table = fitted_table() if table is None else table
    family = family_of(gpu)
    fitted: dict[str, float] = table.get("fitted_mape_pct") or {}
    held: dict[str, float] = table.get("held_out_mape_pct") or {}
    scope: dict[str, dict[str, list[str]]] = table.get("source_scope") or {}
    sources = tuple(
        SourceError(name, fitted[name], held.get(name))
        for name in sorted(fitted)
        if family in (scope.get(name) or {}).get("families", [])
    )
    balanced = None
    if fitted:
        held_mean = sum(held.values()) / len(held) if held and set(held) == set(fitted) else None
        balanced = SourceError("source-balanced", sum(fitted.values()) / len(fitted), held_mean)
    return Evidence(family, sources, balanced)
