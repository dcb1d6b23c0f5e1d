"""Who runs what, in which order: the per-rank programs of the pipeline schedules.

A schedule is a static order of actions per pipeline rank; the engine (`paraplan.sim.engine`) plays it
against real durations and dependencies. An action is (kind, local chunk, micro-batch) with kind F
(forward), B (input gradient), W (weight gradient) or BW (B and W back to back, as 1F1B runs them).

Schedules:
- gpipe: all forwards, then all backwards (Huang et al. 2019, GPipe).
- 1f1b: PipeDream-Flush (Narayanan et al. 2021): p - r - 1 warm-up forwards on rank r, then one forward
  one backward, then the cool-down backwards (Megatron-LM `forward_backward_pipelining_without_interleaving`).
- interleaved: Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, section 2.2) in the order of
  `forward_backward_pipelining_with_interleaving`: micro-batches grouped by pp per model chunk, warm-up
  (pp - r - 1)*2 + (vpp - 1)*pp forwards.
- zb-h1, zb-v: zero-bubble schedules (Qi et al. 2023 "Zero Bubble Pipeline Parallelism"; Qi et al. 2024
  "Pipeline Parallelism with Controllable Memory"), see `paraplan.sim.zero_bubble`.
- dualpipe, dualpipev: DeepSeek-V3 technical report (section 3.2.1) and the DualPipe repository's
  "cut-in-half" DualPipeV, see `paraplan.sim.dualpipe`.
With pp = 1 every schedule degenerates to running each micro-batch's forward and backward in turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

F, B, W, BW = 0, 1, 2, 3
KIND_NAMES = ("F", "B", "W", "BW")

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipe", "dualpipev")
SPLIT_BACKWARD = ("zb-h1", "zb-v", "dualpipe", "dualpipev")
"""Schedules that run W apart from B (some or all of the time)."""

Action = tuple[int, int, int]
"""(kind, local chunk, micro-batch)."""
Stage = tuple[int, int]
"""(rank, local chunk)."""


@dataclass(frozen=True, slots=True)
class RankProgram:
    """The static order of one pipeline rank."""

    actions: tuple[Action, ...]
    pairs: tuple[int, ...] = ()
    """Indices k where actions[k] (an F) and actions[k + 1] (a B or BW of another micro-batch) may run as
    one overlapped F&B pair, so one's EP all-to-all hides behind the other's compute (DualPipe)."""


def _check_name(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")


def chunks_per_rank(schedule: str, vpp: int) -> int:
    """Model chunks each rank holds: vpp for interleaved, 2 for the V and dual schedules, else 1."""
    _check_name(schedule)
    if schedule == "interleaved":
        return vpp
    if schedule in ("zb-v", "dualpipe", "dualpipev"):
        return 2
    return 1


def param_copies(schedule: str) -> int:
    """Copies of the parameters per rank: DualPipe keeps two (DeepSeek-V3 report, Table 2), others one."""
    _check_name(schedule)
    return 2 if schedule == "dualpipe" else 1


@lru_cache(maxsize=1024)  # asked for by every projection and legality check
def stage_paths(schedule: str, pp: int, vpp: int) -> tuple[tuple[Stage, ...], ...]:
    """The (rank, local chunk) sequence a micro-batch's forward visits; one path per direction.

    DualPipe has two directions (micro-batches fed from both ends); every other schedule has one."""
    _check_name(schedule)
    if schedule in ("gpipe", "1f1b", "zb-h1"):
        return (tuple((r, 0) for r in range(pp)),)
    if schedule == "interleaved":
        # Megatron: virtual stage s lives on rank s % pp as local chunk s // pp
        return (tuple((s % pp, s // pp) for s in range(pp * vpp)),)
    if schedule in ("zb-v", "dualpipev"):
        return (tuple((r, 0) for r in range(pp)) + tuple((r, 1) for r in reversed(range(pp))),)
    # dualpipe: rank r holds stage r of direction 0 (chunk 0) and stage pp-1-r of direction 1 (chunk 1)
    return (tuple((r, 0) for r in range(pp)), tuple((r, 1) for r in reversed(range(pp))))


def stage_order(schedule: str, pp: int, vpp: int) -> list[Stage]:
    """Model order of the virtual stages as (rank, local chunk).

    gpipe/1f1b/zb-h1: [(r, 0)]; interleaved: chunk c of rank r holds virtual stage c*pp + r; zb-v and
    dualpipev: V shape (0,0),(1,0),...,(p-1,0),(p-1,1),...,(0,1); dualpipe: the p model stages of direction
    0, [(r, 0)] — chunk 1 of rank r is a second copy of model stage p-1-r (see `chunk_model_stage`)."""
    return list(stage_paths(schedule, pp, vpp)[0])


@lru_cache(maxsize=1024)
def chunk_model_stage(schedule: str, pp: int, vpp: int) -> tuple[tuple[int, ...], ...]:
    """[rank][local chunk] -> index of the model stage (in `stage_order`) that chunk holds."""
    n_chunks = chunks_per_rank(schedule, vpp)
    table = [[-1] * n_chunks for _ in range(pp)]
    for path in stage_paths(schedule, pp, vpp):
        for index, (rank, chunk) in enumerate(path):
            table[rank][chunk] = index
    return tuple(tuple(row) for row in table)


def microbatch_direction(schedule: str, num_microbatches: int, microbatch: int) -> int:
    """Which path of `stage_paths` a micro-batch takes: DualPipe feeds the first half from rank 0 and
    the second half from rank pp-1; every other schedule has one direction."""
    if schedule == "dualpipe":
        return 0 if microbatch < num_microbatches // 2 else 1
    return 0


def validate_schedule(schedule: str, pp: int, vpp: int, num_microbatches: int) -> list[str]:
    """Every rule the schedules impose, one line per violation, with its numbers."""
    if schedule not in SCHEDULES:
        return [f"pipeline schedule {schedule!r} is unknown; choose one of {', '.join(SCHEDULES)}"]
    problems: list[str] = []
    m = num_microbatches
    if pp < 1:
        problems.append(f"pipeline parallel size must be >= 1 (got pp={pp})")
    if vpp < 1:
        problems.append(f"virtual pipeline size must be >= 1 (got vpp={vpp})")
    if m < 1:
        problems.append(f"number of micro-batches must be >= 1 (got {m})")
    if problems:
        return problems
    if schedule in ("gpipe", "1f1b", "zb-h1") and vpp != 1:
        problems.append(f"vpp={vpp} needs the interleaved schedule ({schedule} holds one chunk per rank)")
    if schedule in ("zb-v", "dualpipe", "dualpipev") and vpp not in (1, 2):
        problems.append(f"{schedule} holds exactly 2 chunks per rank (got vpp={vpp})")
    if schedule == "interleaved":
        if vpp < 2:
            problems.append(f"interleaved 1F1B needs vpp >= 2 (got vpp={vpp}); use 1f1b")
        if pp > 1 and m % pp:
            # Megatron-LM: "number of microbatches is not divisible by pipeline-model-parallel-size when
            # using interleaved schedule"; with a short last group the static orders deadlock
            problems.append(f"interleaved 1F1B needs micro-batches divisible by pp (got {m} % {pp} = {m % pp})")
        if pp > 1 and m < pp:
            problems.append(f"interleaved 1F1B needs micro-batches >= pp (got {m} < {pp})")
    if schedule == "zb-h1" and m < pp:
        problems.append(f"{schedule} needs micro-batches >= pp (got {m} < {pp})")
    # 1F1B with fewer micro-batches than stages runs (warm-up = min(pp - rank - 1, m), Megatron-LM and
    # DeepSpeed alike); it is just mostly bubble.
    if schedule == "dualpipe" and pp > 1:
        if pp % 2:
            problems.append(f"dualpipe needs an even pp (got pp={pp})")
        if m % 2:
            problems.append(f"dualpipe needs an even number of micro-batches (got {m})")
        if m < 2 * pp:
            problems.append(f"dualpipe needs micro-batches >= 2*pp (got {m} < {2 * pp})")
    if schedule == "dualpipev" and pp > 1 and m < 2 * pp:
        problems.append(f"dualpipev needs micro-batches >= 2*pp (got {m} < {2 * pp})")
    return problems


# --------------------------------------------------------------------------------------------------
# programs


def _no_pipelining(schedule: str, vpp: int, m: int) -> tuple[RankProgram, ...]:
    """pp = 1: each micro-batch's forward through the rank's chunks, then its backward in reverse."""
    paths = stage_paths(schedule, 1, vpp)
    actions: list[Action] = []
    for mb in range(m):
        path = paths[microbatch_direction(schedule, m, mb)]
        actions += [(F, chunk, mb) for _, chunk in path]
        actions += [(BW, chunk, mb) for _, chunk in reversed(path)]
    return (RankProgram(tuple(actions)),)


def _gpipe(pp: int, m: int) -> tuple[RankProgram, ...]:
    # backward in reverse micro-batch order: the last forward's activations are used first
    return tuple(
        RankProgram(tuple((F, 0, i) for i in range(m)) + tuple((BW, 0, i) for i in reversed(range(m))))
        for _ in range(pp)
    )


def _one_f_one_b(pp: int, m: int) -> tuple[RankProgram, ...]:
    programs = []
    for rank in range(pp):
        warmup = min(pp - rank - 1, m)
        actions: list[Action] = [(F, 0, i) for i in range(warmup)]
        for i in range(m - warmup):
            actions += [(F, 0, warmup + i), (BW, 0, i)]
        actions += [(BW, 0, i) for i in range(m - warmup, m)]
        programs.append(RankProgram(tuple(actions)))
    return tuple(programs)


def megatron_schedule_table(m: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) forward order of Megatron's interleaved schedule (`get_schedule_table` in
    megatron/core/pipeline_parallel/schedules.py): groups of `group` micro-batches run chunk by chunk; the
    last group takes the remainder."""
    table: list[tuple[int, int]] = []
    for first in range(0, m, group):
        last = min(first + group, m)
        table += [(mb, chunk) for chunk in range(vpp) for mb in range(first, last)]
    return table


