"""The full tuner search for llama3.1-70b on 1,024 H100 (gbs 1024, seq 8192), against its targets.

Targets (the tuner issue): the whole search under 60 s on a 2-core machine, at least 2,000 candidates per
second projected after the memory filter, and a best configuration at least as fast as NVIDIA's published
recipe for the setting: the NeMo / Megatron-Bridge Llama3 70B H100 performance recipe, TP4 PP4 VPP5 CP2 MBS1
(sequence parallel, distributed optimizer with overlapped grad reduce and param gather, TP comm overlap, no
recompute), projected with the same core, in BF16 and FP8.

With numba installed (the extra `fast`), the simulator's loops run compiled; the benchmark then first runs
itself with PARAPLAN_NO_JIT=1 in a subprocess (the pure-Python loops: the baseline) and prints the ratios.
The compiled loops are loaded (or compiled) before the timed search, and that time is printed on its own.

`--profile` runs the BF16 search in one process under cProfile and prints where its CPU time goes, by phase
(shares of the whole run; the indented lines are parts, the memory line counts the projection's and the filter's).
Measured on a loaded 2-core machine (2026-12-03, issue 35; cProfile inflates small calls, so read the shares):
  projection (project_specs) 51%: pipeline simulation (play_pipeline) 23%, stage and block costs 15%, validator 1%
  memory filter (GroupMemory: plan, verdicts) 35%: per-variant TrainingSpec (dataclasses.replace), the schedule's
      in-flight peaks (peak_live_bytes), the stages' footprints
  memory per rank (pipeline_memory + stage footprints, in the projection and the filter) 18%
  candidates (to_training, with_axes, legality screen) 9.5%
What the refactors since a895cf6 added (CPU of this benchmark, --workers 1 --bf16-only, same session, back to back,
a loaded machine: load average 3-7 on 2 cores): a895cf6 11.2-16.2 s (6,549 projected, 1.70-2.47 ms each), 0f39ff2
16.0-19.3 s (5,961 projected: the memory model now rejects more; 2.68-3.23 ms each). The memory filter now asks the
projection's memory model (`pipeline_memory` per rank and variant, `stage_footprint` per stage): each footprint
lookup hashed the whole ModelSpec (2-5 us, once per stage: 20-128 per variant) and each variant built its
TrainingSpec with `dataclasses.replace` twice (screen and projection, 40-80 us each). Looking footprints up once per
distinct stage and building a variant's spec once took the filter's footprint step from 12.8 s to 3.2 s profiled,
but the whole run only to 13.5-17.9 s (2.27-3.00 ms each, 5 runs; 0f39ff2 16.7-17.7 s in the same 5 rounds): within
the noise of this machine. The rest of the gap is the filter's per-rank memory (`memory/model.py`: `rank_memory`,
`state_bytes` per rank and variant), not yet changed, and the fewer candidates that fit (a smaller denominator).

`--versus [REF]` measures the rates against the code at a commit (default `baseline_checkout.BASELINE_REF`, main
before issue 35's speed work) in the same run: the BF16 search with the analytic model (target >= 3,000
candidates/s after the memory filter) and with a fitted profile (target >= 2,000/s: the same search on 1,024 GH200
with the shipped GH200 profile, `tune --profile`; no H100 profile ships), each in alternating subprocesses of the
baseline and this checkout, `--repeat` times, medians. The wall-clock rate counts the other processes of a shared
machine; the rate by CPU time (the evaluated candidates over this process's and its workers' CPU seconds, per core)
does not. Measured 2026-12-04 (--versus --repeat 2 --workers 2, load average 3-5 on 2 cores), against 2b721e1:
  analytic: 286/s wall (baseline 326/s); by CPU time 914/s (baseline 910/s, 1.00x): target 3,000/s not met
  fitted:   176/s wall (baseline 151/s); by CPU time 548/s (baseline 497/s, 1.10x): target 2,000/s not met
  (5,982 and 947 candidates projected, the same best configurations and step times in both.) The cold-path changes
  (block operators per shape, decoder kinds per model) hardly touch the tuner, whose block and stage costs are
  cached already; what it spends (--profile, 2026-12-04, 5,982 projected, 16.8-19.4 s profiled): the projection
  49% (the simulation 21%, block and stage costs 13%, memory per rank 20% with the filter's), the memory filter 34%
  (GroupMemory: the schedules' plans 9%, pipeline_memory per variant 11%, TrainingSpec per variant by
  dataclasses.replace 3%), candidates 10% (Candidate.of / with_axes / to_training: dataclasses.replace 4%). Batching
  candidates (one simulation shared by the variants of a structure, the filter's memory reused by the projection)
  is what is left to do for the 3,000/s target.

Batching, 2026-12-04 (issue 35, the same results to the bit: tests/golden, tests/tune/test_memfilter.py on every
part of every rank): the filter's memory of a variant is handed to its projection (`project_specs(memory=)`), a
structure's ranks' weights, gradients and optimizer states are computed once for all its recompute variants
(`memory.model.RankStates`), layouts and stage footprints are shared by all structures by value (`StageCache`:
split and layer modes, shard and blocks, without hashing the ModelSpec), training specs are built positionally
(`specs.training.spec_with`, ~6 us against ~34 us for `dataclasses.replace`), one-chunk ranks read their in-flight
peak as count x bytes (`sim.plan.peak_live_bytes`), and the plan's memory moments (issue 33, ~7 ms a plan) are found
only for the ranks that read them (torchtitan under PP), not for every plan of a Megatron search.
--versus --repeat 2 --workers 2, by CPU time (load average 2-5 on 2 cores):
  against 8559840 (main before issue 33's memory moments): analytic 919/s -> 1,143/s (1.24x), fitted 531/s ->
      613/s (1.15x)
  against 24beabb (main with them): analytic 459/s -> 1,092/s (2.38x), fitted 373/s -> 638/s (1.71x)
  (5,978 and 948 projected, the same best step times.) --profile now (16.9 s profiled; 22.7 s before): the
  projection 51% (the simulation 24%, block and stage costs 15%), the memory filter 35% (building the schedules'
  plans, cold, about a third of it; pipeline_memory 14%), candidates 7%. The 3,000/s and 2,000/s targets are not
  met: what is left is the simulation per variant and the filter's per-variant memory.

The simulation compiled (issue 35, branch speed, 2026-12-04: the plan builder, static order, critical-path walk
and gradient-reduction tail as numba kernels where the compiled loops are loaded, `sim.plan_jit`, `sim.kernels`;
the same results to the bit). --profile with it (37.9 s profiled on a loaded machine, 5,978 projected): the
projection 56% (the simulation 27%, stage and block costs 16%, memory per rank 15%), the memory filter 30%,
candidates 8%; the compiled plan builds 1.5% (265 plans, 0.57 s). The plans were a third of the filter's time
before; what is left per variant is Python: duration tables, summaries, per-rank memory, specs and candidates.
--versus --repeat 2 --workers 2, by CPU time: against b0e814a (main under this work; load average 1.7): analytic
1,404/s -> 1,609/s (1.15x), fitted 902/s -> 971/s (1.08x); against 2b721e1 (load average 1.7-4): analytic 845/s ->
1,143/s (1.35x), fitted 542/s -> 755/s (1.39x); wall 335 -> 477/s and 188 -> 317/s. The same best step times. The
3,000/s and 2,000/s targets are not met: batching the variants of a structure (one simulation, batched tables) is
what is left.

Per-candidate Python trimmed (issue 35, branch speed3, 2026-12-05; the same evaluations, the same top five and best
step times to the bit, analytic and fitted). --profile before: the projection 53% (the simulation 23%, stage and block
costs 18%, memory per rank 15.5%), the memory filter 34%, candidates 7%; the fitted search (GH200 profile) spent 12.5%
of its time matching the profile's GPU name to a preset (`gpu_chip` -> `preset_for_device`, twice per collective) and
its regressors were scanned again per collective (`has_collective`, `measured_gpus_per_node`). What changed: those
three found once (a cache on `gpu_chip`, memos on the `Profile`); the filter's stage footprints once per (split, shard,
layer modes) for every structure; `MemoryResult.peak` once (the filter, the peak and the fit each asked); a one-stage
rank's figures read directly and the stage maxima in one pass in `pipeline_memory`; and the cold-path changes above
(`bench_projection.py`). --versus --repeat 2 --workers 2, 2026-12-05 08:50 (load average 1.8-2.9), by CPU time:
against 095c687 (main under this work) analytic 1,042/s -> 1,563/s (1.50x), fitted 924/s -> 1,028/s (1.11x); against
2b721e1 analytic 1,211/s -> 1,547/s (1.28x), fitted 745/s -> 1,014/s (1.36x); wall 522 -> 782/s and 463 -> 514/s
(vs 095c687). The best step times equal 095c687's (2b721e1's differ by the model changes merged since, not by this
work). The 3,000/s and 2,000/s targets are not met: what is left is Python per variant (the simulation's tables and
summary, per-rank memory, specs and candidates), the batching of a structure's variants into one simulation.

Batching by structure (issue 35 part 3, branch tune4, 2026-12-05; every tuner result identical: the same evaluated,
illegal, memory-rejected and dominated counts, the same top five, and every evaluation's figures to the bit, analytic
and fitted, 1 and 2 workers; 3,654 public projections identical, compiled and PARAPLAN_NO_JIT=1). Where the time went
before (timers around the phases, serial search, by CPU, per projected candidate; analytic 1.09 ms, fitted 1.65 ms):
the simulation 25% / 19% (its timeline 12%, duration tables 6%, summary 4%), the memory filter's variants 20% / 23%
(pipeline_memory 9% / 10%), the schedules' plans 11% / 18% (one per plan shape: nearly every shape is projected too),
stage sums built cold 9.5% / 10.5% (of them the blocks' phases, per recompute mode), chunk costs 5% (the data-parallel
collectives per stage), the garbage collector 7%, candidates and the validator 5%. Projected groups hold one
projection each (5,960 of 5,961: the first variant that fits dominates the rest), so variants do not share a
simulation; what structures share is costing. What changed: a block's three phases timed once for all its recompute
modes (`cost.block.block_phases`); a stage part's addends cached per (kind, mode, count, shard, context) and added in
the same order; `_dp_times` once per distinct input (`projection._DpTimesMemo`, its records replayed in order); a
structure whose ranks' floors (states, buffers, context: `memory.model.states_floor_bytes`) exceed the usable HBM is
rejected whole, before its plan and variants (floating-point addition is monotone; 883 analytic and 497 fitted
structures); one-chunk ranks' peaks inline, a group's variants built as candidates only when projected, duration
tables without parts from one array; pool workers freeze the inherited heap out of the collector and collect less
often. Tried and dropped: copying the memory of ranks with the same stages (their peaks differ: no hits), cutting tasks
by model-stage key (8% fewer cold stage sums across workers, no measurable CPU). `--versus` now loads the compiled
loops before its timed searches, as the benchmark's own run does (the first search paid ~0.9 s of numba load).
Serial search, by CPU, alternating, 2026-12-05 10:22 (load average 0.2-0.5): analytic 968/1,029/s -> 1,062/986/s
(about 1.03x), fitted 656/711/s -> 917/883/s (about 1.32x). --versus 5ebdef8 --repeat 3 --workers 2 (09:27, load
average 2.1-2.5), by CPU: analytic 1,524/s -> 1,757/s (1.15x), fitted 958/s -> 1,264/s (1.32x); wall 763 -> 897/s
and 484 -> 641/s. The 3,000/s and 2,000/s targets are not met. What is left, per projected candidate (serial,
analytic): the simulation ~265 us (timeline 128, tables 56, summary 55), the filter's variants ~190 us, plans ~110 us,
cold stage sums ~90 us, chunk costs ~50 us; with 2 workers the cold costs (blocks, stage sums, plans) are built in
both (1,417 + 1,481 blocks against 1,499 serial; 402 plans against 317) and the parent spends ~1.2 s (seed, listing,
ordering): sharing cold costs across workers, or plans and timelines cheaper per call, is the next step.

Read-sets, faster dataclass inits, set-up per plan (issue 35, branch speed6, 2026-12-05; every tuner result identical
to 0f37c2b by `--identical`: counts, top five and every evaluation's repr, analytic and fitted, 1 and 2 workers; 3,654
public projections identical, compiled and PARAPLAN_NO_JIT=1). --profile before (0f37c2b, 12.2 s profiled, 5,964
projected, load average 0.7): the projection 51% (the simulation 22%, stage and block costs 15%, memory per rank 10%,
validator 2%), the memory filter 28%, candidates 7%; no function above 3% of its own: the builtins max and sum (the
memory model's per-rank sums, the tables' per-chunk rows), the compiled plan builder (265 plans), `_chunk_cost`
(33,912 calls), `_ranks_states`, `peak_live_bytes`, `spec_with`, `layout_problems`. The hot frozen dataclasses'
generated `__init__`s (counted by wrapping them: 34,028 TrainingSpecs, 33,912 ChunkCosts and ChunkExtras, 122,007
RankMemorys, 12,140 BlockContexts, 12,993 Shards per search) cost about 0.9 s of it. What changed: `paraplan.fastinit`
gives those classes an `__init__` that sets the slots through their descriptors, bound once (TrainingSpec(*values)
5.4 -> 3.0 us; the same objects, errors and `__post_init__`: tests/core/test_fastinit.py); TrainingSpec pickles as
its field values (dump and load 18 -> 9 us, the same bytes); `_dp_times` is memoized by its declared read-set
(`paraplan.readset.ReadSetMemo`, `projection.DP_TIMES_READS`: tests/core/test_readset.py varies every field and
argument: equal keys give equal results, and dropping any declared read makes the memo stale), its key built by one
generated function; the duration tables are gathered through an index layout kept per plan, with the entry the
compiled loops append (no `np.append` per call), and each plan's last tasks found once (tests/sim/test_tables.py).
Tried and dropped: `_chunk_cost` memoized by its read-set (16% hits: 14,280 misses in 17,056 calls, the micro-batch
count and bucket size differ per candidate; the key cost what the hits saved). --profile after: 11.5 s profiled, the
projection 51% (the simulation 20%, stage and block costs 18%, memory per rank 11%), the memory filter 26%, candidates
7%. --versus 0f37c2b --repeat 3 --workers 2 (16:40, load average 1.4-2.5), by CPU: analytic 1,732/s -> 1,833/s
(1.06x), fitted 1,250/s -> 1,384/s (1.11x); wall 877 -> 915/s and 634 -> 697/s. Serial,
--versus 0f37c2b --repeat 3 --workers 1 (16:50, load average 0.2-0.7), by CPU: analytic 1,055/s -> 1,086/s (1.03x),
fitted 936/s -> 974/s (1.04x). The pooled ratios above the serial ones are the cheaper pickles (each evaluation
brings its candidate's TrainingSpec back: ~9 us less each, about 1%) and this machine's noise, not separated. The
3,000/s and 2,000/s targets are not met: what is left is spread over the candidate's Python (no function holds more
than 3%); batching a structure's variants or sharing cold costs across workers is what would move it.

Fewer calls per candidate (issue 35, branch speed7, 2026-12-06; every tuner result identical to main 55f0922 by
`--identical main`: counts, top five and every evaluation, analytic and fitted, 1 and 2 workers; 3,654 public
projections identical). --profile before (55f0922, 11.8 s profiled): the projection 49.2% (simulation 20.4%, stage
and block costs 13.8%, memory per rank 11.6%, validator 2.1%), the memory filter 26.7%, candidates 7.3%. What changed
besides the cold-path changes (`bench_projection.py`): `pipeline_memory` builds and adds up the parts of alike ranks
once and finds the peak in the same pass (`MemoryResult.peak` was a max over ranks summing every rank's parts), the
filter's floors once per RankStates, ranks of several chunks holding the same footprints share their states without
summing again; `layout_problems` keeps its last answer for the same spec objects (the tuner screens a structure's
spec, then projects that very spec: 14,172 -> 10,278 runs of the validator); the optimizer step once per distinct
rank; `optimizer_per_rank_s` without a union type built per call. --profile after (the same minutes, 11.2 s; 10.2 s
alone earlier): the projection 48.3% (simulation 21.5%, stage and block costs 13.2%, memory per rank 9.9%, validator
0.9%), the memory filter 24.9%, candidates 8.0%. --versus main --repeat 3 (00:35-00:37, load average 1.9-2.6: another
process held one of the 2 cores), by CPU: 2 workers analytic 1,950/s -> 2,065/s (1.06x), fitted 1,404/s -> 1,430/s
(1.02x); serial analytic 1,152/s -> 1,220/s (1.06x), fitted 944/s -> 945/s (1.00x; an earlier run 720 -> 874/s: the
fitted search projects 946 candidates in about a second, within this machine's noise). The 3,000/s and 2,000/s
targets are not met. After the calibration built once per GPU and framework, gradient buckets once per distinct stage
and the last peaks kept on the plan (the filter's, asked again by the projection), --versus main --repeat 3 at 00:44-
00:46 (load average 1.9-2.5), by CPU: 2 workers analytic 1,854/s -> 2,120/s (1.14x), fitted 1,267/s -> 1,515/s
(1.20x); serial analytic 1,132/s -> 1,253/s (1.11x), fitted 880/s -> 960/s (1.09x); every result identical
(`--identical main`). Tried and dropped: sharing a structure's memory with the structures that differ only in flags the
memory model never reads (overlap_grad_reduce, overlap_param_gather, tp_comm_overlap): the default space searches
only ep_overlap, which the plan reads, so no structure shared (0 hits in 6,924). What is left is flat (no function
above 3% of its own); the fitted search spends ~15% building plans (219 for 946 projections; DualPipe's in Python).

Op-code schedules, floors for variants, less glue (issue 35, branch tunefast, 2026-12-06; every tuner result identical
to af9c162, main under this work, by `--identical af9c162`: counts, top five and every evaluation, analytic and fitted,
1 and 2 workers; 3,654 public projections identical by `bench_projection.py --identical`; `validate` on public.csv
unchanged). What changed: DualPipe(V), ZB-H1 and ZB-V actions as op codes (list repetition per step of the programs,
one numpy decoding pass: `sim.dualpipe`, `sim.zero_bubble`, `sim.program.counted_arrays`) instead of a tuple per
action: the search's cold plans 0.56 -> 0.41 s (a DualPipe plan took 5 ms); the memory filter rejects a recompute
variant without its memory per rank where a rank's floor (`cannot_fit`'s) plus the variant's in-flight activations,
their fragmentation and its working sets (parts never negative) is above the usable HBM by `FLOOR_MARGIN`
(`GroupMemory.surely_over`; never under torchtitan PP's memory moments): full memories of rejected variants 9,497 ->
21; the seed planner's screen hands its memory to the projection (computed twice before), its stages shared; the
simulation's glue: the F&B pair plans' tables without the parts from the plan's layout plus the pairs' entries (about
110 -> 60 us), the timing tables from the distinct chunks' rows, FSDP gates found on first read (the tuner reads
none), the ranks' last ends in one gather, the schedule rules once per shape, sums over lists; `project_specs` each
stage's busy time once, `BlockContext.with_cal` for the typical-speed stages; the tuner's cost and plan key once per
structure. --profile (03:24, load average 3: other agents' benchmarks on the same 2 cores; function calls 16.84M ->
13.91M): before (af9c162, 17.8 s profiled) the projection 48.6% (simulation 22.6%, stage and block costs 12.4%,
memory per rank 10.0%, validator 2.5%), the memory filter 23.0%, candidates 8.3%; after (16.5 s) the projection
52.9% (simulation 25.3%, stage and block costs 14.3%, memory per rank 6.1%, validator 0.9%), the memory filter 19.5%,
candidates 8.8%. --versus af9c162 --repeat 3 (03:25-03:28, load average 2.7-3.3), by CPU: 2 workers analytic 1,725/s
-> 1,861/s (1.08x), fitted 1,304/s -> 1,546/s (1.19x), wall 676 -> 908/s (1.34x) and 505 -> 703/s (1.39x); serial
analytic 1,143/s -> 1,222/s (1.07x), fitted 946/s -> 1,138/s (1.20x). After the last changes (the ranking's order
keys for the leaders only, the knob combinations once per listing step), alternating with af9c162's code in quieter
minutes (03:50-03:53, load average 1.2-2.4; CPU seconds of the whole search, parent and workers): serial analytic
median 5.75 s -> 4.92 s (min 5.08 -> 4.68; 1,037/s -> 1,212/s, 1.17x), fitted 1.48 s -> 1.22 s (1.21x); 2 workers
analytic 6.31 s -> 6.04 s (min 6.00 -> 5.44; by CPU 1,890/s -> 1,975/s), fitted 1.47 s -> 1.39 s (1,287/s ->
1,361/s), wall 3.44 -> 3.25 s and 0.87 -> 0.81 s. Two workers spend more CPU than one process here (about 6.0 s
against 4.9 s): two busy processes beside another agent's job on 2 cores run slower per CPU second (two serial
searches at once took 6.05 s each against 5.24 s alone), and the cold stage sums built in both. The 3,000/s and
2,000/s targets are not met. What is left, per projected candidate (serial analytic, warm caches, about 0.65 ms):
the simulation 35% (its compiled loops a third of it, the interleaved plans' 13,000-task timelines most; the rest
Python per call: initial release slots, the tails, duration tables, the summary's peaks), the rest of the projection
21% (two chunk costs per distinct stage, the data-parallel memo's key, the grid), the filter 24% (the variants'
peaks and floors, the fitting variants' memory; cold, the plans: 0.4 s a search, of which the compiled builder's
0.15 s), structures and legality 8.5%; with 2 workers about 4,000 of the 7,600 cold stage sums and 700 of the 900
blocks are built in both workers, and the parent spends about 0.65 s (seed, listing, ordering). A batched simulation
(many structures' timelines per compiled call) or cold costs shared across workers is what would move it further.

`--identical REF` runs the BF16 search, analytic and fitted, serial and with the pool (--workers, default the CPU
count), with the code at REF and with this checkout (subprocesses), and compares every result: the counts
(evaluated, illegal, memory-rejected, dominated, failed), the top five and every evaluation's repr (its figures to
the bit); it exits 1 where any differs.

Run: python benchmarks/bench_tune.py [--workers N] [--bf16-only] [--no-baseline] [--profile] [--versus [REF]]
    [--identical REF]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from baseline_checkout import BASELINE_REF
from profile_phases import print_phases

from paraplan.projection import project_specs
from paraplan.sim import loops_jit
from paraplan.specs.presets import model_preset, system_preset
from paraplan.tune.candidate import Candidate, TuneProblem, to_training
from paraplan.tune.space import parse_constraints
from paraplan.tune.tuner import TuneOptions, TuneResult, tune

TARGET_SEARCH_S = 60.0
TARGET_RATE_PER_S = 2000.0
TARGET_ANALYTIC_RATE_PER_S = 3000.0  # issue 35: the full model
TARGET_FITTED_RATE_PER_S = 2000.0  # issue 35: with a fitted profile
FITTED_GPU = "gh200"  # a GPU with a shipped profile (`cost.profiles`)
GBS, SEQ, GPUS = 1024, 8192, 1024


def nemo_recipe(precision: str) -> Candidate:
    """NeMo 2 / Megatron-Bridge `llama3_70b` H100 performance recipe (scripts/performance, 25.x)."""
    return Candidate.of(
        GPUS,
        precision=precision,
        tp=4,
        cp=2,
        pp=4,
        vpp=5,
        schedule="interleaved",
        ep=1,
        etp=4,
        mbs=1,
        sp=True,
        sharding="dist_opt",
        recompute="none",
        recompute_layers=None,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        tp_comm_overlap=True,
        ep_overlap=False,
    )


def run(precision: str, workers: int | None) -> tuple[TuneResult, float, float]:
    problem = TuneProblem(
        model_preset("llama3.1-70b"),
        (system_preset("h100-sxm5-80gb", GPUS),),
        GBS,
        SEQ,
        model_ref="llama3.1-70b",
        gpu_ref="h100-sxm5-80gb",
    )
    limits = parse_constraints([f"precision={precision}"], {})
    cpu_before = _cpu_s()
    started = time.perf_counter()
    result = tune(problem, limits, TuneOptions(workers=workers, top_k=5))
    wall_s = time.perf_counter() - started
    cpu_s = _cpu_s() - cpu_before
    recipe = project_specs(problem.model, problem.systems[0], to_training(problem, nemo_recipe(precision)))
    best = result.top[0]
    print(f"\n== llama3.1-70b, {GPUS} x H100, gbs {GBS}, seq {SEQ}, {precision} ==")
    print(f"method {result.method}, workers {workers or os.cpu_count()}")
    print(f"search wall time: {wall_s:.1f} s  (target < {TARGET_SEARCH_S:.0f} s, ratio {wall_s / TARGET_SEARCH_S:.3f})")
    rate = result.candidates_per_s
    search_rate = result.search_evaluated / result.search_elapsed_s if result.search_elapsed_s else 0.0
    print(
        f"projected after the memory filter: {result.evaluated:,} in {result.elapsed_s:.1f} s = {rate:,.0f}/s "
        f"(target >= {TARGET_RATE_PER_S:,.0f}/s, ratio {rate / TARGET_RATE_PER_S:.3f}); "
        f"exhaustive phase alone {search_rate:,.0f}/s"
    )
    cores = workers or os.cpu_count() or 1
    print(
        f"CPU time (this process and its workers): {cpu_s:.1f} s = {cpu_s / result.evaluated * 1e3:.2f} ms per "
        f"projection; on {cores} otherwise idle cores: {cpu_s / cores:.1f} s, "
        f"{result.evaluated / (cpu_s / cores):,.0f}/s (other processes on this machine slow the wall-clock figures)"
    )
    screened = result.evaluated + result.illegal + result.memory_rejected + result.dominated
    print(
        f"screened: {screened:,} candidates ({screened / result.elapsed_s:,.0f}/s): {result.illegal:,} illegal, "
        f"{result.memory_rejected:,} rejected by the memory filter, {result.dominated:,} dominated recompute variants"
    )
    print(
        f"best:   {best.candidate.describe()}: {best.step_time_s:.3f} s/step, "
        f"{best.tokens_per_sec_per_gpu:,.0f} tokens/s/GPU, MFU {best.mfu:.1%}, {best.peak_gib:.1f} GiB"
    )
    print(
        f"recipe: {nemo_recipe(precision).describe()}: {recipe.step_time_s:.3f} s/step, "
        f"{recipe.tokens_per_sec_per_gpu:,.0f} tokens/s/GPU, MFU {recipe.mfu:.1%}, {recipe.memory.peak_gib:.1f} GiB, "
        f"fits {recipe.memory.fits}"
    )
    ratio = recipe.step_time_s / best.step_time_s
    print(f"best vs recipe: {ratio:.3f}x the recipe's throughput (target >= 1.000)")
    return result, ratio, wall_s


# phases of a tuner run: (label, [(file suffix, function), ...]) whose cumulative CPU times add up
PHASES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("projection (project_specs)", (("paraplan/projection.py", "project_specs"),)),
    ("  pipeline simulation (sim.pipeline.play_pipeline)", (("paraplan/sim/pipeline.py", "play_pipeline"),)),
    ("  stage and block costs (_stage_sums_of, _chunk_cost)", (("paraplan/projection.py", "_stage_sums_of"),
                                                               ("paraplan/projection.py", "_chunk_cost"))),
    ("  memory per rank (pipeline_memory; projection and filter)", (("paraplan/projection.py", "stage_footprints"),
                                                          ("paraplan/memory/model.py", "pipeline_memory"))),
    ("  validator (specs.validate.check)", (("paraplan/specs/validate.py", "check"),)),
    ("memory filter (tune.memfilter.GroupMemory)", (("paraplan/tune/memfilter.py", "__init__"),
                                                     ("paraplan/tune/memfilter.py", "fits"))),
    ("candidates (to_training, with_axes, legality screen)", (("paraplan/tune/candidate.py", "to_training"),
                                                              ("paraplan/tune/candidate.py", "with_axes"),
                                                              ("paraplan/tune/legality.py", "candidate_problems"))),
)  # fmt: skip


def profile_search() -> None:
    """The BF16 search in this process under cProfile: the CPU share of each phase, and the top functions."""
    import cProfile
    import pstats

    problem = TuneProblem(
        model_preset("llama3.1-70b"), (system_preset("h100-sxm5-80gb", GPUS),), GBS, SEQ,
        model_ref="llama3.1-70b", gpu_ref="h100-sxm5-80gb",
    )  # fmt: skip
    profiler = cProfile.Profile()
    profiler.enable()
    result = tune(problem, parse_constraints(["precision=bf16"], {}), TuneOptions(workers=1, top_k=5))
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = sum(tt for _, _, tt, _, _ in stats.stats.values())  # type: ignore[attr-defined]
    print(f"\n== profile: the BF16 search in one process, {result.evaluated:,} projected, {total:.1f} s profiled ==")
    print_phases(stats, PHASES)


def fitted_problem() -> TuneProblem:
    """The benchmark's search on FITTED_GPU, with its shipped fitted profile (`tune --profile auto`)."""
    from paraplan.cost.profiled import shipped_ref

    return TuneProblem(
        model_preset("llama3.1-70b"), (system_preset(FITTED_GPU, GPUS),), GBS, SEQ,
        model_ref="llama3.1-70b", gpu_ref=FITTED_GPU, profile=shipped_ref(FITTED_GPU),
    )  # fmt: skip


