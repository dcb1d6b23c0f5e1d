"""Who runs what, in which order: every schedule's program builder, looked up by the schedule's name.

A schedule's geometry and rules are declared once in `paraplan.specs.schedule`; here each one gets the
function that writes its per-rank programs (`paraplan.sim.program.RankProgram`), one module per family:
- gpipe: `paraplan.sim.gpipe`;
- 1f1b, interleaved: `paraplan.sim.one_f_one_b` (with a numpy generator of the same actions, the fast path);
- zb-h1, zb-v: `paraplan.sim.zero_bubble` (with op-code arrays of the same actions, the fast path);
- dualpipe, dualpipev: `paraplan.sim.dualpipe` (with a numpy decoding of the same actions, the fast path).
With pp = 1 every schedule degenerates to running each micro-batch's forward and backward in turn.

Adding a schedule: declare it in `paraplan.specs.schedule.SCHEDULES`, write its builder (a `Builder`: pp >= 2,
vpp, micro-batches, overlap_pairs -> one RankProgram per rank) in a new module here, and register it in
`PROGRAM_BUILDERS` under the same name. tests/specs/test_schedule.py checks that every declared schedule has
a builder and that its programs match the declared geometry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

from paraplan.sim.dualpipe import dualpipe, dualpipe_arrays, dualpipev, dualpipev_arrays
from paraplan.sim.gpipe import gpipe
from paraplan.sim.one_f_one_b import interleaved, interleaved_arrays, one_f_one_b, one_f_one_b_arrays
from paraplan.sim.program import BW, Action, ActionArrays, F, RankProgram, flatten
from paraplan.sim.zero_bubble import zb_h1, zb_h1_arrays, zb_v, zb_v_arrays
from paraplan.specs.schedule import DUALPIPE, DUALPIPEV, GPIPE, INTERLEAVED, ONE_F_ONE_B, ZB_H1, ZB_V, validate_schedule
from paraplan.specs.schedule import schedule as schedule_named

Builder = Callable[[int, int, int, bool], tuple[RankProgram, ...]]
"""(pp >= 2, vpp, micro-batches, overlap_pairs) -> one program per rank. overlap_pairs: the caller runs the
marked F&B pairs as one overlapped task (EP overlap)."""
ArraysBuilder = Callable[[int, int, int, bool], ActionArrays]
"""The same actions as a `Builder`'s, flattened, built without the per-action tuples (the fast path)."""


@dataclass(frozen=True, slots=True)
class ProgramBuilder:
    programs: Builder
    arrays: ArraysBuilder | None = None


PROGRAM_BUILDERS: Mapping[str, ProgramBuilder] = MappingProxyType(
    {
        GPIPE.name: ProgramBuilder(gpipe),
        ONE_F_ONE_B.name: ProgramBuilder(one_f_one_b, one_f_one_b_arrays),
        INTERLEAVED.name: ProgramBuilder(interleaved, interleaved_arrays),
        ZB_H1.name: ProgramBuilder(zb_h1, zb_h1_arrays),
        ZB_V.name: ProgramBuilder(zb_v, zb_v_arrays),
        DUALPIPE.name: ProgramBuilder(dualpipe, dualpipe_arrays),
        DUALPIPEV.name: ProgramBuilder(dualpipev, dualpipev_arrays),
    }
)
"""Schedule name (`paraplan.specs.schedule.SCHEDULES`) -> the builder of its programs."""


def _no_pipelining(schedule: str, chunks: int, m: int, overlap_pairs: bool = False) -> tuple[RankProgram, ...]:
    """pp = 1: each micro-batch's forward through the rank's chunks, then its backward in reverse.

    overlap_pairs (EP overlap): the forward of micro-batch i + 1 runs with the backward of micro-batch i, chunk by
    chunk, as F&B pairs; the first forward and the last backward run alone. megatron-core 0.15.0
    `forward_backward_no_pipelining` -> `combined_1f1b_schedule_for_no_pipelining` (pipeline_parallel/
    combined_1f1b.py) under `overlap_moe_expert_parallel_comm`."""
    spec = schedule_named(schedule)
    paths = spec.stage_paths(1, chunks)
    forwards, backwards = [], []
    for mb in range(m):
        path = paths[spec.microbatch_direction(m, mb)]
        forwards.append([(F, chunk, mb) for _, chunk in path])
        backwards.append([(BW, chunk, mb) for _, chunk in reversed(path)])
    actions: list[Action] = []
    pairs: list[int] = []
    for mb in range(m):
        if not overlap_pairs or mb == 0:
            actions += forwards[mb]
        else:
            for f, b in zip(forwards[mb], backwards[mb - 1], strict=True):
                pairs.append(len(actions))
                actions += [f, b]
        if not overlap_pairs or mb == m - 1:
            actions += backwards[mb]
    return (RankProgram(tuple(actions), tuple(pairs)),)


def _checked(schedule: str, pp: int, vpp: int, num_microbatches: int) -> ProgramBuilder:
    problems = validate_schedule(schedule, pp, vpp, num_microbatches)
    if problems:
        raise ValueError("; ".join(problems))
    builder = PROGRAM_BUILDERS.get(schedule)
    if builder is None:
        raise ValueError(f"pipeline schedule {schedule!r} has no program builder in paraplan.sim.schedules")
    return builder


@lru_cache(maxsize=64)  # build_plan caches what the engines need; this only spares rebuilding
def rank_programs(
    schedule: str, pp: int, vpp: int, num_microbatches: int, overlap_pairs: bool = False
) -> tuple[RankProgram, ...]:
    """The static per-rank programs of `schedule`; raises ValueError listing every violated rule.

    overlap_pairs: the caller will run the marked F&B pairs as one overlapped task (EP overlap). Pairs
    exist where a framework overlaps a forward with another micro-batch's backward: DualPipe(V), and
    Megatron-LM's interleaved schedule with `overlap_moe_expert_parallel_comm` (steady-state F and B of
    different virtual stages), and any schedule at pp = 1 (consecutive micro-batches, `_no_pipelining`). Other
    schedules have no pairs; EP overlap changes nothing there: megatron-core 0.15.0 refuses it with pp > 1 and no
    virtual pipeline (transformer_config.py `__post_init__`: "virtual_pipeline_model_parallel_size must be
    specified when pipeline_model_parallel_size > 1")."""
    builder = _checked(schedule, pp, vpp, num_microbatches)
    if pp == 1:
        chunks = schedule_named(schedule).chunks_per_rank(vpp)
        return _no_pipelining(schedule, chunks, num_microbatches, overlap_pairs)
    return builder.programs(pp, vpp, num_microbatches, overlap_pairs)


def action_arrays(schedule: str, pp: int, vpp: int, m: int, paired: bool) -> ActionArrays:
    """The actions of `rank_programs(schedule, pp, vpp, m, paired)`, flattened (generated with numpy where the
    builder has an `arrays` generator)."""
    builder = _checked(schedule, pp, vpp, m)
    if pp > 1 and builder.arrays is not None:
        return builder.arrays(pp, vpp, m, paired)
    return flatten(rank_programs(schedule, pp, vpp, m, paired))
