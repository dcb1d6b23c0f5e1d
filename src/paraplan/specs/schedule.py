"""Pipeline schedules, declared once: each one's geometry, rules and names, and the registry of them.

A `PipelineSchedule` says what the rest of paraplan needs to know about a schedule without running it: how
many model chunks a rank holds and which model stage each holds (`stage_paths`), how many parameter copies,
whether the backward is split into B (input gradient) and W (weight gradient), whether a forward runs
overlapped with another micro-batch's backward (F&B pairs), the micro-batch rules it imposes, and the names
frameworks give it. The order in which each rank runs its actions is the simulator's business
(`paraplan.sim.schedules`, one program builder per schedule).

Adding a schedule:
1. declare it here (a `PipelineSchedule` below) and add it to `SCHEDULES`;
2. write its program builder in a module of `paraplan.sim` and register it in
   `paraplan.sim.schedules.PROGRAM_BUILDERS` under the same name.
`tests/specs/test_schedule.py` fails until both exist and the programs match the declared geometry; the
CLI's help, the tuner's space and the validator read the list from `SCHEDULES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from types import MappingProxyType

from paraplan.errors import ConfigError

Stage = tuple[int, int]
"""(pipeline rank, local chunk)."""


class Layout(Enum):
    """Where a micro-batch's forward goes: the (rank, local chunk) sequences of `PipelineSchedule.stage_paths`."""

    LOOP = "loop"
    """Model stage s on rank s % pp as local chunk s // pp (Megatron-LM's interleaved layout; with one chunk
    per rank, stage r on rank r)."""
    V = "v"
    """Down the ranks on chunk 0, back up on chunk 1: rank r holds stages r and 2pp-1-r (ZB-V, DualPipeV)."""
    DUAL = "dual"
    """Two directions (DualPipe): rank r holds stage r for micro-batches fed from rank 0 (chunk 0) and a copy
    of stage pp-1-r for those fed from rank pp-1 (chunk 1)."""