def interleaved_warmup(pp: int, vpp: int, rank: int, m: int) -> int:
    """Megatron's warm-up forwards for the interleaved schedule: (pp - rank - 1)*2 + (vpp - 1)*pp,
    capped at the vpp*m forwards there are."""
    return min((pp - rank - 1) * 2 + (vpp - 1) * pp, m * vpp)


def _interleaved(pp: int, vpp: int, m: int, extra_warmup: int) -> tuple[RankProgram, ...]:
    table = megatron_schedule_table(m, vpp, pp)
    forward = [(F, chunk, mb) for mb, chunk in table]
    backward = [(BW, vpp - 1 - chunk, mb) for mb, chunk in table]
    total = m * vpp
    programs = []
    for rank in range(pp):
        warmup = min(interleaved_warmup(pp, vpp, rank, m) + extra_warmup, total)
        actions: list[Action] = forward[:warmup]
        pairs = []
        for k in range(total - warmup):
            pairs.append(len(actions))
            actions += [forward[warmup + k], backward[k]]
        actions += backward[total - warmup :]
        programs.append(RankProgram(tuple(actions), tuple(pairs)))
    return tuple(programs)


@lru_cache(maxsize=64)  # build_plan caches what the engines need; this only spares rebuilding
def rank_programs(
    schedule: str, pp: int, vpp: int, num_microbatches: int, overlap_pairs: bool = False
) -> tuple[RankProgram, ...]:
    """The static per-rank programs of `schedule`; raises ValueError listing every violated rule.

    overlap_pairs: the caller will run the marked F&B pairs as one overlapped task (EP overlap). Pairs
    exist where a framework overlaps a forward with another micro-batch's backward: DualPipe(V), and
    Megatron-LM's interleaved schedule with `overlap_moe_expert_parallel_comm` (steady-state F and B of
    different virtual stages). A pair hands its forward output on only when it ends, so the interleaved
    schedule then warms up one more micro-batch per rank to keep the next stage fed (DualPipe pays the same
    one extra: PP+1 activations). Other schedules have no pairs; EP overlap changes nothing there."""
    problems = validate_schedule(schedule, pp, vpp, num_microbatches)
    if problems:
        raise ValueError("; ".join(problems))
    m = num_microbatches
    extra = 1 if overlap_pairs else 0
    if pp == 1:
        return _no_pipelining(schedule, chunks_per_rank(schedule, vpp), m)
    if schedule == "gpipe":
        return _gpipe(pp, m)
    if schedule == "1f1b":
        return _one_f_one_b(pp, m)
    if schedule == "interleaved":
        return _interleaved(pp, vpp, m, extra)
    if schedule == "zb-h1":
        from paraplan.sim.zero_bubble import zb_h1

        return zb_h1(pp, m)
    if schedule == "zb-v":
        from paraplan.sim.zero_bubble import zb_v

        return zb_v(pp, m)
    from paraplan.sim.dualpipe import dualpipe, dualpipev

    return dualpipe(pp, m) if schedule == "dualpipe" else dualpipev(pp, m)
