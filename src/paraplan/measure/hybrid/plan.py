"""The downscaling planner: from the target configuration and the local devices, the benchmark to run.

Every benchmark rank computes what one rank of the target computes, at the target's shard shapes (heads
and FFN / tp, sequence / cp, experts / ep): ranks of a TP, CP or EP group do the same work (balanced
routing), so one device stands for all of them and no compute needs scaling. What the shrink removes is
restored by the projection: layer counts, the pipeline schedule, and every collective of a cut group
from the communication model, whose constants are fitted to collectives timed among the local devices.

Order of the cuts (the issue's): fewer layers (one of each distinct kind: dense, MoE, with MLA attention
when the model has it, and the first- and last-stage extras: embedding, LM head + loss, MTP); PP to 1;
DP to one replica; then the in-scope groups shrink to the local device count, EP first (keeping the
target's experts per rank), then TP. CP is never reduced: each rank keeps its seq/cp share and the
load-balanced causal mask. Only when one rank's share of a block does not fit a local device does the
planner split it further along TP (and experts along EP) and scale the measured compute back up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from paraplan.cost.block import weight_params
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.ops import CommAxis, CommKind, Op, OpKind
from paraplan.measure.device import LocalDevices
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MEMORY_USE = 0.8  # fraction of a device's memory the benchmark may plan to use (allocator, workspaces)
FP8 = ("fp8", "fp8_cs", "fp8_blockwise", "mxfp8", "nvfp4")


@dataclass(frozen=True, slots=True)
class Cut:
    what: str  # "layers" | "pp" | "dp" | "ep" | "tp" | "cp" | "memory" | "precision"
    target: int | str
    bench: int | str
    reason: str
    restored: str  # how the projection puts it back

    def line(self) -> str:
        return f"{self.what} {self.target} -> {self.bench}: {self.reason}; restored: {self.restored}"


@dataclass(frozen=True, slots=True)
class CommUse:
    """A collective the target issues: the fit weighs the local samples near these sizes more."""

    kind: CommKind
    nbytes: float


@dataclass(frozen=True, slots=True)
class BenchPlan:
    model: ModelSpec
    train: TrainingSpec  # the target, validated (dp resolved)
    shard: L.Shard  # the shapes each benchmark block runs at
    kinds: tuple[str, ...]  # block kinds to run
    layer_counts: dict[str, int]  # how many of each kind the whole target model has
    dtype: str  # the benchmark's precision
    compute_scale: float  # measured compute x this = one target rank's compute (1 unless memory forced a split)
    collective_ranks: int  # local devices the collective benchmark runs on (0: none)
    memory_bytes: float  # estimated peak per benchmark device
    device_memory_bytes: float
    split_backward: bool  # the schedule needs B and W apart
    cuts: tuple[Cut, ...]
    comm_use: tuple[CommUse, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def explain(self) -> list[str]:
        return [c.line() for c in self.cuts] + list(self.notes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kinds": list(self.kinds),
            "layer_counts": dict(self.layer_counts),
            "dtype": self.dtype,
            "compute_scale": self.compute_scale,
            "collective_ranks": self.collective_ranks,
            "memory_gib": self.memory_bytes / 2**30,
            "device_memory_gib": self.device_memory_bytes / 2**30,
            "split_backward": self.split_backward,
            "shard": {
                "tp": self.shard.tp,
                "sp": self.shard.sp,
                "cp": self.shard.cp,
                "ep": self.shard.ep,
                "etp": self.shard.etp,
                "mbs": self.shard.batch,
                "seq_per_rank": self.shard.seq,
            },
            "cuts": [c.line() for c in self.cuts],
            "notes": list(self.notes),
        }


def block_ops(kind: str, model: ModelSpec, shard: L.Shard) -> list[Op]:
    """The graph's operators of one block kind (what the reference layer must match)."""
    return K.layer_kind(kind).ops(model, shard)


def layer_counts(model: ModelSpec) -> dict[str, int]:
    """Blocks of each layer kind in the whole model (`graph.kinds.block_counts`)."""
    return K.block_counts(model)


def block_memory_bytes(kind: str, model: ModelSpec, shard: L.Shard, dtype: str) -> float:
    """Peak bytes of running one block: weights and gradients, saved activations, the largest outputs."""
    elem = DTYPE_BYTES[dtype]
    ops = block_ops(kind, model, shard)
    table_params = K.layer_kind(kind).params_of(model, shard)
    params = sum(weight_params(op) for op in ops) if table_params is None else table_params
    saved = sum(op.saved_bytes for op in ops) * elem / L.ACT_BYTES
    largest = max((op.bytes_moved for op in ops if op.kind is not OpKind.COMM), default=0.0) * elem / L.ACT_BYTES
    return params * 2 * elem + saved + 2 * largest