def rates(workers: int | None) -> dict[str, float]:
    """Candidates per second after the memory filter: the BF16 search analytic, and with the fitted profile."""
    analytic = TuneProblem(
        model_preset("llama3.1-70b"), (system_preset("h100-sxm5-80gb", GPUS),), GBS, SEQ,
        model_ref="llama3.1-70b", gpu_ref="h100-sxm5-80gb",
    )  # fmt: skip
    if loops_jit.available():
        loops_jit.warm_up()  # numba's import and the cache load, untimed as in `run` (the first search paid ~0.9 s)
    out = {}
    for label, problem in (("analytic", analytic), ("fitted", fitted_problem())):
        cpu_before = _cpu_s()
        result = tune(problem, parse_constraints(["precision=bf16"], {}), TuneOptions(workers=workers, top_k=5))
        cpu_s = _cpu_s() - cpu_before  # the pool's workers count once they have exited
        out[label] = result.candidates_per_s
        # on `workers` otherwise idle cores: what the rate is without the other processes of a shared machine
        out[f"{label}_cpu_rate"] = result.evaluated / (cpu_s / (workers or os.cpu_count() or 1))
        out[f"{label}_evaluated"] = result.evaluated
        out[f"{label}_best_step_s"] = result.top[0].step_time_s
    return out