@dataclass(frozen=True, slots=True)
class PipelineSchedule:
    """One pipeline schedule: its geometry, rules and names (the order of actions lives in `paraplan.sim`)."""

    name: str
    """What users type (`--schedule`, `pipeline_schedule`)."""
    source: str
    """Where it is described."""
    layout: Layout
    chunks: int | None
    """Model chunks per rank; None: as many as the virtual pipeline size says (vpp >= 2)."""
    title: str = ""
    """How messages name it; the name when empty."""
    param_copies: int = 1
    """Copies of the parameters a rank holds (DualPipe: 2, DeepSeek-V3 report Table 2)."""
    split_backward: bool = False
    """Runs the weight gradient (W) apart from the input gradient (B), some or all of the time."""
    pairs_forward_backward: bool = False
    """Runs a forward overlapped with another micro-batch's backward as one F&B pair (DualPipe's overlapped
    chunks, DeepSeek-V3 report figure 4), so the EP all-to-all of one hides behind the other's compute, asked
    for or not."""
    all_forwards_first: bool = False
    """Every forward runs before the first backward (GPipe's flush): every micro-batch's activations are alive
    at once and nothing bounds the micro-batches in flight. It then takes as long as 1F1B and holds more."""
    even_pp: bool = False
    """With pp > 1, pp must be even."""
    microbatches_multiple_of_pp: bool = False
    """With pp > 1, micro-batches must divide by pp."""
    even_microbatches: bool = False
    """With pp > 1, micro-batches must be even."""
    min_microbatches_per_pp: int = 0
    """With pp > 1, micro-batches must be at least this many times pp."""
    framework_names: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """Format (`paraplan.formats`) -> how that framework names or selects it. "megatron": Megatron-core's
    pipelining function (Megatron-LM, NeMo and Primus run it); "torchtitan": `pipeline_parallel_schedule`;
    "primus": the Primus switch that turns it on (beside `enable_zero_bubble`). Absent: the framework does
    not run it."""

    @property
    def label(self) -> str:
        return self.title or self.name

    @property
    def interleaves(self) -> bool:
        """Its chunks per rank are the virtual pipeline size (vpp)."""
        return self.chunks is None

    def has_ep_overlap_pairs(self, pp: int) -> bool:
        """Whether `moe_ep_overlap` has F&B pairs of different micro-batches to hide the expert all-to-all in: any
        schedule at pp = 1 (megatron-core 0.15.0 `combined_1f1b_schedule_for_no_pipelining`), the interleaved one
        (steady-state F and B of different virtual stages), DualPipe(V)'s own pairs. 1F1B, ZB-H1 and ZB-V with
        pp > 1 have none; Megatron refuses the overlap there (transformer_config.py `__post_init__`)."""
        return pp == 1 or self.interleaves or self.pairs_forward_backward

    def chunks_per_rank(self, vpp: int) -> int:
        """Model chunks each rank holds: vpp for interleaved, the declared count otherwise."""
        return vpp if self.chunks is None else self.chunks

    def stage_paths(self, pp: int, vpp: int) -> tuple[tuple[Stage, ...], ...]:
        """The (rank, local chunk) sequence a micro-batch's forward visits; one path per direction."""
        return _stage_paths(self.layout, pp, self.chunks_per_rank(vpp))

    def stage_order(self, pp: int, vpp: int) -> list[Stage]:
        """Model order of the model stages as (rank, local chunk): the first direction's path. DualPipe has pp
        model stages, [(r, 0)]; chunk 1 of rank r is a second copy of model stage pp-1-r (`chunk_model_stage`)."""
        return list(self.stage_paths(pp, vpp)[0])

    def model_stages(self, pp: int, vpp: int) -> int:
        """How many model stages the layers are split over."""
        return len(self.stage_paths(pp, vpp)[0])

    def chunk_model_stage(self, pp: int, vpp: int) -> tuple[tuple[int, ...], ...]:
        """[rank][local chunk] -> index of the model stage (in `stage_order`) that chunk holds."""
        return _chunk_model_stage(self.layout, pp, self.chunks_per_rank(vpp))

    def microbatch_direction(self, num_microbatches: int, microbatch: int) -> int:
        """Which path of `stage_paths` a micro-batch takes: DualPipe feeds the first half from rank 0 and the
        second half from rank pp-1; every other layout has one direction."""
        if self.layout is Layout.DUAL:
            return 0 if microbatch < num_microbatches // 2 else 1
        return 0

    def problems(self, pp: int, vpp: int, num_microbatches: int) -> list[str]:
        """Every rule this schedule imposes on pp, vpp and the micro-batches, one line per violation."""
        m = num_microbatches
        problems: list[str] = []
        if pp < 1:
            problems.append(f"pipeline parallel size must be >= 1 (got pp={pp})")
        if vpp < 1:
            problems.append(f"virtual pipeline size must be >= 1 (got vpp={vpp})")
        if m < 1:
            problems.append(f"number of micro-batches must be >= 1 (got {m})")
        if problems:
            return problems
        if self.chunks is None:
            if vpp < 2:
                problems.append(f"{self.label} needs vpp >= 2 (got vpp={vpp}); use {megatron_schedule(1).name}")
        elif self.chunks == 1 and vpp != 1:
            vpp_driven = ", ".join(s.name for s in SCHEDULES.values() if s.interleaves)
            problems.append(f"vpp={vpp} needs the {vpp_driven} schedule ({self.name} holds one chunk per rank)")
        elif vpp not in (1, self.chunks):
            problems.append(f"{self.name} holds exactly {self.chunks} chunks per rank (got vpp={vpp})")
        if pp == 1:
            return problems
        if self.even_pp and pp % 2:
            problems.append(f"{self.label} needs an even pp (got pp={pp})")
        if self.microbatches_multiple_of_pp and m % pp:
            problems.append(f"{self.label} needs micro-batches divisible by pp (got {m} % {pp} = {m % pp})")
        if self.even_microbatches and m % 2:
            problems.append(f"{self.label} needs an even number of micro-batches (got {m})")
        k = self.min_microbatches_per_pp
        if k and m < k * pp:
            times = "pp" if k == 1 else f"{k}*pp"
            problems.append(f"{self.label} needs micro-batches >= {times} (got {m} < {k * pp})")
        return problems