def bench_dtype(precision: str, device: str, requested: str | None) -> tuple[str, list[str]]:
    """The precision the benchmark runs in, with a note when it differs from the target's."""
    if requested:
        return requested, []
    if device == "cpu":
        return "fp32", ["cpu: blocks run in fp32 (16-bit matmul on CPUs is often emulated)"]
    if precision in FP8:
        return "bf16", [f"{precision} needs Transformer Engine kernels: blocks run in bf16 (no FP8 speed-up)"]
    return (precision if precision in DTYPE_BYTES else "bf16"), []


def _comm_use(model: ModelSpec, train: TrainingSpec, shard: L.Shard, kinds: tuple[str, ...]) -> list[CommUse]:
    """Collectives the target issues, with their sizes (per layer, per stage boundary, per step)."""
    use = [
        CommUse(op.comm.kind, op.comm.bytes)
        for kind in kinds
        for op in block_ops(kind, model, shard)
        if op.comm is not None and op.comm.group_size > 1
    ]
    if train.pp > 1:
        use.append(CommUse(CommKind.SEND_RECV, L.ACT_BYTES * shard.tokens * model.hidden_size / shard.sp_div))
    if train.dp * train.cp > 1:
        params = sum(
            weight_params(op) * layer_counts(model).get(kind, 0)
            for kind in kinds
            for op in block_ops(kind, model, shard)
        ) / max(1, train.pp)
        grad_bytes = train.grad_reduce_bytes
        if train.shards_params or train.shards_optimizer:
            use += [
                CommUse(CommKind.REDUCE_SCATTER, params * grad_bytes),
                CommUse(CommKind.ALL_GATHER, params * train.param_gather_bytes),
            ]
        else:
            use.append(CommUse(CommKind.ALL_REDUCE, params * grad_bytes))
    return use


def _largest_divisor(value: int, fits: Callable[[int], bool]) -> int:
    """The largest divisor of `value` for which `fits` holds (1 at least)."""
    for candidate in range(value - 1, 0, -1):
        if value % candidate == 0 and fits(candidate):
            return candidate
    return 1


