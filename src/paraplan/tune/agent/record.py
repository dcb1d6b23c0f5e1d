"""One step of the agent's log, and the log as text a person reads.

A step is one proposal judged: the hypothesis, the changes asked for and made (with what had to be adjusted), the
validator's verdict, the memory model's verdict, the projected step time, and whether it was kept and why. Start
steps record the starting points; `error` steps record a reply or call that gave no proposal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("start", "proposal", "error")
STATUSES = ("start", "kept", "dropped", "skipped")


@dataclass
class AgentStep:
    index: int
    round: int
    kind: str
    """start | proposal | error"""
    source: str
    """The rule's name, llm, or the starting point's name."""
    hypothesis: str
    requested: dict[str, Any] = field(default_factory=dict)
    """The changes as proposed (field names or aliases)."""
    changes: dict[str, list[Any]] = field(default_factory=dict)
    """Field -> [before, after] from the incumbent, adjustments included."""
    adjustments: list[str] = field(default_factory=list)
    validator: str = ""
    """"passed", or the rules it broke."""
    memory: str = ""
    """"fits: P of U GiB usable", "OOM: ...", or "" when not reached."""
    memory_fits: bool | None = None
    peak_gib: float | None = None
    step_time_s: float | None = None
    incumbent_step_time_s: float | None = None
    status: str = "dropped"
    """start | kept | dropped | skipped"""
    reason: str = ""
    spec: dict[str, Any] | None = None
    """The full training spec judged (None when it could not be built)."""
    breakdown_s: dict[str, float] = field(default_factory=dict)

    @property
    def validator_passed(self) -> bool:
        return self.validator == "passed"

    @property
    def gain_pct(self) -> float | None:
        """Step time saved against the incumbent it was judged against (positive: faster)."""
        if self.step_time_s is None or not self.incumbent_step_time_s:
            return None
        return 100.0 * (self.incumbent_step_time_s - self.step_time_s) / self.incumbent_step_time_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"gain_pct": self.gain_pct}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> AgentStep:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in values.items() if k in names})


def _value(v: Any) -> str:
    if isinstance(v, list | tuple):
        return "[" + ",".join(map(str, v)) + "]"
    return str(v)


def change_text(step: AgentStep) -> str:
    if not step.changes:
        return "-" if step.kind != "proposal" else ", ".join(f"{k}={_value(v)}" for k, v in step.requested.items())
    return ", ".join(f"{k} {_value(a)} -> {_value(b)}" for k, (a, b) in step.changes.items())


def step_lines(step: AgentStep) -> list[str]:
    """A step as a few readable lines."""
    time_text = f"{step.step_time_s:.3f} s" if step.step_time_s is not None else "-"
    gain = step.gain_pct
    if gain is not None and step.kind == "proposal":
        time_text += f" ({-gain:+.2f}%)"
    head = f"#{step.index:<3} [{step.source}] {step.status.upper()}: {time_text}"
    if step.reason:
        head += f" - {step.reason}"
    lines = [head, f"     why: {step.hypothesis}"]
    if step.kind == "proposal":
        lines.append(f"     change: {change_text(step)}")
        if step.adjustments:
            lines.append(f"     adjusted: {'; '.join(step.adjustments)}")
    if step.validator:
        check = f"validator {step.validator}"
        if step.memory:
            check += f"; memory {step.memory}"
        lines.append(f"     check: {check}")
    return lines