@lru_cache(maxsize=1024)  # asked for by every projection and legality check
def _stage_paths(layout: Layout, pp: int, chunks: int) -> tuple[tuple[Stage, ...], ...]:
    down = tuple((r, 0) for r in range(pp))
    up = tuple((r, 1) for r in reversed(range(pp)))
    if layout is Layout.LOOP:
        return (tuple((s % pp, s // pp) for s in range(pp * chunks)),)
    if layout is Layout.V:
        return (down + up,)
    return (down, up)


@lru_cache(maxsize=1024)
def _chunk_model_stage(layout: Layout, pp: int, chunks: int) -> tuple[tuple[int, ...], ...]:
    table = [[-1] * chunks for _ in range(pp)]
    for path in _stage_paths(layout, pp, chunks):
        for index, (rank, chunk) in enumerate(path):
            table[rank][chunk] = index
    return tuple(tuple(row) for row in table)


def _names(**names: str) -> Mapping[str, str]:
    return MappingProxyType(names)


# Megatron-core: megatron/core/pipeline_parallel/schedules.py, `get_forward_backward_func`.
_MEGATRON_1F1B = "forward_backward_pipelining_without_interleaving"
_MEGATRON_INTERLEAVED = "forward_backward_pipelining_with_interleaving"

GPIPE = PipelineSchedule(
    name="gpipe",
    source="Huang et al. 2019, GPipe",
    layout=Layout.LOOP,
    chunks=1,
    all_forwards_first=True,
    framework_names=_names(torchtitan="GPipe"),
)
ONE_F_ONE_B = PipelineSchedule(
    name="1f1b",
    source="Narayanan et al. 2021, PipeDream-Flush (Megatron-LM)",
    layout=Layout.LOOP,
    chunks=1,
    # fewer micro-batches than stages runs (warm-up = min(pp - rank - 1, m), Megatron-LM and DeepSpeed alike);
    # it is just mostly bubble
    framework_names=_names(megatron=_MEGATRON_1F1B, torchtitan="1F1B"),
)
INTERLEAVED = PipelineSchedule(
    name="interleaved",
    title="interleaved 1F1B",
    source="Narayanan et al. 2021, section 2.2 (Megatron-LM)",
    layout=Layout.LOOP,
    chunks=None,
    # Megatron-LM: "number of microbatches is not divisible by pipeline-model-parallel-size when using
    # interleaved schedule"; with a short last group the static orders deadlock
    microbatches_multiple_of_pp=True,
    min_microbatches_per_pp=1,
    framework_names=_names(megatron=_MEGATRON_INTERLEAVED, torchtitan="Interleaved1F1B"),
)
ZB_H1 = PipelineSchedule(
    name="zb-h1",
    source="Qi et al. 2023, Zero Bubble Pipeline Parallelism",
    layout=Layout.LOOP,
    chunks=1,
    split_backward=True,
    min_microbatches_per_pp=1,
    framework_names=_names(primus="enable_zero_bubble"),
)
ZB_V = PipelineSchedule(
    name="zb-v",
    source="Qi et al. 2024, Zero Bubble Pipeline Parallelism, section 6 (torchtitan's ZBVZeroBubble order)",
    layout=Layout.V,
    chunks=2,
    split_backward=True,
    framework_names=_names(primus="zero_bubble_v_schedule", torchtitan="ZBVZeroBubble"),
)
DUALPIPE = PipelineSchedule(
    name="dualpipe",
    source="DeepSeek-V3 technical report, section 3.2.1",
    layout=Layout.DUAL,
    chunks=2,
    param_copies=2,
    split_backward=True,
    pairs_forward_backward=True,
    even_pp=True,
    even_microbatches=True,
    min_microbatches_per_pp=2,
)
DUALPIPEV = PipelineSchedule(
    name="dualpipev",
    source='deepseek-ai/DualPipe, the "cut-in-half" variant',
    layout=Layout.V,
    chunks=2,
    split_backward=True,
    pairs_forward_backward=True,
    min_microbatches_per_pp=2,
    framework_names=_names(torchtitan="DualPipeV"),
)

SCHEDULES: Mapping[str, PipelineSchedule] = MappingProxyType(
    {s.name: s for s in (GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, ZB_V, DUALPIPE, DUALPIPEV)}
)
"""Every pipeline schedule paraplan models, by name, in the order help texts list them."""
DEFAULT_SCHEDULE = ONE_F_ONE_B.name
"""Megatron-LM's schedule without virtual stages."""


def schedule(name: str) -> PipelineSchedule:
    """The schedule called `name`; raises ConfigError naming the choices."""
    found = SCHEDULES.get(name)
    if found is None:
        raise ConfigError(f"unknown pipeline schedule {name!r}; choose one of {', '.join(SCHEDULES)}")
    return found


def megatron_schedule(vpp: int) -> PipelineSchedule:
    """The schedule Megatron-core runs for `vpp` virtual stages per rank: interleaved 1F1B when vpp > 1, else
    1F1B (`get_forward_backward_func`)."""
    return next(s for s in SCHEDULES.values() if "megatron" in s.framework_names and s.interleaves == (vpp > 1))


def validate_schedule(name: str, pp: int, vpp: int, num_microbatches: int) -> list[str]:
    """Every rule the schedule called `name` imposes, one line per violation, with its numbers."""
    found = SCHEDULES.get(name)
    if found is None:
        return [f"pipeline schedule {name!r} is unknown; choose one of {', '.join(SCHEDULES)}"]
    return found.problems(pp, vpp, num_microbatches)