def results(workers: int | None) -> dict[str, object]:
    """Every result of the BF16 search, analytic and fitted (`rates`' problems): the counts, the top five and every
    evaluation's repr (the figures to the bit), sorted (the pool's workers finish in any order)."""
    analytic = TuneProblem(
        model_preset("llama3.1-70b"), (system_preset("h100-sxm5-80gb", GPUS),), GBS, SEQ,
        model_ref="llama3.1-70b", gpu_ref="h100-sxm5-80gb",
    )  # fmt: skip
    out: dict[str, object] = {}
    for label, problem in (("analytic", analytic), ("fitted", fitted_problem())):
        result = tune(problem, parse_constraints(["precision=bf16"], {}), TuneOptions(workers=workers, top_k=5))
        out[label] = {
            "counts": [result.evaluated, result.illegal, result.memory_rejected, result.dominated, result.failed],
            "top": [repr(e) for e in result.top],
            "evaluations": sorted(repr(e) for e in result.evaluations),
        }
    return out


def identical(args: argparse.Namespace) -> None:
    """`results` of the code at args.identical and of this checkout, serial and with the pool: every one the same."""
    from baseline_checkout import REPO, baseline_src

    def measure(src, workers: int) -> dict:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [sys.executable, __file__, "--results-json", out.name, "--workers", str(workers)]
            subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(src)}, stdout=subprocess.DEVNULL)
            with open(out.name) as f:
                return json.load(f)

    same = True
    with baseline_src(args.identical) as base_src:
        for workers in sorted({1, args.workers or os.cpu_count() or 1}):
            before, now = measure(base_src, workers), measure(REPO / "src", workers)
            for label in ("analytic", "fitted"):
                b, c = before[label], now[label]
                differ = sum(x != y for x, y in zip(b["evaluations"], c["evaluations"], strict=False))
                differ += abs(len(b["evaluations"]) - len(c["evaluations"]))
                ok = b == c
                same &= ok
                print(
                    f"{label}, {workers} worker(s): counts (evaluated, illegal, memory-rejected, dominated, failed) "
                    f"{c['counts']} vs {b['counts']} at {args.identical}; top five the same: {b['top'] == c['top']}; "
                    f"{len(c['evaluations']):,} evaluations, {differ} differ: {'identical' if ok else 'DIFFERENT'}"
                )
    print(f"every tuner result identical to {args.identical}: {same}")
    if not same:
        sys.exit(1)


