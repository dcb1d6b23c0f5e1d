"""Pipeline schedule simulation: static per-rank orders played by a discrete-event engine.

Entry point: `simulate(PipelineCosts) -> SimResult`. The schedules' geometry and rules are declared in
`paraplan.specs.schedule`; this package writes their programs and plays them. Modules, in the order data
flows:
- costs: `ChunkCost`, `PipelineCosts` (what the simulator consumes)
- program: actions (F, B, W, BW) and `RankProgram`, the static order of one rank
- schedules: the table of program builders, one per schedule (gpipe, one_f_one_b, zero_bubble, dualpipe)
- plan: the cached task graph of a schedule shape, as flat arrays; priority, order: a topological order of it
- tables: per-call durations per task kind (F&B pairs for EP overlap)
- des, replay: the heapq event engine and the plan played on it (reference; events for traces)
- engine: `simulate` and the fast path
- timeline, summary, result: overlap rules, from times to `SimResult`
"""

from paraplan.sim.costs import ChunkCost, PipelineCosts
from paraplan.sim.engine import simulate
from paraplan.sim.result import Event, SimResult

__all__ = [
    "ChunkCost",
    "Event",
    "PipelineCosts",
    "SimResult",
    "simulate",
]
