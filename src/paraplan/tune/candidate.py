"""One point of the search space and the tuning problem it belongs to.

A `Candidate` holds the GPU count and the values of every searched axis, in a `TrainingSpec` under the core's
names; the tuner's short names are views of it (`AXIS_FIELDS`); data parallelism is derived (dp = GPUs /
(tp*pp*cp)).
`TuneProblem` holds what the user fixed: the model, the cluster (one or several GPU counts), the global
batch and the sequence length, and the training settings that are not searched (framework, attention
backend). `to_training` turns the pair into the core's `TrainingSpec`, the only thing the projection sees.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from paraplan.cost.block import OpTimer
from paraplan.graph.balance import balanced_layout
from paraplan.specs.model import ModelSpec
from paraplan.specs.schedule import schedule as schedule_named
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec, spec_with

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


AXIS_FIELDS: dict[str, str] = {
    "precision": "precision",
    "tp": "tensor_model_parallel_size",
    "cp": "context_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "vpp": "virtual_pipeline_model_parallel_size",
    "schedule": "pipeline_schedule",
    "ep": "expert_model_parallel_size",
    "etp": "expert_tensor_parallel_size",
    "mbs": "micro_batch_size",
    "sp": "sequence_parallel",
    "recompute": "recompute_granularity",
    "recompute_layers": "recompute_num_layers",
    "overlap_grad_reduce": "overlap_grad_reduce",
    "overlap_param_gather": "overlap_param_gather",
    "tp_comm_overlap": "tp_comm_overlap",
    "ep_overlap": "moe_ep_overlap",
}
"""The tuner's name of each searched axis (what it shows, what `--fix` and candidate files take) -> the
`TrainingSpec` field that holds it. `sharding` is the one axis that spans three fields (`SHARDING_SETTINGS`)."""

SHARDING_SETTINGS: dict[str, dict[str, object]] = {
    "ddp": {"use_distributed_optimizer": False, "zero_stage": 0, "fsdp": False},
    "dist_opt": {"use_distributed_optimizer": True, "zero_stage": 0, "fsdp": False},
    "zero2": {"use_distributed_optimizer": False, "zero_stage": 2, "fsdp": False},
    "fsdp": {"use_distributed_optimizer": False, "zero_stage": 0, "fsdp": True},
}
"""Each sharding choice as the TrainingSpec settings that make it."""

SEARCHED_FIELDS: tuple[str, ...] = (*AXIS_FIELDS.values(), "use_distributed_optimizer", "zero_stage", "fsdp")
"""The TrainingSpec fields a candidate sets; every other field comes from the problem (`to_training`)."""

CANDIDATE_AXES: tuple[str, ...] = (
    "num_gpus", "precision", "tp", "cp", "pp", "vpp", "schedule", "ep", "etp", "mbs", "sp", "sharding", "recompute",
    "recompute_layers", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "ep_overlap",
)  # fmt: skip
"""The axes in the order the tuner shows, sorts, keys and stores them."""


KNOB_DEFAULTS: dict[str, object] = {
    "cuda_graphs": "none",
    "optimizer_offload": 0.0,
    "activation_offload": 0,
    "moe_capacity": 0.0,
    "optimizer_states": "fp32",
}
"""The production knobs as optional tuner axes, at their "off" value (searched only when `--fix`ed, so the default
space, its keys and stored results are as without them): `cuda_graphs` (`cuda_graph_scope`), `optimizer_offload`
(the share of the optimizer on the CPU, 0 = none), `activation_offload` (decoder layers whose activations go to the
host), `moe_capacity` (drop-and-pad capacity factor, 0 = dropless with the host sync), `optimizer_states` (fp32, or
bf16 Adam moments through the precision-aware optimizer)."""
KNOB_FIELDS: tuple[str, ...] = (
    "cuda_graph_scope", "optimizer_cpu_offload", "optimizer_offload_fraction", "cpu_offloading_num_layers",
    "moe_pad_expert_input_to_capacity", "moe_expert_capacity_factor", "use_precision_aware_optimizer",
    "exp_avg_dtype", "exp_avg_sq_dtype",
)  # fmt: skip
"""The TrainingSpec fields the knob axes set."""


def knob_settings(axis: str, value: object) -> dict[str, object]:
    """One knob axis's value as the TrainingSpec settings that make it."""
    if axis == "cuda_graphs":
        return {"cuda_graph_scope": str(value)}
    if axis == "optimizer_offload":
        share = float(value)  # type: ignore[arg-type]
        return {"optimizer_cpu_offload": share > 0, "optimizer_offload_fraction": share if share > 0 else 1.0}
    if axis == "activation_offload":
        return {"cpu_offloading_num_layers": int(value)}  # type: ignore[call-overload]
    if axis == "moe_capacity":
        factor = float(value)  # type: ignore[arg-type]
        return {"moe_pad_expert_input_to_capacity": factor > 0, "moe_expert_capacity_factor": factor or None}
    if axis == "optimizer_states":
        return {
            "use_precision_aware_optimizer": value != "fp32",
            "exp_avg_dtype": str(value),
            "exp_avg_sq_dtype": str(value),
        }
    raise KeyError(axis)


