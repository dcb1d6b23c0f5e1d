"""Cold projections against the baseline commit, measured in the same run (issue 35).

Targets: the median cold projection over the public rows (SC'21 Tables 1 and 2, Korthikanti 2022, the Megatron-LM
README 2020, vTrain multi-node: shared/data/measured/public.csv) at least 10x faster than the baseline, and
llama3.1-405b on 16,384 H100 (TP8 PP16 VPP8, gbs 2048, seq 8192) cold in at most 5 ms.

"Cold" clears every cache of paraplan before each projection (the block and stage costs, the block operators, the
layouts, the schedules' task graphs ...), but for the files read once per process (presets, the fitted
calibration table, shipped profiles) and `expected_max_normal` (a constant per GPU count). "Cold, schedules kept"
keeps the schedules' task graphs (`sim.plan`, `sim.schedules`, `specs.schedule`: they depend on the schedule, pp,
vpp and the micro-batch count only, not on the model), the case of a session that has seen the pipeline shape.

The baseline is the code at BASELINE_REF (main before issue 35's speed work), checked out in a temporary git
worktree; the baseline and this checkout are measured in alternating subprocesses, --repeat times, and the ratios
are the medians' (the machine is shared: the load average is printed). The compiled loops (numba) are loaded
first in both, outside the timings.

Profile of a cold projection (cProfile, the 151 public rows x 3, schedules kept; 2026-12-04, before the changes;
cProfile inflates small calls, so read shares): block and stage costs (`_stage_sums`) 43% (the operators of a
block built for each context and recompute mode, their backward by `dataclasses.replace`, `_phase_times` per op),
the decoder layer kind looked up per layer per stage (`decoder_kind_of`) 12% (again in `model_flops_per_sequence`),
the pipeline simulation 24% (its breakdown, `summarize`, 14%), memory 4%. With the schedules cleared too, building
the schedule's plan (`sim.plan._build_plan`) adds as much as the rest. What changed: the decoder layer kinds once per
model (`graph.kinds.decoder_kind_names`), a block's operators and backward once per (kind, model, shard)
(`projection.block_ops_of`).

Measured 2026-12-04 against 2b721e1 (2 cores shared with other agents, load average 3-3.2; absolute times move
with the load, the ratios less), --repeat 3 --rounds 3, medians:
  public rows (151), cold:                 4.51 ms, baseline 5.45 ms: 1.21x  (target 10x: not met)
  public rows, cold, schedules kept:       3.18 ms, baseline 4.12 ms: 1.30x
  llama3.1-405b, cold:                    11.69 ms, baseline 13.11 ms: 1.12x (target <= 5 ms: not met)
  llama3.1-405b, cold, schedules kept:     5.71 ms, baseline 7.54 ms: 1.32x
  llama3.1-405b, warm:                     3.28 ms, baseline 3.53 ms: 1.08x
An earlier run at lower load (--repeat 1 --rounds 1): public rows cold 2.38 ms (baseline 2.96, 1.24x), schedules kept
1.90 ms (2.36, 1.24x); 405b cold 6.29 ms (6.90, 1.10x), schedules kept 3.39 ms (4.17, 1.23x), warm 1.51 ms. Where the
rest goes: the 405b's warm projection (every cost cached) is 1.5 ms, so a cold one at 5 ms leaves 3.5 ms to build
the interleaved plan of 32,768 tasks (`sim.plan._build_plan`, numpy, about 3 ms) and cost 6 blocks; a 10x faster cold
projection of the public rows needs the simulation's plan, timeline and breakdown themselves cheaper (a closed form
where the schedule allows one), not only the costing.

The simulation compiled (issue 35, branch speed, 2026-12-04). Profile before it (cProfile, cold, vs main b0e814a;
shares of project_specs): llama3.1-405b (its interleaved plan holds 4,096 tasks: 16 micro-batches x 16 ranks x 8
chunks x F and BW; not 32,768) the simulation 57% (building the plan `sim.plan._build_plan` 22%, of it the in-flight
candidates 6%; the breakdown `summarize` 15%, of it the critical-path walk 10% with the loops' per-position rows it
built for itself 7%; the timeline 7%, the duration tables 7%), stage and block costs 16%, stage layouts and
footprints (`_layout_parts`) 10%, decoder kinds 6%, memory 4%. Public rows: the simulation 50% (plan 25%, summarize
14% (walk 9%), timeline 7%), stage costs 25%, layouts 8%, decoder kinds 6%, model FLOPs 4%. The numpy plan builder
makes about a thousand numpy calls whatever the plan's size (0.3 ms for 2 tasks, 0.6 ms for 256, 2 ms for the
405b's 4,096). What changed, where the compiled loops are loaded (numba, the extra `fast`; the tuner and these
benchmarks load them first): the plan of a schedule without F&B pairs is built by one compiled kernel
(`sim.plan_jit`, `sim.kernels.build`: the same Plan field by field, tests/sim/test_plan_jit.py), the static
topological order (`kernels.static_order`: `priority_order` step by step, the same order), the critical-path walk
(`kernels.critical_waits`, no FSDP gates; the pure-Python walk now reads each task's dependency slots by task, not
through the loops' order-indexed rows) and the gradient-reduction tail (`kernels.grad_reduction`) run compiled;
without numba, or with PARAPLAN_NO_JIT=1, everything runs as before. Profile after (the same runs): 405b the
simulation 35% (plan 11%, of it the kernel 8%; timeline 13%; tables 5%; summarize 3%), stage costs 21%, layouts 22%,
decoder kinds 9%; public rows the simulation 31% (plan 12%, timeline 7%, tables 5%, summarize 4.5%), stage costs
37%, layouts 13%, decoder kinds 10%, model FLOPs 4%. The rest of a public row's cold projection is now the costing
(stage and block costs, layouts and footprints, decoder kinds), about two thirds: the 10x needs that cheaper too.
Measured 2026-12-04 19:45 (load average 0.7-1.7 on 2 shared cores), --repeat 3 --rounds 3, medians, vs 2b721e1:
  public rows (151), cold:                 1.818 ms, baseline 3.098 ms: 1.70x  (target 10x: not met)
  public rows, cold, schedules kept:       1.659 ms, baseline 2.239 ms: 1.35x
  llama3.1-405b, cold:                     3.443 ms, baseline 8.144 ms: 2.37x  (target <= 5 ms: met)
  llama3.1-405b, cold, schedules kept:     2.541 ms, baseline 4.147 ms: 1.63x
  llama3.1-405b, warm:                     1.033 ms, baseline 1.551 ms: 1.50x
and against main under this work (b0e814a), --repeat 1 --rounds 1 --identical: public cold 1.853 ms (2.409, 1.30x),
schedules kept 1.746 ms (1.829, 1.05x); 405b cold 3.485 ms (6.141, 1.76x), schedules kept 2.467 ms (3.204, 1.30x),
warm 1.072 ms (1.588, 1.48x); every public.csv projection identical (3,654 compared, 0 differ), with the compiled
paths (the digests now warm them up as the timings do) and with PARAPLAN_NO_JIT=1 alike. Rebased on 1153425 (main
with megatron-core's DDP bucket size), 19:53, load average 1.2-1.3: --repeat 3 --rounds 3 vs 2b721e1: public cold
1.768 ms (2.794, 1.58x), kept 1.569 (2.130, 1.36x); 405b cold 3.287 ms (6.790, 2.07x), kept 2.423 (4.010, 1.66x),
warm 1.029 (1.520, 1.48x); --repeat 2 --rounds 2 vs 1153425: public cold 1.789 ms (2.223, 1.24x), kept 1.602
(1.639, 1.02x); 405b cold 3.276 ms (5.730, 1.75x), kept 2.385 (2.849, 1.19x), warm 1.025 (1.449, 1.41x); every
public.csv projection identical to 1153425's (3,654, compiled and PARAPLAN_NO_JIT=1).

The cold path's Python trimmed (issue 35, branch speed3, 2026-12-05; every result the same to the bit). Profile
before (cProfile, the 151 public rows x 3 cold, main 311b530; shares of project_specs): the simulation 27% (plan 11%,
timeline 7%, tables 4%, summarize 3.6%), stage and block costs 42% (`block_cost` 21%, a block's operators and their
backward 9%), layouts 14% (of it the decoder kinds 10.5%: every registered kind asked for every layer), model FLOPs
3.9%, memory 3.0%, calibration 1.6%. Without the profiler, the median public row (pp 4, 1F1B, 32 micro-batches) spent
0.85 ms of 1.85 in the stage sums, 0.46 in the simulation, 0.16 in the layouts. What changed: a layer kind says
whether it can claim any layer of a model (`LayerKind.present`), so a model without those kinds skips the per-layer
lookup; the recompute of a whole forward is the forward's phase as timed, a partial one reuses its ops' seconds;
backward ops are built in one `Op` call each; `_phase_times` reads each op once and sums in locals; a GEMM's tile
counts once and no quantisation call for 16-bit GEMMs; `BlockContext.for_block` keeps the other-scope context;
`MemoryResult.peak` is found once. Profile after (the same runs): the simulation 34% (plan 14%, timeline 8.5%, tables
5.4%, summarize 4.1%), stage and block costs 44% (`block_cost` 22%, operators and backward 9.5%), layouts 4.3%
(decoder kinds 0.3%), model FLOPs 4.9%, memory 2.3%, calibration 1.0%. What is left is Python spread thin over every
step (per-op costing of about 40 ops x 3 phases x 2 chip speeds per block kind, building the ops as frozen dataclasses,
the plan, tables, timeline and summary): no single piece holds more than a fifth, so the 10x needs the blocks costed
without per-op Python (ops built as arrays by the graph builders, costed by one compiled call) and the simulation's
closed form where the schedule has one; neither is done. Measured 2026-12-05 08:48 (load average 1.1-1.8 on 2 shared
cores), --repeat 3 --rounds 3, medians, vs 2b721e1:
  public rows (151), cold:                 1.553 ms, baseline 2.838 ms: 1.83x  (target 10x: not met)
  public rows, cold, schedules kept:       1.359 ms, baseline 2.146 ms: 1.58x
  llama3.1-405b, cold:                     3.018 ms, baseline 6.950 ms: 2.30x  (target <= 5 ms: met)
  llama3.1-405b, cold, schedules kept:     2.163 ms, baseline 4.051 ms: 1.87x
  llama3.1-405b, warm:                     1.028 ms, baseline 1.524 ms: 1.48x
and vs main under this work (095c687), --identical: public cold 1.567 ms (1.826, 1.17x), kept 1.371 (1.640, 1.20x);
405b cold 2.989 ms (3.394, 1.14x), kept 2.134 (2.552, 1.20x), warm 1.029 (1.048, 1.02x); every public.csv projection
identical to 095c687's (3,654 compared, 0 differ; with PARAPLAN_NO_JIT=1 too).

Read-sets, faster dataclass inits, set-up per plan (issue 35, branch speed6, 2026-12-05; the changes are in
bench_tune.py's notes; every public.csv projection identical to 0f37c2b's, 3,654 compared, compiled and with
PARAPLAN_NO_JIT=1). The cold measure crashed on main (it called `cache_clear` on the memo's class, not its instance:
memo classes are skipped now). Profile of a cold projection before (cProfile, the 151 public rows, 0f37c2b; shares of
project_specs): stage and block costs 43%, the simulation 32% (plan 12.6%, timeline 8.4%, tables 4.9%, summarize
4.3%), model FLOPs 4.7%, layouts 3.9%, chunk costs 2.9%, memory 2.8%, validator 1.5%, calibration 1.5%: the costing of
a block per op is still what the 10x needs cheaper. A first memo key built from attrgetters and generators cost more
than the hand-written one on the cold path (about 65 us per projection profiled); the key is now one generated
function. Measured 16:42 (load average 1.4-1.7), --repeat 3 --rounds 3 --identical, medians, vs 0f37c2b:
  public rows (151), cold:                 1.715 ms, baseline 1.822 ms: 1.06x  (target 10x: not met)
  public rows, cold, schedules kept:       1.453 ms, baseline 1.591 ms: 1.09x
  llama3.1-405b, cold:                     3.188 ms, baseline 3.358 ms: 1.05x (target <= 5 ms: met)
  llama3.1-405b, cold, schedules kept:     2.283 ms, baseline 2.388 ms: 1.05x
  llama3.1-405b, warm:                     0.990 ms, baseline 1.064 ms: 1.08x

Fewer calls per projection (issue 35, branch speed7, 2026-12-06; every public.csv projection identical to main
55f0922's by --identical, 3,654 compared; tests/golden, sim, cost, tune, specs, core pass). `--profile` (new: the
cold projections under cProfile, by phase) before, main 55f0922, shares of project_specs (1.88 s profiled, 151 rows
x 3): stage and block costs 46.6% (a block's operators 8.5%, its phases timed per op 15.8%, block_cost 6.5%), the
simulation 31.4% (plan 12.1%, timeline 8.3%, tables 4.9%, summary 4.3%), model FLOPs 4.6%, layouts 4.0%, memory
3.2%, calibration 1.9%, validator 1.5%. What changed: `Op` and its shapes take `fastinit` (a block's operators built
about 25% faster); a ModelSpec's hash is computed once (`specs.model._HASHES`: the core's caches look the model up
tens of times per projection, 1.4 us each); the wave efficiency inline in `gemm_efficiency`; `_own_copy` without
`dataclasses.replace`; no weight-cast call without low-precision GEMMs; the optimizer step once per distinct rank;
alike ranks' memory parts built and added once (`pipeline_memory`, the peak found in the same pass); the duration
tables' rows once per ChunkCost object; `check_costs` once per chunk object. After (the same run, 1.72 s profiled):
stage and block costs 44.4% (operators 8.3%, phases 16.5%, block_cost 4.9%), simulation 33.2%, model FLOPs 4.6%,
layouts 4.0%, memory 3.8%. Measured 00:34 (load average 1.6-1.9: another process held one of the 2 cores),
--baseline-ref main --repeat 5, medians, vs 55f0922:
  public rows (151), cold:                 1.491 ms, baseline 1.652 ms: 1.11x  (target 10x: not met)
  public rows, cold, schedules kept:       1.276 ms, baseline 1.453 ms: 1.14x
  llama3.1-405b, cold:                     2.925 ms, baseline 3.192 ms: 1.09x (target <= 5 ms: met)
  llama3.1-405b, cold, schedules kept:     2.059 ms, baseline 2.275 ms: 1.10x
  llama3.1-405b, warm:                     0.935 ms, baseline 0.996 ms: 1.07x
After the shipped table's calibration built once per GPU and framework, gradient buckets counted once per distinct
stage and the last peaks kept on the plan, 00:43 (load average 1.6-1.9), --repeat 5, vs 55f0922: public cold 1.602 ms
(1.741, 1.09x), schedules kept 1.301 (1.562, 1.20x); 405b cold 3.299 ms (3.630, 1.10x), kept 2.035 (2.413, 1.19x),
warm 0.843 (1.041, 1.23x); every public.csv projection identical.
What is left is as flat as before: no phase but the blocks' per-op timing (16%) and the plan (12%, most of it the
large interleaved rows) holds more than a tenth; the 10x needs the per-op Python gone (a block's ops costed as
arrays by one compiled call, the slowest-chip and typical contexts in one pass) and the plan, tables, timeline and
summary fused into one compiled call.

A block's ops costed as arrays, measured and not kept; the per-op Python made cheaper instead (issue 35, branch
coldfast, 2026-12-06; every public.csv projection identical to main d19e9ba's by --identical, 3,654 compared, and
`paraplan validate` on public.csv the same to the byte; again after rebasing on c2da233, against c2da233). `--profile`
before, main d19e9ba (2.85 s profiled, 151 rows x 3; shares of project_specs): stage and block costs 41.1% (a block's
operators 7.7%, its phases timed per op 14.2%, block_cost 4.9%), the simulation 33.6% (plan 13.8%, timeline 8.0%, tables
6.0%, summary 4.0%), model FLOPs 5.6%, memory 4.6%, layouts 4.2%, calibration 2.3%. Per projection a block's phases are
timed under one context (pp 1: 34% of the public rows) or two (the slowest chip's and the typical one's). The arrays: a
table of a block's ops over its three phases (`OpTable`: FLOPs, bytes, GEMM dims, which efficiency and cap apply ...)
built once per (kind, model, shard), its GPU's terms (peaks, wave fill, the exponentials) once per GPU, then every op's
seconds in one numpy pass of about 20 calls, bit-identical to `compute_time_s` on all 46,385 ops of the public.csv
blocks (both calibrations). On the median public row's GPT layer (32 compute ops and 4 collectives): the numpy pass 8.8
us against 37 us per op in Python, but building the table from the `Op` objects 73 us and the GPU's terms 18 us: reading
the ops' fields costs as much as the formulas, and a table serves at most two contexts in a cold projection (the tuner's
blocks too: a block context follows from the shard's own axes). It never pays, so it is not kept; it would where the
graph builders emit the ops as arrays in the first place. What changed instead: the op formulas are one class,
`cost.compute.OpClock`, made once per block and context, which reads the peaks per precision, the bandwidth and the GEMM
tile once, with the GEMM's efficiency inline (the unused `gemm_efficiency` function removed; `compute_time_s` and the
other functions call it); the phase loop calls GEMMs without the dispatch, reads the context once and files a GEMM by
one weightless test (`is_weightless_gemm`: one set lookup, the MTP names included); `block_cost` copies the shared
phases only where it changes them; the collectives' source and kind strings are built once (an enum's `.value` is a
property); a backward collective's shape is built positionally.
A block's phases (min of 30 x 200 calls, same machine, vs d19e9ba): the GPT layer 60.0 -> 44.1 us, the head 17.8 ->
14.9 us, the embedding 10.7 -> 9.5 us. `--profile` after (1.82 s profiled; the baseline in the same minute 1.99 s):
stage and block costs 38.3% (operators 7.5%, phases 11.8%, block_cost 4.1%), the simulation 37.0% (plan 14.3%,
timeline 9.8%, tables 5.6%, summary 5.0%), model FLOPs 4.9%, layouts 4.3%, memory 4.1%, calibration 2.3%.
Measured 03:06 (load average 2.6-2.8: another helper held a core), --baseline-ref d19e9ba --repeat 5 --identical:
  public rows (151), cold:                 1.538 ms, baseline 1.618 ms: 1.05x  (target 10x: not met)
  public rows, cold, schedules kept:       1.259 ms, baseline 1.343 ms: 1.07x
  llama3.1-405b, cold:                     2.951 ms, baseline 3.153 ms: 1.07x (target <= 5 ms: met)
  llama3.1-405b, cold, schedules kept:     2.086 ms, baseline 2.172 ms: 1.04x
  llama3.1-405b, warm:                     0.888 ms, baseline 0.918 ms: 1.03x
At load 2.8-3.2 the same measure reads 1.02-1.05x on the public rows and swings the 405b's (five projections a
run) from 0.4x to 1.07x; the minimum of 40 cold 405b projections in one process, alternating (03:24): cold 3.28-3.31
ms on d19e9ba, 2.76-2.95 ms here; schedules kept 1.94-2.04 ms, 1.87-1.93 ms.
What is left in the costing is the per-op Python at its floor for `Op` objects (about 0.45 us an op in the phase
loop, 0.5-0.8 us an op's seconds, 1.1 us to build an op, a backward op too): the next step is the ops built as
arrays by the graph builders (a block's forward and backward as columns, `Op`s made only for the fitted-profile path
and the exporters), then costed in one pass for both contexts.

`--identical` also compares every projection of public.csv (all sources, analytic and with the shipped fitted
profiles: the whole Projection's repr) with the baseline's: all 3,654 identical (1,829 rows, 4 unread in both)
against 5a72f49, main under this work (against an older ref, figures that work merged since changed show too).

Run: python benchmarks/bench_projection.py [--repeat N] [--baseline-ref REF] [--no-baseline] [--identical] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from baseline_checkout import BASELINE_REF, REPO, baseline_src
from profile_phases import Phase, print_phases

PUBLIC_SOURCES = ("Narayanan2021_SC21", "Korthikanti2022", "MegatronLM_README_2020", "vTrain_MICRO24_multi")
PUBLIC_CSV = Path(os.environ.get("PARAPLAN_SHARED", REPO.parent / "shared")) / "data" / "measured" / "public.csv"
TARGET_RATIO = 10.0
TARGET_405B_MS = 5.0
# caches that hold what a process reads once (files) or a constant per GPU count: kept warm in a "cold" projection
FILE_CACHES = frozenset({"_load", "fitted_table", "load_shipped", "read_trace", "checkers", "_path_ref", "shipped_ref"})
CONSTANT_CACHES = frozenset({"expected_max_normal"})
SCHEDULE_CACHES = frozenset({"_build_small", "_build_large", "rank_programs", "_chunk_model_stage", "_stage_paths"})


def _caches(keep: frozenset[str]) -> list:
    """Every lru_cache of the loaded paraplan modules but those named in `keep`."""
    found = []
    for name, module in list(sys.modules.items()):
        if name.startswith("paraplan"):
            for attr, value in vars(module).items():
                if isinstance(value, type):  # a memo's class (its instances are the caches)
                    continue
                if hasattr(value, "cache_clear") and getattr(value, "__module__", "") == name and attr not in keep:
                    found.append(value)
    return found


def _timed_cold(project, caches: list) -> float:
    for cache in caches:
        cache.cache_clear()
    began = time.perf_counter()
    project()
    return (time.perf_counter() - began) * 1e3


def measure(rounds: int) -> dict[str, float]:
    """The figures of the paraplan this process imports (this checkout, or the baseline's)."""
    from paraplan.projection import project_specs
    from paraplan.sim import loops_jit
    from paraplan.specs.presets import model_preset, system_preset
    from paraplan.specs.training import TrainingSpec
    from paraplan.validate.measured import read_rows, run_from_row

    if loops_jit.available():
        loops_jit.warm_up()
    rows = [row for row in read_rows(PUBLIC_CSV) if row["source"].startswith(PUBLIC_SOURCES)]
    runs = [run_from_row(row) for row in rows]
    projects = [lambda m=m: project_specs(m.model, m.system, m.train) for m in runs]
    for project in projects:  # imports, presets and files loaded once
        project()
    model = model_preset("llama3.1-405b")
    system = system_preset("h100-sxm5-80gb", 16384)
    train = TrainingSpec().with_values(
        tp=8, pp=16, vpp=8, gbs=2048, seq=8192, mbs=1, sp=True, pipeline_schedule="interleaved",
        account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True,
        use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True,
    )  # fmt: skip
    big = lambda: project_specs(model, system, train)  # noqa: E731
    big()
    out: dict[str, float] = {"rows": len(runs)}
    for label, keep in (
        ("cold", FILE_CACHES | CONSTANT_CACHES),
        ("cold_plans_kept", FILE_CACHES | CONSTANT_CACHES | SCHEDULE_CACHES),
    ):
        caches = _caches(keep)
        per_row = [statistics.median(_timed_cold(p, caches) for _ in range(rounds)) for p in projects]
        out[f"public_{label}_ms"] = statistics.median(per_row)
        out[f"llama405b_{label}_ms"] = statistics.median(_timed_cold(big, caches) for _ in range(max(5, rounds)))
    warm = []
    for _ in range(20):
        began = time.perf_counter()
        big()
        warm.append((time.perf_counter() - began) * 1e3)
    out["llama405b_warm_ms"] = statistics.median(warm)
    return out


# phases of a cold projection: (label, [(file suffix, function), ...]) whose cumulative CPU times add up
PHASES: tuple[Phase, ...] = (
    ("projection (project_specs)", (("paraplan/projection.py", "project_specs"),)),
    ("  stage and block costs (_stage_sums_of, _chunk_cost)", (("paraplan/projection.py", "_stage_sums_of"),
                                                               ("paraplan/projection.py", "_chunk_cost"))),
    ("    a block's operators, forward and backward (block_ops_of)", (("paraplan/projection.py", "block_ops_of"),)),
    ("    a block's phases timed per op (block_phases)", (("paraplan/cost/block.py", "block_phases"),)),
    ("    a block per recompute mode (block_cost)", (("paraplan/cost/block.py", "block_cost"),)),
    ("  pipeline simulation (sim.pipeline.play_pipeline)", (("paraplan/sim/pipeline.py", "play_pipeline"),)),
    ("    the schedule's plan (sim.plan.build_plan)", (("paraplan/sim/plan.py", "build_plan"),)),
    ("    duration tables (sim.tables.build_tables)", (("paraplan/sim/tables.py", "build_tables"),)),
    ("    timeline (sim.engine.fast_timeline)", (("paraplan/sim/engine.py", "fast_timeline"),)),
    ("    summary (sim.summary.summarize)", (("paraplan/sim/summary.py", "summarize"),)),
    ("  memory per rank (stage_footprints, pipeline_memory)", (("paraplan/projection.py", "stage_footprints"),
                                                              ("paraplan/memory/model.py", "pipeline_memory"))),
    ("  layouts (_layout_parts)", (("paraplan/projection.py", "_layout_parts"),)),
    ("  model FLOPs (model_flops_per_sequence)", (("paraplan/projection.py", "model_flops_per_sequence"),)),
    ("  validator (specs.validate.check)", (("paraplan/specs/validate.py", "check"),)),
    ("  calibration (calibration_for, at_scale)", (("paraplan/cost/calibration.py", "calibration_for"),
                                                   ("paraplan/cost/calibration.py", "at_scale"))),
)  # fmt: skip


def profile_cold(rounds: int) -> None:
    """The public rows' cold projections (`measure`'s) under cProfile: the CPU share of each phase, and the top
    functions."""
    import cProfile
    import pstats

    from paraplan.projection import project_specs
    from paraplan.sim import loops_jit
    from paraplan.validate.measured import read_rows, run_from_row

    if loops_jit.available():
        loops_jit.warm_up()
    runs = [run_from_row(row) for row in read_rows(PUBLIC_CSV) if row["source"].startswith(PUBLIC_SOURCES)]
    for m in runs:  # imports, presets and files loaded once
        project_specs(m.model, m.system, m.train)
    caches = _caches(FILE_CACHES | CONSTANT_CACHES)
    profiler = cProfile.Profile()
    for _ in range(rounds):
        for m in runs:
            for cache in caches:
                cache.cache_clear()
            profiler.enable()
            project_specs(m.model, m.system, m.train)
            profiler.disable()
    stats = pstats.Stats(profiler)
    total = sum(tt for _, _, tt, _, _ in stats.stats.values())  # type: ignore[attr-defined]
    print(f"\n== profile: {len(runs)} public rows x {rounds} cold projections, {total:.2f} s profiled; shares of "
          "project_specs ==")  # fmt: skip
    print_phases(stats, PHASES, of_first=True)


def digests() -> dict[str, str]:
    """Per row of public.csv (every source), the SHA-256 of the whole projection's repr (step time, breakdown,
    memory, FLOPs ...), analytic and with the shipped fitted profile of the row's GPU (where one ships)."""
    import hashlib

    from paraplan.cost.profiled import shipped_ref
    from paraplan.projection import ProjectionOptions, project_specs
    from paraplan.sim import loops_jit
    from paraplan.validate.measured import read_rows, run_from_row

    if loops_jit.available() and not os.environ.get("BENCH_DIGESTS_NO_WARM_UP"):
        loops_jit.warm_up()  # as `measure`: the compiled paths the timings take (plan, order, walk, loops)
    out = {}
    for row in read_rows(PUBLIC_CSV):
        try:
            m = run_from_row(row)
        except Exception as exc:  # a row the reader rejects: the same in both, or a difference
            out[row["id"]] = f"unread: {type(exc).__name__}"
            continue
        for label, options in (("", None), ("fitted ", ProjectionOptions(profile=shipped_ref(m.system.gpu.name)))):
            projection = project_specs(m.model, m.system, m.train, options)
            out[label + row["id"]] = hashlib.sha256(repr(projection).encode()).hexdigest()
    return out


def _subprocess(src: Path, rounds: int, identical: bool = False) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "PYTHONPATH": str(src)}
        if identical:
            subprocess.run([sys.executable, __file__, "--digests", out.name], check=True, env=env, cwd=src.parent)
            return json.loads(Path(out.name).read_text())
        command = [sys.executable, __file__, "--measure", out.name, "--rounds", str(rounds)]
        subprocess.run(command, check=True, env=env, cwd=src.parent)
        return json.loads(Path(out.name).read_text())


