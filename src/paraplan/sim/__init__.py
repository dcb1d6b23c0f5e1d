"""Pipeline schedule simulation: static per-rank orders played by a discrete-event engine.

Entry point: `simulate(PipelineCosts) -> SimResult`. Modules, in the order data flows:
- costs: `ChunkCost`, `PipelineCosts` (what the simulator consumes)
- schedules, zero_bubble, dualpipe: the per-rank programs of every schedule; layout and rule helpers
  (`stage_order`, `chunks_per_rank`, `param_copies`, `chunk_model_stage`, `validate_schedule`)
- plan: the cached task graph of a schedule shape, as flat arrays
- tables: per-call durations per task kind (F&B pairs for EP overlap)
- des, replay: the heapq event engine and the plan played on it (reference; events for traces)
- engine: `simulate` and the fast path
- timeline, summary, result: overlap rules, from times to `SimResult`
"""

from paraplan.sim.costs import ChunkCost, PipelineCosts
from paraplan.sim.engine import simulate
from paraplan.sim.result import Event, SimResult
from paraplan.sim.schedules import (
    SCHEDULES,
    chunk_model_stage,
    chunks_per_rank,
    param_copies,
    stage_order,
    validate_schedule,
)

__all__ = [
    "SCHEDULES",
    "ChunkCost",
    "Event",
    "PipelineCosts",
    "SimResult",
    "chunk_model_stage",
    "chunks_per_rank",
    "param_copies",
    "simulate",
    "stage_order",
    "validate_schedule",
]
