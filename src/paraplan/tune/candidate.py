"""One point of the search space and the tuning problem it belongs to.

A `Candidate` holds the values of every searched axis; data parallelism is derived (dp = GPUs / (tp*pp*cp)).
`TuneProblem` holds what the user fixed: the model, the cluster (one or several GPU counts), the global
batch and the sequence length, and the training settings that are not searched (framework, attention
backend). `to_training` turns the pair into the core's `TrainingSpec`, the only thing the projection sees.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace

from paraplan.specs.model import ModelSpec
from paraplan.specs.schedule import schedule as schedule_named
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec

SHARDINGS = ("ddp", "dist_opt", "zero2", "fsdp")
"""ddp: replicated states; dist_opt: Megatron distributed optimizer (= ZeRO-1); zero2: + sharded gradients
(Megatron FSDP `optim_grads`, DeepSpeed ZeRO-2); fsdp: fully sharded (ZeRO-3, Megatron FSDP `optim_grads_params`,
torch FSDP FULL_SHARD)."""
SHARDING_ALIASES = {
    "none": "ddp",
    "zero0": "ddp",
    "zero1": "dist_opt",
    "zero3": "fsdp",
    "distributed_optimizer": "dist_opt",
}


@dataclass(frozen=True, slots=True)
class Candidate:
    """The searched axes of one configuration. Flags that do not apply (SP at tp=1, ...) are kept False."""

    num_gpus: int
    precision: str
    tp: int
    cp: int
    pp: int
    vpp: int
    schedule: str
    ep: int
    etp: int
    mbs: int
    sp: bool
    sharding: str
    recompute: str  # none | selective | full
    recompute_layers: int | None  # with full: layers per model chunk recomputed (block method); None = all
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    tp_comm_overlap: bool
    ep_overlap: bool

    @property
    def dp(self) -> int:
        return self.num_gpus // (self.tp * self.pp * self.cp)

    @property
    def recompute_label(self) -> str:
        if self.recompute == "full" and self.recompute_layers is not None:
            return f"full:{self.recompute_layers}"
        return self.recompute

    def sort_key(self) -> tuple:
        """A total order (ties in the ranking go to the simpler layout: smaller tp, cp, pp first)."""
        return tuple(-1 if v is None else v for v in self.values())

    def structure(self) -> Candidate:
        """The group key: everything but recompute (recompute variants are evaluated as a chain)."""
        return replace(self, recompute="none", recompute_layers=None)

    def key(self) -> str:
        """A short stable text key (persistence, de-duplication across processes and runs)."""
        return "|".join(map(str, self.values()))

    def values(self) -> tuple:
        return (
            self.num_gpus, self.precision, self.tp, self.cp, self.pp, self.vpp, self.schedule, self.ep, self.etp,
            self.mbs, self.sp, self.sharding, self.recompute, self.recompute_layers, self.overlap_grad_reduce,
            self.overlap_param_gather, self.tp_comm_overlap, self.ep_overlap,
        )  # fmt: skip

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["dp"] = self.dp
        return out

    def describe(self) -> str:
        parts = [f"tp{self.tp}", f"pp{self.pp}"]
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
        parts += [f"cp{self.cp}"]
        if self.ep > 1 or self.etp != self.tp:
            parts += [f"ep{self.ep}", f"etp{self.etp}"]
        parts += [f"dp{self.dp}", f"mbs{self.mbs}"]
        if self.pp > 1:
            parts.append(self.schedule)
        parts += [self.precision, f"rc:{self.recompute_label}", self.sharding]
        if self.sp:
            parts.append("sp")
        return " ".join(parts)


@dataclass(frozen=True)
class TuneProblem:
    """What the user fixed. `systems` has one entry per GPU count searched (usually one)."""

    model: ModelSpec
    systems: tuple[SystemSpec, ...]
    gbs: int
    seq: int
    base: TrainingSpec = TrainingSpec()
    """Settings that are not searched (framework, attention backend, grad reduce precision)."""
    model_ref: str = ""
    """How the user named the model (preset or config.json path), for the reproducing command."""
    gpu_ref: str = ""
    """How the user named the GPU/system preset."""

    def system(self, num_gpus: int) -> SystemSpec:
        for s in self.systems:
            if s.num_gpus == num_gpus:
                return s
        raise KeyError(num_gpus)

    @property
    def gpu_counts(self) -> tuple[int, ...]:
        return tuple(s.num_gpus for s in self.systems)

    def key(self) -> str:
        """Identifies the problem in a study file: same key, same results."""
        text = json.dumps(
            {
                "model": repr(self.model),
                "systems": [repr(s) for s in self.systems],
                "gbs": self.gbs,
                "seq": self.seq,
                "base": repr(self.base),
            },
            sort_keys=True,
        )
        return hashlib.sha1(text.encode()).hexdigest()[:16]


def model_stages(schedule: str, pp: int, vpp: int) -> int:
    """Model stages the layers are split over (the schedule's own layout: pp, pp*vpp interleaved, 2*pp for
    the V schedules; DualPipe's second chunk per rank is a copy)."""
    return schedule_named(schedule).model_stages(pp, vpp)


def pipeline_split(model: ModelSpec, stages: int) -> dict[str, object] | None:
    """Layers over `stages` model stages: evenly, or (Megatron-Bridge) counting the embedding and the loss
    as one layer each when that makes it even; None when neither divides."""
    if stages == 1 or model.num_layers % stages == 0:
        return {}
    if (model.num_layers + 2) % stages == 0 and model.num_layers + 2 >= 2 * stages:
        return {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    return None


def to_training(problem: TuneProblem, c: Candidate) -> TrainingSpec:
    """The core's training spec for a candidate (dp given explicitly, the pipeline split chosen here)."""
    split = pipeline_split(problem.model, model_stages(c.schedule, c.pp, c.vpp)) or {}
    values: dict[str, object] = {
        "tensor_model_parallel_size": c.tp,
        "pipeline_model_parallel_size": c.pp,
        "virtual_pipeline_model_parallel_size": c.vpp,
        "context_parallel_size": c.cp,
        "expert_model_parallel_size": c.ep,
        "expert_tensor_parallel_size": c.etp if problem.model.is_moe else None,
        "data_parallel_size": c.dp,
        "micro_batch_size": c.mbs,
        "global_batch_size": problem.gbs,
        "seq_length": problem.seq,
        "sequence_parallel": c.sp,
        "recompute_granularity": c.recompute,
        "recompute_num_layers": c.recompute_layers,
        "use_distributed_optimizer": c.sharding == "dist_opt",
        "zero_stage": {"ddp": 0, "dist_opt": 0, "zero2": 2, "fsdp": 0}[c.sharding],
        "fsdp": c.sharding == "fsdp",
        "overlap_grad_reduce": c.overlap_grad_reduce,
        "overlap_param_gather": c.overlap_param_gather,
        "tp_comm_overlap": c.tp_comm_overlap,
        "moe_ep_overlap": c.ep_overlap,
        "precision": c.precision,
        "pipeline_schedule": c.schedule,
        "account_for_embedding_in_pipeline_split": False,
        "account_for_loss_in_pipeline_split": False,
        "pipeline_layout": None,
        "decoder_first_pipeline_num_layers": None,
        "decoder_last_pipeline_num_layers": None,
        **split,
    }
    return replace(problem.base, **values)


def from_training(problem: TuneProblem, train: TrainingSpec, num_gpus: int) -> Candidate:
    """The candidate that a given training spec is (the `--candidates` mode)."""
    if train.fsdp or train.zero_stage >= 3:
        sharding = "fsdp"
    elif train.zero_stage == 2:
        sharding = "zero2"
    elif train.use_distributed_optimizer or train.zero_stage == 1:
        sharding = "dist_opt"
    else:
        sharding = "ddp"
    tp, pp, cp = train.tp, train.pp, train.cp
    dp = train.data_parallel_size or max(1, num_gpus // (tp * pp * cp))
    return Candidate(
        num_gpus=tp * pp * cp * dp,
        precision=train.precision,
        tp=tp,
        cp=cp,
        pp=pp,
        vpp=train.vpp,
        schedule=train.pipeline_schedule,
        ep=train.ep,
        etp=train.etp,
        mbs=train.mbs,
        sp=train.sequence_parallel,
        sharding=sharding,
        recompute=train.recompute_granularity,
        recompute_layers=train.recompute_num_layers,
        overlap_grad_reduce=train.overlap_grad_reduce,
        overlap_param_gather=train.overlap_param_gather,
        tp_comm_overlap=train.tp_comm_overlap,
        ep_overlap=train.moe_ep_overlap,
    )
