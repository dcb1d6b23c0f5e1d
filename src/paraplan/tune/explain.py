"""Why the winner beats the runner-up: the step-time breakdown parts side by side, largest gap first."""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.result import Projection
from paraplan.tune.candidate import Candidate


@dataclass(frozen=True)
class PartGap:
    part: str
    winner_s: float
    runner_up_s: float

    @property
    def delta_s(self) -> float:
        """Negative: the winner spends less time here."""
        return self.winner_s - self.runner_up_s


@dataclass(frozen=True)
class Explanation:
    winner: Candidate
    runner_up: Candidate
    winner_step_s: float
    runner_up_step_s: float
    parts: tuple[PartGap, ...]  # every breakdown part, largest |delta| first
    config_changes: tuple[tuple[str, object, object], ...]  # (axis, winner value, runner-up value)
    winner_peak_gib: float
    runner_up_peak_gib: float
    ties: int = 0
    """Configurations with the winner's step time (the runner-up is the first slower one)."""

    @property
    def gain_s(self) -> float:
        return self.runner_up_step_s - self.winner_step_s

    def summary(self) -> str:
        changes = ", ".join(f"{axis} {b} -> {a}" for axis, a, b in self.config_changes) or "no axis"
        lines = [
            f"winner {self.winner.describe()} beats runner-up {self.runner_up.describe()} by "
            f"{self.gain_s * 1e3:,.1f} ms per step ({self.gain_s / self.runner_up_step_s:.2%}); "
            f"from the runner-up: {changes}."
        ]
        saved = [p for p in self.parts if p.delta_s < 0][:3]
        lost = [p for p in self.parts if p.delta_s > 0][:2]
        if saved:
            lines.append(
                "It saves "
                + ", ".join(f"{p.part.replace('_', ' ')} {-p.delta_s * 1e3:,.1f} ms" for p in saved)
                + (
                    "; it pays " + ", ".join(f"{p.part.replace('_', ' ')} {p.delta_s * 1e3:,.1f} ms" for p in lost)
                    if lost
                    else ""
                )
                + "."
            )
        lines.append(f"Peak memory {self.winner_peak_gib:,.1f} GiB vs {self.runner_up_peak_gib:,.1f} GiB.")
        if self.ties:
            lines.append(f"{self.ties} other configuration(s) tie with the winner.")
        return " ".join(lines)

    def to_dict(self) -> dict[str, object]:
        return {
            "winner": self.winner.describe(),
            "runner_up": self.runner_up.describe(),
            "gain_s": self.gain_s,
            "config_changes": [{"axis": a, "winner": w, "runner_up": r} for a, w, r in self.config_changes],
            "parts": [
                {"part": p.part, "winner_s": p.winner_s, "runner_up_s": p.runner_up_s, "delta_s": p.delta_s}
                for p in self.parts
            ],
            "ties": self.ties,
            "summary": self.summary(),
        }


def explain(
    winner: Projection, winner_c: Candidate, runner_up: Projection, runner_up_c: Candidate, ties: int = 0
) -> Explanation:
    a, b = winner.breakdown, runner_up.breakdown
    names = list(a) + [k for k in b if k not in a]
    parts = sorted(
        (PartGap(n, a.get(n, 0.0), b.get(n, 0.0)) for n in names),
        key=lambda p: (-abs(p.delta_s), p.part),
    )
    w, r = winner_c.to_dict(), runner_up_c.to_dict()
    changes = tuple((k, w[k], r[k]) for k in w if w[k] != r[k])
    return Explanation(
        winner=winner_c,
        runner_up=runner_up_c,
        winner_step_s=winner.step_time_s,
        runner_up_step_s=runner_up.step_time_s,
        parts=tuple(parts),
        config_changes=changes,
        winner_peak_gib=winner.memory.peak_gib,
        runner_up_peak_gib=runner_up.memory.peak_gib,
        ties=ties,
    )