def knob_of(train: TrainingSpec, axis: str) -> object:
    """A knob axis's value in a training spec (the inverse of `knob_settings`)."""
    if axis == "cuda_graphs":
        return train.cuda_graph_scope
    if axis == "optimizer_offload":
        return train.offloaded_optimizer_fraction
    if axis == "activation_offload":
        return train.cpu_offloading_num_layers
    if axis == "moe_capacity":
        return train.moe_padding_factor if train.moe_pad_expert_input_to_capacity else 0.0
    if axis == "optimizer_states":
        return train.exp_avg_dtype if train.use_precision_aware_optimizer else "fp32"
    raise KeyError(axis)


def sharding_of(train: TrainingSpec) -> str:
    """The sharding choice a training spec makes (ZeRO-1 is the distributed optimizer, ZeRO-3 FSDP)."""
    if train.fsdp or train.zero_stage >= 3:
        return "fsdp"
    if train.zero_stage == 2:
        return "zero2"
    if train.use_distributed_optimizer or train.zero_stage == 1:
        return "dist_opt"
    return "ddp"


_DEFAULT_SPEC = TrainingSpec()
"""What a candidate's fields start from (the problem's settings come in with `to_training`)."""


def _searched_values(axes: dict[str, object]) -> dict[str, object]:
    """Tuner axis names -> TrainingSpec field values; an unknown axis is an error, not dropped."""
    unknown = set(axes) - set(AXIS_FIELDS) - {"sharding"} - set(KNOB_DEFAULTS)
    if unknown:
        raise TypeError(f"not a candidate axis: {', '.join(sorted(unknown))}")
    values = {AXIS_FIELDS[k]: v for k, v in axes.items() if k in AXIS_FIELDS}
    for axis in KNOB_DEFAULTS:
        if axis in axes:
            values |= knob_settings(axis, axes[axis])
    if "sharding" in axes:
        values |= SHARDING_SETTINGS[str(axes["sharding"])]
    return values


@dataclass(frozen=True, slots=True)
class Candidate:
    """One point of the search: a GPU count and the searched training settings, held in a `TrainingSpec` under
    the core's names (its other fields stay at their defaults: `to_training` takes them from the problem). The
    tuner's short names (tp, sp, sharding, recompute_layers, ep_overlap, ...) are read-only views of it
    (`AXIS_FIELDS`). Flags that do not apply (SP at tp=1, ...) are kept False."""

    num_gpus: int
    train: TrainingSpec

    @classmethod
    def of(cls, num_gpus: int, **axes: object) -> Candidate:
        """A candidate from every axis but num_gpus, by the tuner's names (`CANDIDATE_AXES`)."""
        missing = set(CANDIDATE_AXES) - {"num_gpus"} - set(axes)
        if missing:
            raise TypeError(f"missing candidate axes: {', '.join(sorted(missing))}")
        return cls(num_gpus, spec_with(_DEFAULT_SPEC, _searched_values(axes)))

    def with_axes(self, **axes: object) -> Candidate:
        """This candidate with some axes changed (tuner names; num_gpus too)."""
        num_gpus = int(axes.pop("num_gpus", self.num_gpus))  # type: ignore[call-overload]
        return Candidate(num_gpus, spec_with(self.train, _searched_values(axes)))

    # ------------------------------------------------------------------ the tuner's names
    @property
    def precision(self) -> str:
        return self.train.precision

    @property
    def tp(self) -> int:
        return self.train.tensor_model_parallel_size

    @property
    def cp(self) -> int:
        return self.train.context_parallel_size

    @property
    def pp(self) -> int:
        return self.train.pipeline_model_parallel_size

    @property
    def vpp(self) -> int:
        return self.train.virtual_pipeline_model_parallel_size

    @property
    def schedule(self) -> str:
        return self.train.pipeline_schedule

    @property
    def ep(self) -> int:
        return self.train.expert_model_parallel_size

    @property
    def etp(self) -> int:
        return self.train.etp

    @property
    def mbs(self) -> int:
        return self.train.micro_batch_size

    @property
    def sp(self) -> bool:
        return self.train.sequence_parallel

    @property
    def sharding(self) -> str:
        return sharding_of(self.train)

    @property
    def recompute(self) -> str:
        return self.train.recompute_granularity

    @property
    def recompute_layers(self) -> int | None:
        """With full recompute: layers per model chunk recomputed (block method); None = all."""
        return self.train.recompute_num_layers

    @property
    def overlap_grad_reduce(self) -> bool:
        return self.train.overlap_grad_reduce

    @property
    def overlap_param_gather(self) -> bool:
        return self.train.overlap_param_gather

    @property
    def tp_comm_overlap(self) -> bool:
        return self.train.tp_comm_overlap

    @property
    def ep_overlap(self) -> bool:
        return self.train.moe_ep_overlap

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
        return tuple(-1 if v is None else v for v in self.values()) + tuple(str(v) for v in self.knobs().values())

    def structure(self) -> Candidate:
        """The group key: everything but recompute (recompute variants are evaluated as a chain)."""
        return self.with_axes(recompute="none", recompute_layers=None)

    def knob(self, axis: str) -> object:
        """A knob axis's value (`KNOB_DEFAULTS`)."""
        return knob_of(self.train, axis)

    def knobs(self) -> dict[str, object]:
        """The knob axes away from their "off" value (empty for every candidate of the default space)."""
        return {axis: v for axis in KNOB_DEFAULTS if (v := self.knob(axis)) != KNOB_DEFAULTS[axis]}

    def key(self) -> str:
        """A short stable text key (persistence, de-duplication across processes and runs); knobs that are on are
        appended as axis=value."""
        knobs = [f"{axis}={value}" for axis, value in self.knobs().items()]
        return "|".join([*map(str, self.values()), *knobs])

    def values(self) -> tuple:
        return tuple(getattr(self, axis) for axis in CANDIDATE_AXES)

    def to_dict(self) -> dict[str, object]:
        return {**dict(zip(CANDIDATE_AXES, self.values(), strict=True)), "dp": self.dp, **self.knobs()}

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
        parts += [f"{axis}={value}" for axis, value in self.knobs().items()]
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
    profile: OpTimer | None = None
    """The fitted profile every candidate is projected with (`ProjectionOptions.profile`); None: analytic."""

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
                **({"profile": repr(self.profile)} if self.profile is not None else {}),  # its file and digest
            },
            sort_keys=True,
        )
        return hashlib.sha1(text.encode()).hexdigest()[:16]