def versus(args: argparse.Namespace) -> None:
    """`rates` of the code at args.versus and of this checkout, alternating subprocesses, medians and ratios."""
    import statistics

    from baseline_checkout import REPO, baseline_src

    def measure(src) -> dict[str, float]:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [sys.executable, __file__, "--rates-json", out.name]
            command += ["--workers", str(args.workers)] if args.workers else []
            subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(src)}, stdout=subprocess.DEVNULL)
            with open(out.name) as f:
                return json.load(f)

    base, current = [], []
    with baseline_src(args.versus) as base_src:
        for _ in range(args.repeat):
            base.append(measure(base_src))
            current.append(measure(REPO / "src"))
    print(f"{args.repeat} alternating runs, medians; workers {args.workers or os.cpu_count()}; "
          f"load average now {os.getloadavg()[0]:.2f}")  # fmt: skip
    for label, target in (("analytic", TARGET_ANALYTIC_RATE_PER_S), ("fitted", TARGET_FITTED_RATE_PER_S)):
        now = statistics.median(c[label] for c in current)
        before = statistics.median(b[label] for b in base)
        cpu_now = statistics.median(c[f"{label}_cpu_rate"] for c in current)
        cpu_before = statistics.median(b[f"{label}_cpu_rate"] for b in base)
        same = all(c[f"{label}_best_step_s"] == base[0][f"{label}_best_step_s"] for c in current)
        print(
            f"{label}: {now:,.0f}/s after the memory filter ({int(current[0][f'{label}_evaluated']):,} projected); "
            f"baseline {args.versus} {before:,.0f}/s ({int(base[0][f'{label}_evaluated']):,}); {now / before:.2f}x; "
            f"target >= {target:,.0f}/s: {'met' if now >= target else 'not met'}; same best step time: {same}"
        )
        print(
            f"  by CPU time (idle cores): {cpu_now:,.0f}/s, baseline {cpu_before:,.0f}/s, {cpu_now / cpu_before:.2f}x; "
            f"target: {'met' if cpu_now >= target else 'not met'}"
        )


