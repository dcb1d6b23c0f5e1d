"""The tuning agent: an investigation loop over knobs the search does not enumerate.

It reads the projection's breakdown of the incumbent (where the step's time goes), forms a hypothesis, changes
the training spec to test it (an uneven pipeline layout, virtual stages, recompute depth, overlap flags, the MoE
dispatcher, ...), checks each proposal with the validator and the memory model, projects it, keeps what is faster
and logs every step with its reason (`loop.run_agent`). Proposers: rules from the breakdown (default, no network),
a language model, or a recorded transcript (`proposers`).
"""

from paraplan.tune.agent.loop import AgentOptions, AgentResult, StartPoint, run_agent
from paraplan.tune.agent.proposers import PROPOSERS, Proposal, ProposalRound, Proposer
from paraplan.tune.agent.record import AgentStep

__all__ = [
    "PROPOSERS",
    "AgentOptions",
    "AgentResult",
    "AgentStep",
    "Proposal",
    "ProposalRound",
    "Proposer",
    "StartPoint",
    "run_agent",
]