def model_stages(schedule: str, pp: int, vpp: int) -> int:
    """Model stages the layers are split over (the schedule's own layout: pp, pp*vpp interleaved, 2*pp for
    the V schedules; DualPipe's second chunk per rank is a copy)."""
    return schedule_named(schedule).model_stages(pp, vpp)


def pipeline_split(model: ModelSpec, stages: int, seq: int = 4096) -> dict[str, object] | None:
    """Layers over `stages` model stages: evenly, or (Megatron-Bridge) counting the embedding and the loss
    as one layer each when that makes it even; None when neither divides. A hybrid model's unequal blocks (Mamba,
    attention, MLP; Gated DeltaNet among full attention) are split by their work instead (`graph.balance`; Megatron's
    '|' stage boundaries in a hybrid pattern)."""
    if model.has_unequal_mixers and stages > 1:
        layout = balanced_layout(model, stages, seq)
        return None if layout is None else {"pipeline_layout": layout}
    if stages == 1 or model.num_layers % stages == 0:
        return {}
    if (model.num_layers + 2) % stages == 0 and model.num_layers + 2 >= 2 * stages:
        return {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    return None


def to_training(problem: TuneProblem, c: Candidate) -> TrainingSpec:
    """The core's training spec for a candidate: its searched fields over the problem's fixed settings, dp
    given explicitly, the pipeline split chosen here."""
    split = pipeline_split(problem.model, model_stages(c.schedule, c.pp, c.vpp), problem.seq) or {}
    values: dict[str, object] = {
        **{name: getattr(c.train, name) for name in SEARCHED_FIELDS},
        # knob axes the candidate turns on (the problem's own settings stand otherwise)
        **{name: value for axis in c.knobs() for name, value in knob_settings(axis, c.knob(axis)).items()},
        "expert_tensor_parallel_size": c.etp if problem.model.is_moe else None,
        "data_parallel_size": c.dp,
        "global_batch_size": problem.gbs,
        "seq_length": problem.seq,
        "account_for_embedding_in_pipeline_split": False,
        "account_for_loss_in_pipeline_split": False,
        "pipeline_layout": None,
        "decoder_first_pipeline_num_layers": None,
        "decoder_last_pipeline_num_layers": None,
        **split,
    }
    return spec_with(problem.base, values)


def from_training(problem: TuneProblem, train: TrainingSpec, num_gpus: int) -> Candidate:
    """The candidate that a given training spec is (the `--candidates` mode)."""
    tp, pp, cp = train.tp, train.pp, train.cp
    dp = train.data_parallel_size or max(1, num_gpus // (tp * pp * cp))
    searched = {name: getattr(train, name) for name in SEARCHED_FIELDS}
    searched |= {"expert_tensor_parallel_size": train.etp, **SHARDING_SETTINGS[sharding_of(train)]}
    searched |= {name: getattr(train, name) for name in KNOB_FIELDS}
    return Candidate(tp * pp * cp * dp, spec_with(_DEFAULT_SPEC, searched))