def baseline(args: argparse.Namespace) -> dict:
    """This benchmark with the pure-Python loops (PARAPLAN_NO_JIT=1), in a subprocess: its figures by precision."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, __file__, "--no-baseline", "--summary", out.name]
        command += ["--bf16-only"] if args.bf16_only else []
        command += ["--workers", str(args.workers)] if args.workers else []
        print("baseline: the pure-Python loops (PARAPLAN_NO_JIT=1), in a subprocess ...", flush=True)
        subprocess.run(command, check=True, env={**os.environ, "PARAPLAN_NO_JIT": "1"}, stdout=subprocess.DEVNULL)
        with open(out.name) as f:
            return json.load(f)


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # pool workers, once they have exited
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="processes (default: CPU count)")
    parser.add_argument("--bf16-only", action="store_true", help="skip the FP8 search")
    parser.add_argument("--no-baseline", action="store_true", help="skip the pure-Python loops' run")
    parser.add_argument("--profile", action="store_true", help="profile the BF16 search in one process (cProfile)")
    parser.add_argument("--summary", help=argparse.SUPPRESS)  # JSON figures (the baseline subprocess)
    parser.add_argument("--versus", nargs="?", const=BASELINE_REF, help="compare the rates with the code at a commit")
    parser.add_argument("--repeat", type=int, default=1, help="alternating runs of --versus")
    parser.add_argument("--rates-json", help=argparse.SUPPRESS)  # `rates` as JSON (a --versus subprocess)
    parser.add_argument("--identical", metavar="REF", help="compare every tuner result with the code at a commit")
    parser.add_argument("--results-json", help=argparse.SUPPRESS)  # `results` as JSON (an --identical subprocess)
    args = parser.parse_args()
    if args.rates_json:
        with open(args.rates_json, "w") as f:
            json.dump(rates(args.workers), f)
        return
    if args.results_json:
        with open(args.results_json, "w") as f:
            json.dump(results(args.workers), f)
        return
    print(f"CPUs: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    if args.identical:
        identical(args)
        return
    if args.versus:
        versus(args)
        return
    if args.profile:
        profile_search()
        return
    began = time.perf_counter()
    jit = loops_jit.available()  # imports numba
    import_s = time.perf_counter() - began
    base = baseline(args) if jit and not args.no_baseline else {}
    if jit:
        # cold cost of the compiled loops, outside the timed search: numba's import and the cache load (or the
        # compilation, on the very first run); the tuner's pool workers fork after it and inherit the code
        load_s = loops_jit.warm_up()
        print(f"compiled loops: numba import {import_s:.2f} s + cache load (or compile) {load_s:.2f} s, untimed")
    else:
        print("pure-Python loops (numba not installed, or PARAPLAN_NO_JIT=1)")
    summary = {}
    for precision in ("bf16",) if args.bf16_only else ("bf16", "fp8"):
        result, _, wall_s = run(precision, args.workers)
        summary[precision] = {"rate": result.candidates_per_s, "wall_s": wall_s}
        if precision in base:
            b = base[precision]
            print(
                f"vs the pure-Python loops: {b['rate']:,.0f}/s in {b['wall_s']:.1f} s -> "
                f"{result.candidates_per_s:,.0f}/s in {wall_s:.1f} s ({result.candidates_per_s / b['rate']:.2f}x)"
            )
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(summary, f)


if __name__ == "__main__":
    main()
