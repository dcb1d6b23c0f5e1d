"""The agent's proposers, behind one interface: each round, given the incumbent's diagnosis and the log so far,
some proposals (a hypothesis and the field changes that test it) and the problems met making them.

- `rules`: rules written from the breakdown (no network; the default), `proposers.rules.RULES`;
- `llm`: a language model behind any OpenAI-compatible endpoint (contacted only when configured);
- `replay`: a recorded transcript of the language model's replies, fed back as its replies (tests, audits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from paraplan.tune.agent.diagnosis import Diagnosis

if TYPE_CHECKING:
    from paraplan.tune.agent.record import AgentStep

PROPOSERS = ("rules", "llm", "replay")


@dataclass(frozen=True)
class Proposal:
    hypothesis: str
    """What the proposer reads in the breakdown and expects the change to do."""
    changes: dict[str, Any]
    """TrainingSpec fields (or short aliases: tp, vpp, mbs, ...) -> new values."""
    source: str
    """The rule's name, or "llm"."""


@dataclass
class ProposalRound:
    proposals: list[Proposal] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Malformed replies, endpoint failures: logged, never raised."""
    exhausted: bool = False
    """Nothing more will come (a transcript ran out, the endpoint failed)."""


class Proposer(Protocol):
    name: str

    def propose(self, incumbent: Diagnosis, history: Sequence[AgentStep]) -> ProposalRound: ...

    def skip_rounds(self, rounds: int) -> None:
        """A resumed run: the rounds already played (a transcript skips the replies they used)."""