FIGURES = (
    ("public_cold_ms", "public rows, median cold projection"),
    ("public_cold_plans_kept_ms", "public rows, median cold, schedules kept"),
    ("llama405b_cold_ms", "llama3.1-405b 16,384 H100, cold"),
    ("llama405b_cold_plans_kept_ms", "llama3.1-405b, cold, schedules kept"),
    ("llama405b_warm_ms", "llama3.1-405b, warm"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="alternating baseline/current measurements")
    parser.add_argument("--rounds", type=int, default=3, help="cold projections of each row per measurement")
    parser.add_argument("--baseline-ref", default=BASELINE_REF, help="git commit of the baseline")
    parser.add_argument("--no-baseline", action="store_true", help="this checkout only")
    parser.add_argument("--identical", action="store_true", help="also compare every public.csv projection")
    parser.add_argument("--profile", action="store_true", help="profile the cold projections (cProfile), by phase")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # a subprocess: write the figures (JSON) here
    parser.add_argument("--digests", help=argparse.SUPPRESS)  # a subprocess: write `digests()` (JSON) here
    args = parser.parse_args()
    if args.measure:
        Path(args.measure).write_text(json.dumps(measure(args.rounds)))
        return
    if args.digests:
        Path(args.digests).write_text(json.dumps(digests()))
        return
    if args.profile:
        profile_cold(args.rounds)
        return
    print(f"CPUs: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}", flush=True)
    current: list[dict[str, float]] = []
    base: list[dict[str, float]] = []
    with nullcontext(None) if args.no_baseline else baseline_src(args.baseline_ref) as base_src:
        for _ in range(args.repeat):
            if base_src is not None:
                base.append(_subprocess(base_src, args.rounds))
            current.append(_subprocess(REPO / "src", args.rounds))
        if args.identical and base_src is not None:
            before, now = _subprocess(base_src, 0, identical=True), _subprocess(REPO / "src", 0, identical=True)
            differ = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
            print(f"every public.csv projection (analytic and fitted; whole repr) vs {args.baseline_ref}: "
                  f"{len(now)} compared, {len(differ)} differ {differ[:10]}")  # fmt: skip
    print(f"{int(current[0]['rows'])} public rows; {args.repeat} alternating runs, medians; load average now "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    for key, label in FIGURES:
        now = statistics.median(c[key] for c in current)
        line = f"{label:<44} {now:8.3f} ms"
        if base:
            before = statistics.median(b[key] for b in base)
            line += f"   baseline {args.baseline_ref} {before:8.3f} ms   {before / now:5.2f}x faster"
        print(line)
    if base:
        ratio = statistics.median(b["public_cold_ms"] for b in base) / statistics.median(
            c["public_cold_ms"] for c in current
        )
        verdict = "met" if ratio >= TARGET_RATIO else "not met"
        print(f"target: public rows cold >= {TARGET_RATIO:.0f}x faster: {ratio:.2f}x ({verdict})")
    big = statistics.median(c["llama405b_cold_ms"] for c in current)
    verdict = "met" if big <= TARGET_405B_MS else "not met"
    print(f"target: llama3.1-405b cold <= {TARGET_405B_MS:.0f} ms: {big:.2f} ms ({verdict})")


if __name__ == "__main__":
    main()
