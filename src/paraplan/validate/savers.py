"""The memory saver a measured run that ran must have used when its row leaves recompute unstated.

A published recipe (NeMo / Megatron-Bridge performance summaries) that states no recompute and no offload, and that
the memory model calls OOM with neither, ran: whoever ran it saved memory somehow, as a user running the recipe would
have to. The row is projected with the first saver that fits, in the order of what costs least: activation CPU
offload of the first N decoder layers (Megatron `--cpu-offloading-num-layers`, smallest N; only where Megatron
allows it: pp 1, no CUDA graphs), then Megatron `--recompute-modules` taken cumulatively in `SAVER_MODULES` order
(those the model has), then full recompute of the first N layers of each stage (`--recompute-method block
--recompute-num-layers N`, smallest N). Recorded as an assumption; never applied when the row states recompute.
Only for frameworks on megatron-core, whose knobs these are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache

from paraplan.errors import ConfigError
from paraplan.graph.partition import pipeline_split, split_stages
from paraplan.memory.model import MemoryResult
from paraplan.projection import project_specs
from paraplan.specs.knobs import knob_problems
from paraplan.specs.model import ModelSpec
from paraplan.specs.training import MEGATRON_CORE_DDP_FRAMEWORKS, TrainingSpec
from paraplan.validate.measured import Assumption, MeasuredRun

SAVER_MODULES = ("moe_act", "core_attn", "mla_up_proj", "mlp", "moe")
"""`--recompute-modules` tried cumulatively, lightest recomputation first: the MoE activation and the core attention
(elementwise and attention kernels, no GEMM), MLA's up-projections, then the dense MLPs and the MoE layers whole."""
WHY = "row leaves recompute unstated; OOM with none"
SAVER_KEY = "memory saver"
"""The key of the saver's `Assumption` (its value says which saver, `WHY` why)."""

MemoryOf = Callable[[TrainingSpec], MemoryResult]


def states_recompute(row: dict[str, str]) -> bool:
    """Whether the row states its recompute (the `recompute` column; no column states activation offload)."""
    return bool((row.get("recompute") or "").strip())


def _valid(model: ModelSpec, train: TrainingSpec) -> bool:
    return not knob_problems(model, train)


def _fits(memory_of: MemoryOf, train: TrainingSpec) -> bool:
    try:
        return memory_of(train).fits
    except ConfigError:  # a layout the saver makes invalid (a stage without layers to recompute, ...)
        return False


def _smallest_fitting(specs: Sequence[TrainingSpec], memory_of: MemoryOf) -> int | None:
    """The index of the first of `specs` that fits, for specs whose memory falls as the index grows (bisection);
    None when the last does not fit."""
    if not specs or not _fits(memory_of, specs[-1]):
        return None
    lo, hi = 0, len(specs) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _fits(memory_of, specs[mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _offload(model: ModelSpec, train: TrainingSpec, memory_of: MemoryOf) -> tuple[TrainingSpec, str] | None:
    specs = [replace(train, cpu_offloading_num_layers=n) for n in range(1, model.num_layers)]
    specs = [t for t in specs if _valid(model, t)]
    found = _smallest_fitting(specs, memory_of)
    if found is None:
        return None
    n = specs[found].cpu_offloading_num_layers
    return specs[found], f"activation offload of {n} of {model.num_layers} layers (cpu_offloading_num_layers={n})"


def _modules(model: ModelSpec, train: TrainingSpec, memory_of: MemoryOf) -> tuple[TrainingSpec, str] | None:
    chosen: list[str] = []
    for module in SAVER_MODULES:
        trial = replace(train, recompute_granularity="selective", recompute_modules=(*chosen, module))
        if not _valid(model, trial):  # a module the model has not (moe_act without experts, mla_up_proj without MLA)
            continue
        chosen.append(module)
        if _fits(memory_of, trial):
            return trial, f"selective recompute of {','.join(chosen)} (recompute_modules)"
    return None


def _full_layers(model: ModelSpec, train: TrainingSpec, memory_of: MemoryOf) -> tuple[TrainingSpec, str] | None:
    most = max((stage.num_layers for stage in split_stages(model, pipeline_split(train))), default=0)
    specs = [
        replace(train, recompute_granularity="full", recompute_method="block", recompute_num_layers=n)
        for n in range(1, most + 1)
    ]
    found = _smallest_fitting(specs, memory_of)
    if found is None:
        return None
    n = found + 1
    return specs[found], f"full recompute of {n} layers per stage (recompute_method=block, recompute_num_layers={n})"


SAVERS = (_offload, _modules, _full_layers)


def with_memory_saver(run: MeasuredRun, memory_of: MemoryOf) -> MeasuredRun | None:
    """`run` with the first memory saver that fits (`SAVERS`, in order), the choice among its assumptions; None when
    the run is not a candidate (not megatron-core, or its defaults already recompute or offload) or nothing fits."""
    train = run.train
    if train.framework not in MEGATRON_CORE_DDP_FRAMEWORKS or train.recompute_granularity != "none":
        return None
    if train.cpu_offloading_num_layers:
        return None
    for saver in SAVERS:
        found = saver(run.model, train, memory_of)
        if found is not None:
            saved, what = found
            return replace(run, train=saved, defaults_used=(*run.defaults_used, Assumption(SAVER_KEY, what, WHY)))
    return None


@lru_cache(maxsize=1024)
def memory_saver_for(run: MeasuredRun) -> MeasuredRun | None:
    """`with_memory_saver` judged by the memory of the run's projection with the shipped calibration: the choice is
    one per run whatever calibration projects its time (`validate.calibrate` projects each row under hundreds of
    trial constants), and found once per process."""
    return with_memory_saver(run, lambda train: project_specs(run.model, run.system, train).memory)
