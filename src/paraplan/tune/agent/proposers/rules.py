"""Rules written from the breakdown: each reads the incumbent's named parts (`BreakdownPart`), memory and stages and,
when the part it addresses is large enough to matter, gives a hypothesis and the field changes that test it.

A rule is a function registered with `@rule(name, reads)`; adding a knob is adding one rule. Thresholds are
shares of the step below which a part is not worth a proposal (a fixed cost of looking, not a measured figure).
The proposer orders a round's proposals by the share of the step the part they address holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from paraplan.memory.model import GIB
from paraplan.projection import dp_bucket_count, stage_costs
from paraplan.sim.breakdown import BreakdownPart as P
from paraplan.specs.knobs import ep_overlap_problems
from paraplan.specs.schedule import SCHEDULES, megatron_schedule
from paraplan.specs.training import TrainingSpec
from paraplan.tune.agent.diagnosis import Diagnosis
from paraplan.tune.agent.layout import balanced, move_one_layer
from paraplan.tune.agent.proposers import Proposal, ProposalRound
from paraplan.tune.agent.record import AgentStep
from paraplan.tune.candidate import knob_settings, pipeline_split

NOTABLE_SHARE = 0.02
"""A part under 2% of the step is not worth a proposal."""
BUBBLE_SHARE = 0.05
IMBALANCE = 1.02
"""Heaviest stage over the mean stage busy time above which the layout is rebalanced."""
ROOMY_HEADROOM = 0.25
"""Share of the usable HBM left free above which a rule may trade memory for speed."""
NEAR_HEADROOM = 0.10
"""Share of the usable HBM left free below which memory is near the limit: a memory saver that costs less than
recomputation may pay for recomputing less."""
MEGATRON_FAMILY = frozenset({"megatron-lm", "nemo-megatron", "megatron-deepspeed"})
MCORE = frozenset({"megatron-lm", "nemo-megatron"})
"""Frameworks on megatron-core, whose knobs (CUDA graphs, drop-and-pad, recompute modules, CPU offload, the
precision-aware optimizer) the production-knob rules turn."""
OFFLOAD_FRACTIONS = (0.25, 0.5, 0.75, 1.0)
"""Optimizer offload shares tried: the smallest that frees the overflow (Megatron `--optimizer-offload-fraction`)."""
CAPACITY_FACTORS = (1.0, 1.25)
"""Drop-and-pad capacity factors tried: 1.0 pads nothing past the balanced load; 1.25 drops fewer tokens at 25% more
padded expert work (the range of Fedus et al. 2021, Switch Transformer section 2.2)."""
FRAMEWORK_FORMAT = {"megatron-lm": "megatron", "nemo-megatron": "megatron", "torchtitan": "torchtitan"}
"""Which `PipelineSchedule.framework_names` key says a framework runs a schedule."""


Proposals = list[tuple[str, dict[str, object]]]


@dataclass(frozen=True)
class Rule:
    name: str
    reads: tuple[P, ...]
    """The parts of the step the rule addresses (its proposals are ordered by their share)."""
    propose: Callable[..., Proposals]
    """(diagnosis) -> [(hypothesis, changes)]; with `history`, (diagnosis, the log so far)."""
    history: bool = False


RULES: dict[str, Rule] = {}


def rule(name: str, *reads: P, history: bool = False) -> Callable[[Callable[..., Proposals]], Rule]:
    def register(fn: Callable[..., Proposals]) -> Rule:
        RULES[name] = Rule(name, reads, fn, history)
        return RULES[name]

    return register


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


# --- the pipeline
@rule("stage_balance", P.PIPELINE_BUBBLE)
def stage_balance(d: Diagnosis) -> Proposals:
    """Unequal stages (embedding, loss, MTP, dense layers before MoE ones) make every other stage wait for the
    heaviest: balance the layers by their projected cost."""
    costs, busy = d.layer_costs, d.stage_busy_s
    if costs is None or not busy:
        return []
    mean = sum(busy) / len(busy)
    heavy = max(range(len(busy)), key=lambda i: busy[i])
    if busy[heavy] < IMBALANCE * mean:
        return []
    why = (
        f"stage {heavy} is busy {1e3 * busy[heavy]:.1f} ms per micro-batch against a mean of {1e3 * mean:.1f} ms "
        f"(layers per stage {list(d.layout)}); the steady state runs at the slowest stage's pace, so "
    )
    out = []
    layout = balanced(costs, len(d.layout))
    if layout is not None and layout != d.layout:
        after = max(costs.stage_s(layout))
        out.append(
            (
                why + f"splitting the layers by their projected cost ({list(layout)}) should bring the heaviest stage "
                f"to {1e3 * after:.1f} ms",
                {"pipeline_layout": layout},
            )
        )
    moved = move_one_layer(costs, d.layout)
    if moved is not None and moved != layout:
        out.append(
            (why + f"moving one layer off stage {heavy} ({list(moved)}) should shorten it", {"pipeline_layout": moved})
        )
    return out


def _schedules_run_by(framework: str, current: str) -> list[str]:
    key = FRAMEWORK_FORMAT.get(framework)
    names = [s.name for s in SCHEDULES.values() if key is not None and key in s.framework_names]
    if "primus" in SCHEDULES[current].framework_names:  # a Primus recipe: its zero-bubble switches too
        names += [s.name for s in SCHEDULES.values() if "primus" in s.framework_names]
    return [n for n in dict.fromkeys(names) if n != current]


@rule("interleave", P.PIPELINE_BUBBLE)
def interleave(d: Diagnosis) -> Proposals:
    """Fill and drain cost about (pp - 1) / (vpp x m) of the pipeline phase (Narayanan et al. 2021, section 2.2):
    more virtual stages per rank shrink it, at the price of more point-to-point transfers. Virtual stage counts
    that split the layers evenly come first (Megatron's split); without one, the doubled count with a balanced
    layout."""
    t = d.train
    share = d.share(P.PIPELINE_BUBBLE)
    shaped = SCHEDULES[t.pipeline_schedule].interleaves or t.pipeline_schedule == megatron_schedule(1).name
    if t.pp == 1 or share < BUBBLE_SHARE or not shaped:
        return []
    wider = [v for v in range(t.vpp + 1, 4 * t.vpp + 1 if t.vpp > 1 else 5) if t.pp * v <= d.model.num_layers]
    even = [v for v in wider if pipeline_split(d.model, t.pp * v, t.seq) is not None]
    choices = even[:2] or [v for v in wider if v == 2 * t.vpp]
    out = []
    for vpp in choices:
        why = (
            f"the pipeline bubble is {_pct(share)} of the step with pp={t.pp}, vpp={t.vpp}, {t.num_microbatches} "
            f"micro-batches; {vpp} virtual stages per rank should cut the fill and drain about {vpp / t.vpp:.1f}x"
        )
        out.append(
            (why, {"pipeline_schedule": megatron_schedule(vpp).name, "virtual_pipeline_model_parallel_size": vpp})
        )
    return out


@rule("more_microbatches", P.PIPELINE_BUBBLE)
def more_microbatches(d: Diagnosis) -> Proposals:
    """Smaller micro-batches: more of them per step, so the fill and drain are a smaller share."""
    t = d.train
    share = d.share(P.PIPELINE_BUBBLE)
    if t.pp == 1 or share < BUBBLE_SHARE or t.mbs < 2:
        return []
    why = (
        f"the pipeline bubble is {_pct(share)} of the step with {t.num_microbatches} micro-batches of {t.mbs}; "
        f"micro-batches of {t.mbs // 2} double their count and halve the fill and drain's share"
    )
    return [(why, {"micro_batch_size": t.mbs // 2})]


@rule("schedule", P.PIPELINE_BUBBLE)
def other_schedule(d: Diagnosis) -> Proposals:
    """Schedules the framework runs that fill the bubble otherwise (zero-bubble's split backward, V shapes)."""
    t = d.train
    share = d.share(P.PIPELINE_BUBBLE)
    if t.pp == 1 or share < BUBBLE_SHARE:
        return []
    out = []
    for name in _schedules_run_by(t.framework, t.pipeline_schedule):
        spec = SCHEDULES[name]
        if spec.all_forwards_first:
            continue  # GPipe: never faster than 1F1B, and holds every micro-batch
        vpp = 2 if spec.interleaves else 1
        why = f"the pipeline bubble is {_pct(share)} of the step; {spec.label} ({spec.source}) fills it differently"
        out.append((why, {"pipeline_schedule": name, "virtual_pipeline_model_parallel_size": vpp}))
    return out


@rule("fewer_stages", P.PIPELINE_BUBBLE, P.PP_P2P_EXPOSED)
def fewer_stages(d: Diagnosis) -> Proposals:
    """With memory to spare, fewer pipeline stages (more data parallelism) shrink the bubble outright."""
    t = d.train
    share = d.share(P.PIPELINE_BUBBLE, P.PP_P2P_EXPOSED)
    if t.pp < 2 or t.pp % 2 or share < BUBBLE_SHARE or d.headroom_share < ROOMY_HEADROOM:
        return []
    why = (
        f"bubble and pipeline transfers are {_pct(share)} of the step and {d.headroom_gib:.1f} GiB of HBM is free; "
        f"pp={t.pp // 2} (dp x2) holds more weights per GPU but halves the stages the bubble grows with"
    )
    return [(why, {"pipeline_model_parallel_size": t.pp // 2})]


# --- data parallelism
@rule("dp_overlap", P.DP_GRAD_REDUCE_EXPOSED, P.DP_PARAM_GATHER_EXPOSED, P.DP_PARAM_GATHER_WAIT)
def dp_overlap(d: Diagnosis) -> Proposals:
    """Exposed data-parallel communication: overlap the gradient reduction with the backward, the parameter gather
    with the forward (Megatron `--overlap-grad-reduce`, `--overlap-param-gather`)."""
    t = d.train
    out = []
    grad = d.share(P.DP_GRAD_REDUCE_EXPOSED)
    if grad >= NOTABLE_SHARE / 2 and not t.overlap_grad_reduce:
        out.append(
            (
                f"the gradient reduction is exposed for {_pct(grad)} of the step; overlapping it with the "
                "backward should hide most of it",
                {"overlap_grad_reduce": True},
            )
        )
    gather = d.share(P.DP_PARAM_GATHER_EXPOSED)
    if gather >= NOTABLE_SHARE / 2 and t.shards_optimizer and not t.overlap_param_gather:
        out.append(
            (
                f"the parameter all-gather is exposed for {_pct(gather)} of the step; overlapping it with the "
                "next forward should hide it",
                {"overlap_param_gather": True},
            )
        )
    return out


def _round_params(count: float) -> int:
    """A bucket size to propose: whole millions of parameters from a million up."""
    return max(1, round(count / 1e6)) * 1_000_000 if count >= 1e6 else max(1, round(count))


def _params(count: float) -> str:
    return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.3g}M"


def _bucket_reduce(d: Diagnosis, size: int | None) -> tuple[float, int, float]:
    """(seconds of the slowest model chunk's per-step gradient reduction, its buckets, its parameters) at `size`
    parameters per bucket (None: the framework's default, `TrainingSpec.effective_ddp_bucket_size`), from the
    costing the projection runs."""
    train = replace(d.train, ddp_bucket_size=size)
    stages = stage_costs(d.model, d.system, train)
    worst = max(stages, key=lambda s: s.dp_grad_reduce_s)
    effective = train.effective_ddp_bucket_size
    buckets = dp_bucket_count(worst.dense_params, effective) + dp_bucket_count(worst.expert_params, effective)
    return worst.dp_grad_reduce_s, max(1, buckets), worst.dense_params + worst.expert_params


@rule("ddp_bucket_size", P.DP_GRAD_REDUCE_EXPOSED)
def ddp_bucket_size(d: Diagnosis) -> Proposals:
    """Megatron `--ddp-bucket-size` (megatron-core DistributedDataParallelConfig.bucket_size). With the reduction
    overlapped, the bucket holding the first layers' gradients is ready only when the backward ends, so at least
    its collective stays exposed: smaller buckets shrink it, but each bucket is one collective paying its latency.
    Smaller buckets when the last bucket's saving outweighs the added latency; larger ones when the added latency
    of many small buckets is the larger term."""
    t = d.train
    exposed = d.share(P.DP_GRAD_REDUCE_EXPOSED)
    if t.framework not in MCORE or t.dp * t.cp < 2 or t.shards_params or t.zero_stage == 2:
        return []
    if exposed < NOTABLE_SHARE / 2:
        return []
    total, n, params = _bucket_reduce(d, t.ddp_bucket_size)
    if total <= 0:
        return []
    size = t.effective_ddp_bucket_size or max(1, math.ceil(params / n))  # megatron-core's default when unset
    exposed_ms = 1e3 * d.seconds(P.DP_GRAD_REDUCE_EXPOSED)
    head = (
        f"the gradient reduction is exposed for {_pct(exposed)} of the step ({exposed_ms:.1f} ms); a model chunk "
        f"reduces {1e3 * total:.1f} ms in {n} buckets of {_params(size)} parameters, "
    )
    out: Proposals = []
    for factor in (2, 4):
        if not t.overlap_grad_reduce:
            break  # without overlap every bucket waits for the backward's end: only fewer collectives help
        smaller = _round_params(size / factor)
        after, m, _ = _bucket_reduce(d, smaller)
        last_saved, added = total / n - after / m, after - total
        if m > n and last_saved > added:
            out.append(
                (
                    head + f"the last one ({1e3 * total / n:.2f} ms) after the backward; {m} buckets of "
                    f"{_params(smaller)} should expose {1e3 * after / m:.2f} ms instead for "
                    f"{1e3 * added:.2f} ms more of collective latency",
                    {"ddp_bucket_size": smaller},
                )
            )
    for factor in (2, 4):
        larger = _round_params(size * factor)
        after, m, _ = _bucket_reduce(d, larger)
        saved = total - after
        if m < n and saved >= NOTABLE_SHARE / 2 * d.step_time_s and saved > after / m - total / n:
            out.append(
                (
                    head + f"latency-bound; {m} buckets of {_params(larger)} should reduce in {1e3 * after:.1f} ms "
                    f"({1e3 * saved:.1f} ms less) at a last bucket of {1e3 * after / m:.2f} ms",
                    {"ddp_bucket_size": larger},
                )
            )
    return out


@rule("distributed_optimizer", P.DP_GRAD_REDUCE_EXPOSED, P.OPTIMIZER)
def distributed_optimizer(d: Diagnosis) -> Proposals:
    """Replicated optimizer states: sharding them (ZeRO-1, Megatron's distributed optimizer) frees memory and turns
    the all-reduce into a reduce-scatter and an all-gather that overlap."""
    t = d.train
    if t.framework not in MEGATRON_FAMILY or t.dp < 2 or t.shards_optimizer or t.fsdp:
        return []
    why = (
        f"optimizer states are replicated over dp={t.dp} ({d.headroom_gib:.1f} GiB free); the distributed optimizer "
        "shards them and its gather and reduce-scatter overlap"
    )
    return [(why, {"use_distributed_optimizer": True, "overlap_grad_reduce": True, "overlap_param_gather": True})]


@rule("fsdp_to_dist_opt", P.FSDP_EXPOSED)
def fsdp_to_dist_opt(d: Diagnosis) -> Proposals:
    t = d.train
    share = d.share(P.FSDP_EXPOSED)
    if t.framework not in MEGATRON_FAMILY or not t.fsdp or share < NOTABLE_SHARE or d.headroom_share < ROOMY_HEADROOM:
        return []
    why = f"FSDP's gathers are exposed for {_pct(share)} of the step and memory is roomy; sharding only the optimizer"
    return [(why, {"fsdp": False, "zero_stage": 0, "use_distributed_optimizer": True})]


# --- tensor and context parallelism
@rule("tp_comm", P.TP_COMM_EXPOSED)
def tp_comm(d: Diagnosis) -> Proposals:
    """Exposed tensor-parallel collectives: sequence parallelism (reduce-scatter + all-gather instead of
    all-reduce, Korthikanti et al. 2022), overlap with the GEMMs (TransformerEngine userbuffers), or a smaller tp."""
    t = d.train
    share = d.share(P.TP_COMM_EXPOSED)
    if t.tp == 1 or share < NOTABLE_SHARE:
        return []
    head = f"tensor-parallel communication is exposed for {_pct(share)} of the step at tp={t.tp}; "
    out: list[tuple[str, dict[str, object]]] = []
    if not t.sequence_parallel:
        out.append(
            (
                head + "sequence parallelism splits its all-reduces and the norms' activations",
                {"sequence_parallel": True},
            )
        )
    elif not t.tp_comm_overlap and t.framework in MEGATRON_FAMILY:
        out.append((head + "overlapping it with the GEMMs should hide most of it", {"tp_comm_overlap": True}))
    if t.tp % 2 == 0:
        out.append(
            (
                head + f"tp={t.tp // 2} halves each collective's group and the GEMMs grow (memory permitting)",
                {"tensor_model_parallel_size": t.tp // 2},
            )
        )
    return out


@rule("cp_comm", P.CP_COMM_EXPOSED)
def cp_comm(d: Diagnosis) -> Proposals:
    t = d.train
    share = d.share(P.CP_COMM_EXPOSED)
    if t.cp < 2 or t.cp % 2 or share < NOTABLE_SHARE:
        return []
    why = f"the context-parallel K/V exchange is exposed for {_pct(share)} of the step at cp={t.cp}; cp={t.cp // 2}"
    return [(why + " exchanges less and attention hides more of it", {"context_parallel_size": t.cp // 2})]


# --- memory and recompute
@rule("recompute_less", P.RECOMPUTE)
def recompute_less(d: Diagnosis) -> Proposals:
    """Recomputation with memory to spare: recompute less (selective recomputes only attention's core, Korthikanti
    et al. 2022; full recompute of fewer layers per chunk, Megatron `--recompute-num-layers`)."""
    t = d.train
    share = d.share(P.RECOMPUTE)
    if share < NOTABLE_SHARE / 2 or not d.fits:
        return []
    head = f"recomputation is {_pct(share)} of the step and {d.headroom_gib:.1f} GiB of HBM is free; "
    out: list[tuple[str, dict[str, object]]] = []
    if t.recompute_granularity == "full":
        per_chunk = max(d.layout) if d.train.pp > 1 else d.model.num_layers
        layers = t.recompute_num_layers or per_chunk
        out.append((head + "no recomputation keeps every activation", {"recompute_granularity": "none"}))
        out.append(
            (head + "selective recomputation keeps all but attention's core", {"recompute_granularity": "selective"})
        )
        uniform_runs = t.recompute_method == "uniform" and t.recompute_num_layers is not None
        for fewer in [] if uniform_runs else sorted({layers // 2, layers - 1}, reverse=True):  # runs: recompute_block
            if 0 < fewer < layers:
                out.append(
                    (
                        head + f"recomputing {fewer} layers per chunk instead of {layers} keeps the rest",
                        {"recompute_granularity": "full", "recompute_num_layers": fewer, "recompute_method": "block"},
                    )
                )
    elif t.recompute_granularity == "selective":
        out.append((head + "no recomputation keeps every activation", {"recompute_granularity": "none"}))
    return out


def _optimizer_gib(d: Diagnosis) -> float:
    """The optimizer states on the GPU at the peak."""
    return d.projection.memory.peak.parts.get("optimizer", 0.0) / GIB


def _recompute_one_less(t: TrainingSpec) -> tuple[str, dict[str, object]] | None:
    """(text, changes) of the next lighter recomputation, None when there is none."""
    if t.recompute_granularity == "full":
        return "selective recomputation instead of full", {"recompute_granularity": "selective"}
    if t.recompute_granularity == "selective":
        return "no recomputation", {"recompute_granularity": "none"}
    return None


def _tight(d: Diagnosis) -> str:
    """The memory verdict in words for a hypothesis."""
    if not d.fits:
        return f"the peak of {d.peak_gib:.1f} GiB is over the usable {d.usable_gib:.1f} GiB"
    return f"only {d.headroom_gib:.1f} GiB of {d.usable_gib:.1f} GiB is free"


@rule("optimizer_offload", P.OPTIMIZER, P.RECOMPUTE)
def optimizer_offload(d: Diagnosis) -> Proposals:
    """Memory over or near the limit: move a share of the optimizer states and their Adam step to the host (Megatron
    `--optimizer-cpu-offload --optimizer-offload-fraction`, torchtitan FSDP2 CPUOffloadPolicy). It costs the host
    link and the CPU step (`cost.offload`), no recomputation: over the limit the smallest share that frees the
    overflow; near it, the share that lets the step recompute less."""
    t = d.train
    on_gpu = 1.0 - t.offloaded_optimizer_fraction
    states = _optimizer_gib(d) / on_gpu if on_gpu > 0 else 0.0  # every state's GiB, were none offloaded
    fsdp_offload = t.framework == "torchtitan" and t.shards_params  # FSDP2 CPUOffloadPolicy
    if (t.framework not in MCORE and not fsdp_offload) or states <= 0 or d.headroom_share >= NEAR_HEADROOM:
        return []
    head = f"{_tight(d)} and the optimizer states hold {_optimizer_gib(d):.1f} GiB; "
    out: Proposals = []
    if not d.fits:
        over = -d.headroom_gib
        share = next((f for f in OFFLOAD_FRACTIONS if f > t.offloaded_optimizer_fraction and f * states >= over), 1.0)
        if share > t.offloaded_optimizer_fraction:
            out.append(
                (
                    head + f"offloading {share:g} of them to the host frees about {(share - 1 + on_gpu) * states:.1f}"
                    f" GiB without recomputing anything (the gradients go down and the parameters come back over the "
                    f"{d.system.gpu.host_link_gbps:g} GB/s host link)",
                    knob_settings("optimizer_offload", share),
                )
            )
        return out
    lighter = _recompute_one_less(t)
    if lighter is None or t.optimizer_cpu_offload:
        return []
    text, less = lighter
    for share in (0.5, 1.0):
        out.append(
            (
                head + f"recomputation is {_pct(d.share(P.RECOMPUTE))} of the step; offloading {share:g} of the "
                f"optimizer states frees about {share * states:.1f} GiB, which may pay for {text}",
                {**knob_settings("optimizer_offload", share), **less},
            )
        )
    return out


@rule("activation_offload", P.RECOMPUTE)
def activation_offload(d: Diagnosis) -> Proposals:
    """Memory over or near the limit without a pipeline: the saved activations of the first N layers go to the host
    during the forward and come back for the backward, each copy beside the next layer's compute (Megatron
    `--cpu-offloading-num-layers`, TransformerEngine `get_cpu_offload_context`), in place of recomputation. Megatron
    allows it with pp 1, no recompute and no CUDA graphs, N below the layer count."""
    t = d.train
    layers = d.model.num_layers
    if t.framework not in MCORE or t.pp > 1 or t.cpu_offloading_num_layers or d.headroom_share >= NEAR_HEADROOM:
        return []
    if t.cuda_graph_scope != "none" or layers < 2:
        return []
    activations = d.projection.memory.peak.parts.get("activations", 0.0) / GIB
    head = f"{_tight(d)} and the activations hold {activations:.1f} GiB; "
    link = f"over the {d.system.gpu.host_link_gbps:g} GB/s host link, hidden where a layer's compute is longer"
    if t.recompute_granularity == "none":
        if d.fits or activations <= 0:
            return []
        over = -d.headroom_gib
        need = min(layers - 1, max(1, math.ceil(over / (activations / layers))))
        counts = sorted({need, min(layers - 1, 2 * need)})
        return [
            (
                head + f"offloading the activations of the first {n} layers (about {n * activations / layers:.1f} "
                f"GiB) to the host frees them without recomputing anything, the copies {link}",
                {"cpu_offloading_num_layers": n},
            )
            for n in counts
        ]
    if not d.fits:
        return []
    share = d.share(P.RECOMPUTE)
    if share < NOTABLE_SHARE:
        return []
    return [
        (
            head + f"recomputation is {_pct(share)} of the step; keeping every activation but offloading those of the "
            f"first {n} layers may cost less than recomputing, the copies {link}",
            {"recompute_granularity": "none", "cpu_offloading_num_layers": n},
        )
        for n in sorted({max(1, layers // 4), max(1, layers // 2)})
    ]


@rule("precision_aware_optimizer", P.OPTIMIZER)
def precision_aware_optimizer(d: Diagnosis) -> Proposals:
    """Adam's moments in bf16 through Megatron's precision-aware optimizer (TransformerEngine FusedAdam,
    `--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`; DeepSeek-V3 trained so, its
    report's "Low-Precision Storage and Communication"): 8 of the 12 bytes of states per parameter become 4, and the
    step moves 26 bytes per parameter instead of 34 (`cost.offload.adam_bytes_per_param`). Over or near the limit it
    saves memory before any recomputation; otherwise it is offered for the optimizer step's time. A numerics change,
    which the log says."""
    t = d.train
    if t.framework not in MCORE or t.precision == "fp32" or t.use_precision_aware_optimizer:
        return []
    if t.offloaded_optimizer_fraction >= 1.0:  # every state and step on the host: nothing on the GPU to shrink
        return []
    bf16 = knob_settings("optimizer_states", "bf16")
    freed = _optimizer_gib(d) / 3  # 4 of the 12 bytes per parameter
    head = f"bf16 Adam moments (a numerics change) free about {freed:.1f} GiB of optimizer states"
    if not d.fits:
        return [(f"{_tight(d)}; {head} without recomputing anything", bf16)]
    out: Proposals = []
    lighter = _recompute_one_less(t)
    if d.headroom_share < ROOMY_HEADROOM and lighter is not None and d.share(P.RECOMPUTE) >= NOTABLE_SHARE:
        text, less = lighter
        out.append(
            (
                f"recomputation is {_pct(d.share(P.RECOMPUTE))} of the step and {_tight(d)}; {head}, which may pay "
                f"for {text}",
                {**bf16, **less},
            )
        )
    share = d.share(P.OPTIMIZER)
    if share >= NOTABLE_SHARE / 2:
        out.append(
            (
                f"the optimizer step is {_pct(share)} of the step; {head} and the memory-bound step moves 26 bytes per "
                "parameter instead of 34",
                bf16,
            )
        )
    return out


def _cheap_modules(d: Diagnosis, heavy: bool = False) -> list[tuple[str, ...]]:
    """`--recompute-modules` sets from the cheapest to recompute: the memory-bound outputs first (norms, the MoE
    activation, MLA's up-projections: no GEMM redone), then with attention's core; `heavy`: then the MLP or MoE
    checkpointed whole (nearly full recompute's cost: only worth it to fit)."""
    model = d.model
    light = ("layernorm", *(("moe_act",) if model.is_moe else ()), *(("mla_up_proj",) if model.is_mla else ()))
    sets = [light, ("core_attn", *light)]
    if heavy:
        sets.append((*light, "moe" if model.is_moe else "mlp"))
    return sets


@rule("recompute_modules", P.RECOMPUTE)
def recompute_modules(d: Diagnosis) -> Proposals:
    """Full recompute redoes every layer's forward; selective recompute of named modules (megatron-core 0.16
    `--recompute-modules`) drops and redoes only those: the memory-bound outputs (layernorm, moe_act, mla_up_proj)
    cost no GEMM, `mlp`/`moe` checkpoint the module. With memory to spare, the lighter sets; over the limit without
    recompute, the same sets before full recompute."""
    t = d.train
    share = d.share(P.RECOMPUTE)
    if t.framework not in MCORE or t.cpu_offloading_num_layers:
        return []
    if t.recompute_granularity == "full" and d.fits and share >= NOTABLE_SHARE / 2:
        head = f"full recomputation is {_pct(share)} of the step and {d.headroom_gib:.1f} GiB of HBM is free; "
        return [
            (
                head + f"recomputing only {', '.join(m)} keeps the rest of each layer's activations",
                {"recompute_granularity": "selective", "recompute_modules": m},
            )
            for m in _cheap_modules(d)
        ]
    if t.recompute_granularity == "none" and not d.fits:
        return [
            (
                f"{_tight(d)}; recomputing only {', '.join(m)} drops their activations at less recompute than full",
                {"recompute_granularity": "selective", "recompute_modules": m},
            )
            for m in _cheap_modules(d, heavy=True)
        ]
    return []


@rule("recompute_block", P.RECOMPUTE)
def recompute_block(d: Diagnosis) -> Proposals:
    """Megatron's uniform method recomputes every layer (runs of `recompute_num_layers` checkpointed at their input);
    the block method recomputes only the first N layers of each stage and keeps the rest (megatron-core
    TransformerBlock._checkpointed_forward): with memory to spare, fewer recomputed layers."""
    t = d.train
    share = d.share(P.RECOMPUTE)
    uniform_runs = t.recompute_method == "uniform" and t.recompute_num_layers is not None
    if t.recompute_granularity != "full" or not uniform_runs or not d.fits or share < NOTABLE_SHARE / 2:
        return []
    per_chunk = max(d.layout) if t.pp > 1 else d.model.num_layers
    head = (
        f"the uniform method recomputes every layer ({_pct(share)} of the step) and {d.headroom_gib:.1f} GiB of HBM "
        "is free; "
    )
    return [
        (
            head + f"the block method recomputing {n} of each stage's {per_chunk} layers keeps the others' activations",
            {"recompute_method": "block", "recompute_num_layers": n, "recompute_granularity": "full"},
        )
        for n in sorted({per_chunk // 2, per_chunk - 1}, reverse=True)
        if 0 < n < per_chunk
    ]


def _rank_bytes(d: Diagnosis, train: TrainingSpec) -> tuple[float, ...] | None:
    """Each pipeline rank's bytes on the GPU under another recompute setting (None when the validator refuses it)."""
    from paraplan.errors import ConfigError
    from paraplan.projection import project_specs

    try:
        memory = project_specs(d.model, d.system, train).memory
    except ConfigError:
        return None
    return tuple(r.total_bytes for r in memory.ranks)


@rule("recompute_layers", P.RECOMPUTE)
def recompute_layers(d: Diagnosis) -> Proposals:
    """Recompute by layer index (Primus `recompute_layer_ids`): under a pipeline the first stage holds the most
    micro-batches in flight (pp under 1F1B, one on the last stage; Narayanan et al. 2021 section 2.2.1), so a block
    count the same on every stage recomputes on the later stages what only the first needs. Per stage, the layers
    whose activations its own headroom pays for are kept (each layer's cost on that rank: its bytes without
    recompute less those with every layer recomputed, over its layers), the first others recomputed."""
    t = d.train
    share = d.share(P.RECOMPUTE)
    if t.framework not in MCORE or t.recompute_granularity != "full" or t.pp < 2 or t.vpp > 1:
        return []
    if not d.fits or share < NOTABLE_SHARE or len(d.layout) != t.pp:
        return []
    reset = {"recompute_num_layers": None, "recompute_layer_ids": None, "recompute_method": "block"}
    every = _rank_bytes(d, replace(t, **reset))  # type: ignore[arg-type]
    none = _rank_bytes(d, replace(t, recompute_granularity="none", **reset))  # type: ignore[arg-type]
    if every is None or none is None or len(every) != t.pp or len(none) != t.pp:
        return []
    usable = d.projection.memory.usable_bytes
    out: Proposals = []
    for margin in (0, 1):  # the estimate, and one more layer recomputed per stage
        ids: list[int] = []
        start = 0
        for stage, layers in enumerate(d.layout):
            per_layer = (none[stage] - every[stage]) / layers if layers else 0.0
            room = usable - every[stage]
            kept = layers if per_layer <= 0 else min(layers, max(0, int(room // per_layer) - margin))
            ids += range(start, start + layers - kept)
            start += layers
        recomputed = tuple(ids)
        if not recomputed or len(recomputed) == d.model.num_layers or recomputed == t.recompute_layer_ids:
            continue
        per_stage = [sum(1 for i in recomputed if a <= i < a + n) for a, n in _starts(d.layout)]
        out.append(
            (
                f"full recomputation is {_pct(share)} of the step with the same count on every stage, but the later "
                f"stages hold fewer micro-batches in flight; recomputing {per_stage} layers per stage (by layer "
                "index) fills each stage's own headroom and recomputes less",
                {"recompute_layer_ids": recomputed, "recompute_num_layers": None, "recompute_method": "block"},
            )
        )
    return list(dict((str(c), (h, c)) for h, c in out).values())


def _starts(layout: tuple[int, ...]) -> list[tuple[int, int]]:
    """(first layer, layer count) of each stage."""
    out, start = [], 0
    for n in layout:
        out.append((start, n))
        start += n
    return out


@rule("memory_pressure")
def memory_pressure(d: Diagnosis) -> Proposals:
    """Over the usable HBM: the memory savers one after another, each proposal adding the next (full recompute
    keeps one input per layer; the distributed optimizer shards the optimizer states; smaller micro-batches;
    then more pipeline stages or a wider tp inside the node), so that one of them fits."""
    t = d.train
    if d.fits:
        return []
    head = f"the peak of {d.peak_gib:.1f} GiB is over the usable {d.usable_gib:.1f} GiB; "
    savers: list[tuple[str, dict[str, object]]] = []
    if t.recompute_granularity == "none":
        savers.append(
            ("selective recomputation drops attention's core activations", {"recompute_granularity": "selective"})
        )
    if t.recompute_granularity != "full" or t.recompute_num_layers is not None:
        savers.append(
            (
                "full recomputation keeps one input per layer",
                {"recompute_granularity": "full", "recompute_num_layers": None},
            )
        )
    if t.framework in MEGATRON_FAMILY and t.dp > 1 and not t.shards_optimizer:
        savers.append(("the distributed optimizer shards the optimizer states", {"use_distributed_optimizer": True}))
    if t.mbs > 1:
        savers.append((f"micro-batches of {t.mbs // 2} halve the activations", {"micro_batch_size": t.mbs // 2}))
    out: Proposals = []
    done: list[str] = []
    changes: dict[str, object] = {}
    for text, change in savers:
        if change.get("recompute_granularity") == "full":
            changes.pop("recompute_granularity", None)
            done = [x for x in done if "selective" not in x]
        changes = {**changes, **change}
        done.append(text)
        out.append((head + "; ".join(done), dict(changes)))
    if t.pp * 2 <= d.model.num_layers and t.dp % 2 == 0:
        out.append(
            (
                head + "; ".join([*done, f"pp={2 * t.pp} halves the layers per GPU"]),
                {**changes, "pipeline_model_parallel_size": 2 * t.pp},
            )
        )
    return out


@rule("bigger_microbatch", P.HOST_LAUNCH_BOUND, P.FORWARD_COMPUTE, P.BACKWARD_COMPUTE)
def bigger_microbatch(d: Diagnosis) -> Proposals:
    """Host launch waits and small GEMMs: larger micro-batches launch fewer, larger kernels (when the pipeline
    keeps enough micro-batches and memory allows)."""
    t = d.train
    launch = d.share(P.HOST_LAUNCH_BOUND)
    if d.headroom_share < ROOMY_HEADROOM or t.gbs % (2 * t.mbs * t.dp):
        return []
    if t.pp > 1 and t.num_microbatches // 2 < 2 * t.pp:
        return []
    compute = d.share(P.FORWARD_COMPUTE, P.BACKWARD_COMPUTE)
    lead = (
        f"host launch waits are {_pct(launch)} of the step"
        if launch >= NOTABLE_SHARE
        else f"compute is {_pct(compute)} of the step at micro-batches of {t.mbs}"
    )
    why = (
        f"{lead} and {d.headroom_gib:.1f} GiB of HBM is free; micro-batches of {2 * t.mbs} launch half the kernels "
        "and run larger, more efficient GEMMs"
    )
    return [(why, {"micro_batch_size": 2 * t.mbs})]


# --- mixture of experts
@rule("moe_dispatch", P.EP_COMM_EXPOSED)
def moe_dispatch(d: Diagnosis) -> Proposals:
    """Exposed expert all-to-all: overlap it with another micro-batch's compute, dispatch each token once per node
    (DeepEP / HybridEP, Megatron's `flex` dispatcher), or keep the experts inside the NVLink domain."""
    t = d.train
    share = d.share(P.EP_COMM_EXPOSED)
    if not d.model.is_moe or t.ep < 2 or share < NOTABLE_SHARE:
        return []
    head = f"the expert all-to-all is exposed for {_pct(share)} of the step at ep={t.ep}; "
    out: list[tuple[str, dict[str, object]]] = []
    if (
        not t.moe_ep_overlap
        and t.framework in MEGATRON_FAMILY
        and not ep_overlap_problems(d.model, t.with_values(moe_ep_overlap=True))
    ):
        out.append(
            (head + "overlapping it with another micro-batch's compute should hide it", {"moe_ep_overlap": True})
        )
    if t.moe_token_dispatcher_type != "flex" and t.framework in MEGATRON_FAMILY:
        out.append(
            (
                head + "the flex dispatcher (DeepEP) sends each token once per node, not once per expert",
                {"moe_token_dispatcher_type": "flex"},
            )
        )
    gpn = d.system.gpus_per_node
    if t.ep * t.etp > gpn and gpn % t.etp == 0 and d.model.num_experts % (gpn // t.etp) == 0:
        ep = gpn // t.etp
        out.append(
            (
                head + f"ep={ep} keeps the all-to-all inside one {gpn}-GPU NVLink domain (more experts per GPU)",
                {"expert_model_parallel_size": ep},
            )
        )
    return out


@rule("moe_drop_and_pad", P.HOST_LAUNCH_BOUND, history=True)
def moe_drop_and_pad(d: Diagnosis, history: Sequence[AgentStep]) -> Proposals:
    """Dropless MoE waits on the host: every MoE layer copies its token counts to the host to size the dispatch
    (megatron-core token_dispatcher.py `_maybe_dtoh_and_synchronize`), so the host cannot queue ahead and CUDA graphs
    stop at the router. Padding each expert's input to its capacity (`--moe-pad-expert-input-to-capacity` with
    `--moe-expert-capacity-factor`) keeps the counts on the GPU, at the padded work. It CHANGES THE TRAINING: the
    tokens past an expert's capacity are dropped; the hypothesis and the step's adjustments say so. A factor the log
    shows slower than its incumbent is not proposed again (the projection routes balanced tokens, so it cannot value
    a larger factor's fewer dropped tokens: only its padded work)."""
    t = d.train
    share = d.share(P.HOST_LAUNCH_BOUND)
    if not d.model.is_moe or not t.moe_host_sync or t.framework not in MCORE or share < NOTABLE_SHARE:
        return []
    factors = [t.moe_expert_capacity_factor] if t.moe_expert_capacity_factor is not None else list(CAPACITY_FACTORS)
    slower = {
        s.requested.get("moe_expert_capacity_factor")
        for s in history
        if s.source == "moe_drop_and_pad" and s.reason.startswith("slower")
    }
    factors = [f for f in factors if f not in slower]
    graphs = ", and the CUDA graphs then capture the MoE layers too" if t.cuda_graph_scope != "none" else ""
    out: Proposals = []
    for factor in factors:
        why = (
            f"host launch waits are {_pct(share)} of the step and each of the {d.model.num_moe_layers} MoE layers "
            f"waits for its token counts on the host (dropless dispatch); padding every expert's input to a capacity "
            f"factor of {factor:g} keeps them on the GPU so the host queues ahead{graphs}, at {factor:g}x the "
            "balanced expert work. This CHANGES THE TRAINING SEMANTICS: tokens routed past an expert's capacity are "
            "dropped"
        )
        out.append((why, knob_settings("moe_capacity", factor)))
    return out


@rule("cuda_graphs", P.HOST_LAUNCH_BOUND)
def cuda_graphs(d: Diagnosis) -> Proposals:
    """The GPU waiting on the host's kernel launches: capture them as CUDA graphs (Megatron `--cuda-graph-impl` with
    `--cuda-graph-scope`, NeMo `enable_cuda_graph`). Each decoder layer first (one launch per layer's forward and
    backward), then the whole iteration (the micro-batch loop's Python too). Full recompute runs only under the
    full-iteration scope, activation offload under none (megatron-core TransformerConfig). A dropless MoE layer
    stays eager from its router on (its token counts reach the host): `moe_drop_and_pad` lifts that."""
    t = d.train
    share = d.share(P.HOST_LAUNCH_BOUND)
    if t.framework not in MCORE or share < NOTABLE_SHARE or t.cpu_offloading_num_layers:
        return []
    head = f"the GPU waits on the host's kernel launches for {_pct(share)} of the step; "
    eager = (
        "; the MoE layers stay eager from the router on (dropless: their token counts reach the host)"
        if d.model.is_moe and t.moe_host_sync
        else ""
    )
    if t.cuda_graph_scope == "none" and t.recompute_granularity != "full":
        why = head + "capturing each decoder layer's forward and backward as a CUDA graph makes its launches one"
        return [(why + eager, {"cuda_graph_scope": "layer"})]
    if t.cuda_graph_scope == "full_iteration":
        return []
    what = "each layer is captured already" if t.cuda_graph_scope == "layer" else "full recompute allows no other scope"
    why = head + f"{what}; capturing the whole iteration also drops the per-micro-batch Python between them"
    return [(why + eager, {"cuda_graph_scope": "full_iteration"})]


@rule("loss_fusion", P.FORWARD_COMPUTE, P.BACKWARD_COMPUTE)
def loss_fusion(d: Diagnosis) -> Proposals:
    """The vocab-parallel loss run as eager fp32 PyTorch moves about four times the logits' bytes of the fused
    kernel (Megatron `--cross-entropy-loss-fusion`)."""
    t = d.train
    if t.cross_entropy_fusion or t.framework not in MEGATRON_FAMILY:
        return []
    return [
        (
            "the loss runs unfused (eager fp32 over the logits) on the last stage; the fused kernel reads them once",
            {"cross_entropy_fusion": True},
        )
    ]


@rule("memory_rescue", history=True)
def memory_rescue(d: Diagnosis, history: Sequence[AgentStep]) -> Proposals:
    """A proposal of the last round that projected faster but did not fit: the same change, paying the memory with
    recomputation (selective first: it recomputes least, Korthikanti et al. 2022)."""
    last = max((s.round for s in history), default=0)
    out: Proposals = []
    for step in history:
        if step.round != last or step.kind != "proposal" or step.memory_fits is not False or (step.gain_pct or 0) <= 0:
            continue
        if "recompute_granularity" in step.requested or step.source == "memory_rescue":
            continue
        head = (
            f"#{step.index} ({step.source}) projected {step.gain_pct:.1f}% faster but peaked at "
            f"{step.peak_gib:.1f} GiB of {d.usable_gib:.1f} usable; "
        )
        for mode in ("selective", "full"):
            if mode == d.train.recompute_granularity and d.train.recompute_num_layers is None:
                continue
            changes = {**step.requested, "recompute_granularity": mode, "recompute_num_layers": None}
            out.append((head + f"{mode} recomputation may pay for it", changes))
    return out


class RulesProposer:
    """Every registered rule's proposals for the incumbent, the ones addressing the largest share first."""

    name = "rules"

    def __init__(self, rules: Sequence[str] | None = None) -> None:
        unknown = [r for r in rules or () if r not in RULES]
        if unknown:
            from paraplan.errors import ConfigError

            raise ConfigError(f"unknown agent rule(s) {', '.join(unknown)}: choose from {', '.join(RULES)}")
        self.rules = [RULES[r] for r in rules] if rules else list(RULES.values())

    def propose(self, incumbent: Diagnosis, history: Sequence[AgentStep]) -> ProposalRound:
        scored: list[tuple[float, int, Proposal]] = []
        for index, r in enumerate(self.rules):
            weight = incumbent.share(*r.reads) if r.reads else 1.0  # memory rules first
            found = r.propose(incumbent, history) if r.history else r.propose(incumbent)
            for hypothesis, changes in found:
                scored.append((-weight, index, Proposal(hypothesis, dict(changes), r.name)))
        scored.sort(key=lambda item: (item[0], item[1]))
        return ProposalRound([p for _, _, p in scored])

    def skip_rounds(self, rounds: int) -> None:
        """Rules read only the incumbent: nothing to skip."""