def plan_benchmark(
    model: ModelSpec,
    system: SystemSpec,
    train: TrainingSpec,
    devices: LocalDevices,
    dtype: str | None = None,
) -> BenchPlan:
    train = check(model, system, train)
    shard = replace(L.Shard.of(train), fused_loss=True)  # the benchmark's loss is torch's F.cross_entropy
    counts = layer_counts(model)
    kinds = tuple(counts)
    cuts: list[Cut] = []
    dtype, notes = bench_dtype(train.precision, devices.kind, dtype)
    attention = "MLA" if model.is_mla else "GQA" if model.kv_groups < model.num_attention_heads else "MHA"
    layer_kinds = [k for k in kinds if K.layer_kind(k).holds_layer]
    n_layers = model.num_layers + model.mtp_num_layers
    if n_layers > len(layer_kinds):
        listing = ", ".join(f"{counts[k]} {k}" for k in layer_kinds)
        cuts.append(
            Cut(
                "layers",
                n_layers,
                len(layer_kinds),
                f"one layer of each distinct kind ({attention} attention; {listing}) plus the embedding and "
                "LM head + loss",
                "each kind's measured time times its count, per pipeline stage",
            )
        )
    if train.pp > 1 or train.vpp > 1:
        cuts.append(
            Cut(
                "pp",
                train.pp * train.vpp if train.vpp > 1 else train.pp,
                1,
                "the first stage's embedding and the last stage's head run beside the layers on one device",
                f"PP send/recv from the communication model; the {train.pipeline_schedule} schedule over "
                f"{train.pp} stages and {train.num_microbatches} micro-batches played by the simulator",
            )
        )
    if train.dp > 1:
        how = (
            "FSDP all-gather/reduce-scatter with prefetch overlap"
            if train.shards_params
            else "gradient reduce-scatter and parameter all-gather"
            if train.shards_optimizer
            else "gradient all-reduce"
        )
        overlap = " overlapped with backward" if train.overlap_grad_reduce else ""
        cuts.append(
            Cut(
                "dp",
                train.dp,
                1,
                "one replica: data-parallel ranks run the same work",
                f"DP {how}{overlap} from the communication model",
            )
        )
    # in-scope groups: the collectives that could run among the local devices
    tp_b, cp_b, ep_b = train.tp, train.cp, train.ep if model.is_moe else 1
    etp = train.etp

    def ranks() -> int:
        return max(tp_b * cp_b, ep_b * etp)

    if ranks() > devices.count and ep_b > 1 and ep_b * etp >= tp_b * cp_b:
        new = _largest_divisor(ep_b, lambda e: max(tp_b * cp_b, e * etp) <= devices.count)
        cuts.append(
            Cut(
                "ep",
                ep_b,
                new,
                f"{devices.count} local {devices.kind} device(s); every rank keeps the target's "
                f"{model.num_experts // train.ep} expert(s) and {shard.batch * shard.seq} tokens",
                "the EP all-to-all from the communication model",
            )
        )
        ep_b = new
    if ranks() > devices.count and tp_b > 1:
        new = _largest_divisor(tp_b, lambda t: max(t * cp_b, ep_b * etp) <= devices.count)
        cuts.append(
            Cut(
                "tp",
                tp_b,
                new,
                f"{devices.count} local device(s) (last resort); each device still computes one TP rank's "
                f"shard ({model.num_attention_heads}/{train.tp} heads, FFN {model.ffn_hidden_size}/{train.tp}), "
                "so the compute needs no scaling",
                "TP all-reduce / all-gather + reduce-scatter from the communication model",
            )
        )
        tp_b = new
    if cp_b > devices.count:
        notes.append(
            f"cp {train.cp} is kept (never reduced): each rank runs its seq/cp = {shard.seq} tokens with the "
            "load-balanced causal mask; the K/V ring exchange comes from the communication model"
        )
    # memory: the last resort splits a block further and scales its compute back up
    memory = max(block_memory_bytes(k, model, shard, dtype) for k in kinds)
    budget = devices.memory_bytes * MEMORY_USE
    scale = 1
    while memory > budget:
        bigger = _split_further(model, train, shard, scale * 2)
        if bigger is None:
            notes.append(
                f"one block needs about {memory / 2**30:.1f} GiB, more than {budget / 2**30:.1f} GiB usable; "
                "no further split is possible: the run may fail for lack of memory"
            )
            break
        scale *= 2
        memory = max(block_memory_bytes(k, model, bigger, dtype) for k in kinds)
        shard = bigger
    if scale > 1:
        cuts.append(
            Cut(
                "memory",
                f"tp {train.tp}",
                f"tp {shard.tp}",
                f"one rank's share does not fit {devices.memory_bytes / 2**30:.0f} GiB: blocks split {scale}x "
                "further along TP (expert weights along EP)",
                "measured compute x the analytic ratio of the target's shard to the benchmarked one",
            )
        )
    local_comm = tp_b * cp_b > 1 or ep_b > 1 or train.pp > 1 or train.dp > 1
    collective_ranks = min(devices.count, max(2, ranks())) if devices.count >= 2 and local_comm else 0
    return BenchPlan(
        model=model,
        train=train,
        shard=shard,
        kinds=kinds,
        layer_counts=counts,
        dtype=dtype,
        compute_scale=float(scale),
        collective_ranks=collective_ranks,
        memory_bytes=memory,
        device_memory_bytes=devices.memory_bytes,
        split_backward=train.schedule.split_backward,
        cuts=tuple(cuts),
        comm_use=tuple(_comm_use(model, train, L.Shard.of(train), kinds)),
        notes=tuple(notes),
    )


def _split_further(model: ModelSpec, train: TrainingSpec, shard: L.Shard, factor: int) -> L.Shard | None:
    """The shard with TP (and EP, for the expert weights) multiplied by `factor`, when the dims allow it.
    The projection scales each block's measured compute back by the analytic ratio of the two shards."""
    tp = train.tp * factor
    heads_ok = model.num_attention_heads % tp == 0 and (model.is_mla or model.kv_groups % tp == 0)
    seq_ok = not shard.sp or shard.seq % tp == 0
    if not heads_ok or not seq_ok or model.ffn_hidden_size % tp:
        return None
    ep = shard.ep
    if model.is_moe and model.num_experts % (train.ep * factor) == 0:
        ep = train.ep * factor
    return replace(shard, tp=tp, ep=ep)


__all__ = ["BenchPlan", "CommAxis", "CommUse", "Cut", "block_memory_bytes", "block_ops", "plan_benchmark"]
