"""The search space: the values each axis may take, narrowed by the user's constraints.

Axes: tp pp vpp cp ep etp mbs (dp is derived), recompute (none / selective / full / full:N layers per chunk),
sharding (ddp / dist_opt / zero2 / fsdp), sp, schedule, the overlap flags and the precision. The space only
proposes; whether a point is legal is decided by the one validator (`paraplan.specs.validate`).

Overlap flags default to "on where it applies": the grad-reduce, param-gather and TP-communication overlaps
never lengthen the step nor add memory in the cost model (tested in tests/tune/test_space.py), so searching
"off" would only cost time. The EP overlap trades memory for time, so both values are searched.
`--fix NAME=true,false` searches both for any flag, `--fix NAME=false` turns one off.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from paraplan.errors import ConfigError
from paraplan.specs.schedule import SCHEDULES, megatron_schedule
from paraplan.specs.training import CUDA_GRAPH_SCOPES, PRECISIONS
from paraplan.tune.candidate import (
    KNOB_DEFAULTS,
    SHARDING_ALIASES,
    SHARDINGS,
    Candidate,
    TuneProblem,
    model_stages,
    pipeline_split,
)

INT_AXES = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "dp")
BOOL_AXES = ("sp", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "ep_overlap")
TEXT_AXES = ("recompute", "sharding", "schedule", "precision")
KNOB_AXES = tuple(KNOB_DEFAULTS)
"""Optional axes (`candidate.KNOB_DEFAULTS`): held at "off" unless `--fix`ed (`--fix cuda_graphs=none,layer`)."""
AXES = INT_AXES + BOOL_AXES + TEXT_AXES + KNOB_AXES
AXIS_ALIASES = {
    "sequence_parallel": "sp",
    "zero": "sharding",
    "pipeline_schedule": "schedule",
    "moe_ep_overlap": "ep_overlap",
    "micro_batch_size": "mbs",
}
DEFAULT_SCHEDULES = tuple(name for name, s in SCHEDULES.items() if not s.all_forwards_first)
"""A schedule that runs all forwards first (GPipe) runs as long as 1F1B and holds every micro-batch's
activations: never better, so not searched unless asked for (`--fix schedule=gpipe`)."""
MAX_MBS = 16
SEARCHED_FLAGS = ("ep_overlap",)
"""Flags that are not dominated (on can cost memory), so the space holds both values."""


@dataclass(frozen=True)
class SpaceLimits:
    """The user's constraints: allowed values per axis (`--fix tp=4,8`) and upper bounds (`--max-pp 16`)."""

    allowed: Mapping[str, tuple[object, ...]] = field(default_factory=dict)
    max_values: Mapping[str, int] = field(default_factory=dict)

    def allows(self, axis: str, value: object) -> bool:
        values = self.allowed.get(axis)
        if values is not None and value not in values:
            return False
        limit = self.max_values.get(axis)
        return limit is None or not isinstance(value, int) or isinstance(value, bool) or value <= limit


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def parse_recompute(text: str) -> tuple[str, int | None]:
    """none | selective | full | full:N (N layers per model chunk, Megatron's block method)."""
    text = text.strip().lower()
    if text.startswith("full:"):
        layers = int(text.removeprefix("full:"))
        if layers < 1:
            raise ValueError(text)
        return "full", layers
    if text not in ("none", "selective", "full"):
        raise ValueError(text)
    return text, None


def parse_axis_value(axis: str, text: str) -> object:
    if axis in INT_AXES:
        return int(text)
    if axis in BOOL_AXES:
        return _parse_bool(text)
    if axis == "recompute":
        return parse_recompute(text)
    if axis == "sharding":
        name = SHARDING_ALIASES.get(text.strip().lower(), text.strip().lower())
        if name not in SHARDINGS:
            raise ValueError(text)
        return name
    if axis == "schedule":
        if text not in SCHEDULES:
            raise ValueError(text)
        return text
    if axis == "precision":
        if text not in PRECISIONS:
            raise ValueError(text)
        return text
    return parse_knob_value(axis, text)


OPTIMIZER_STATE_DTYPES = ("fp32", "bf16", "fp16", "fp8")


def parse_knob_value(axis: str, text: str) -> object:
    """cuda_graphs none|layer|full_iteration; optimizer_offload 0..1; activation_offload N >= 0; moe_capacity
    F >= 0 (0: dropless); optimizer_states fp32|bf16|fp16|fp8."""
    text = text.strip().lower()
    if axis == "cuda_graphs":
        if text not in CUDA_GRAPH_SCOPES:
            raise ValueError(text)
        return text
    if axis == "optimizer_offload":
        share = float(text)
        if not 0.0 <= share <= 1.0:
            raise ValueError(text)
        return share
    if axis == "activation_offload":
        layers = int(text)
        if layers < 0:
            raise ValueError(text)
        return layers
    if axis == "moe_capacity":
        factor = float(text)
        if factor < 0:
            raise ValueError(text)
        return factor
    if axis == "optimizer_states":
        if text not in OPTIMIZER_STATE_DTYPES:
            raise ValueError(text)
        return text
    raise KeyError(axis)


def parse_constraints(fixes: list[str], max_values: Mapping[str, int | None]) -> SpaceLimits:
    """`--fix tp=8`, `--fix recompute=none,selective`, `--max-pp 16`: one problem line per bad item."""
    problems: list[str] = []
    allowed: dict[str, tuple[object, ...]] = {}
    for item in fixes:
        if "=" not in item:
            problems.append(f"--fix expects AXIS=VALUE[,VALUE...] (got '{item}')")
            continue
        name, _, raw = item.partition("=")
        axis = AXIS_ALIASES.get(name.strip().lower(), name.strip().lower())
        if axis not in AXES:
            problems.append(f"--fix: unknown axis '{name}' (axes: {', '.join(AXES)})")
            continue
        values: list[object] = []
        for text in raw.split(","):
            try:
                values.append(parse_axis_value(axis, text))
            except (ValueError, KeyError):
                problems.append(f"--fix {axis}: bad value '{text}'")
        if values:
            allowed[axis] = tuple(values)
    limits: dict[str, int] = {}
    for axis, value in max_values.items():
        if value is None:
            continue
        if value < 1:
            problems.append(f"--max-{axis} must be >= 1 (got {value})")
        limits[axis] = value
    if problems:
        raise ConfigError(problems)
    return SpaceLimits(allowed=allowed, max_values=limits)


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def _searched_sharding(sharding: str, pp: int) -> bool:
    """The search keeps ZeRO-2 to pp 1: the validator admits it beside pipeline stages (torch FSDP SHARD_GRAD_OP,
    as Llama 3 ran), but the frameworks the tuner emits (Megatron-LM, NeMo) ship no tested recipe of Megatron-FSDP
    `optim_grads` with pipeline parallelism, so the tuner does not propose one."""
    return sharding != "zero2" or pp == 1


def _ep_overlap_applies(schedule: str, pp: int, ep: int) -> bool:
    """The EP overlap is searched where Megatron runs it: expert parallelism and F&B pairs to hide it in
    (`PipelineSchedule.has_ep_overlap_pairs`; the knob rule `specs.knobs.ep_overlap_problems`)."""
    return ep > 1 and SCHEDULES[schedule].has_ep_overlap_pairs(pp)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class SearchSpace:
    """Axis values for one problem. Iterating `structures()` yields every group base (recompute "none");
    `recompute_chain(base)` the recompute variants of a group, cheapest in time first."""

    problem: TuneProblem
    limits: SpaceLimits = SpaceLimits()

    # ------------------------------------------------------------------ axis values
    def _ints(self, axis: str, candidates: list[int]) -> list[int]:
        explicit = self.limits.allowed.get(axis)
        values = sorted(set(candidates) | ({v for v in explicit if isinstance(v, int)} if explicit else set()))
        return [v for v in values if self.limits.allows(axis, v)]

    def tp_values(self) -> list[int]:
        model = self.problem.model
        domain = max(s.gpus_per_node for s in self.problem.systems)
        limit = self.limits.max_values.get("tp", domain)
        values = [t for t in _powers_of_two(limit) if model.num_attention_heads % t == 0]
        return self._ints("tp", values)

    def cp_values(self) -> list[int]:
        seq = self.problem.seq
        limit = self.limits.max_values.get("cp", 32)
        return self._ints("cp", [c for c in _powers_of_two(limit) if c == 1 or seq % (2 * c) == 0])

    def pp_values(self) -> list[int]:
        layers = self.problem.model.num_layers
        limit = min(self.limits.max_values.get("pp", layers), layers)
        return self._ints("pp", [p for p in range(1, limit + 1) if self._pipeline_shapes(p)])

    def mbs_values(self) -> list[int]:
        return self._ints("mbs", _powers_of_two(self.limits.max_values.get("mbs", MAX_MBS)))

    def ep_values(self) -> list[int]:
        model = self.problem.model
        if not model.is_moe:
            return [1]
        limit = self.limits.max_values.get("ep", model.num_experts)
        return self._ints("ep", [e for e in _divisors(model.num_experts) if e <= limit])

    def etp_values(self, tp: int) -> list[int]:
        if not self.problem.model.is_moe:
            return [tp]
        return self._ints("etp", [e for e in _powers_of_two(tp) if tp % e == 0])

    def precision_values(self) -> list[str]:
        explicit = self.limits.allowed.get("precision")
        if explicit:
            return [str(p) for p in explicit]
        gpu = self.problem.systems[0].gpu
        return ["bf16" if gpu.supports("bf16") and gpu.bf16_tflops > 0 else "fp16"]

    def sharding_values(self) -> list[str]:
        """Replicated states (DDP) are searched only when asked for: the distributed optimizer moves the same
        gradient bytes (reduce-scatter + all-gather = all-reduce), keeps less memory and steps the optimizer
        on a shard, so it is never worse (tested in tests/tune/test_space.py)."""
        values = [s for s in SHARDINGS if self.limits.allows("sharding", s)]
        if "sharding" not in self.limits.allowed and "dist_opt" in values:
            values.remove("ddp")
        return values

    def sp_values(self, tp: int) -> list[bool]:
        """Sequence parallelism with tp > 1 unless asked otherwise: with the TP communication overlap it
        needs, it is never slower nor bigger than plain TP (tested in tests/tune/test_space.py)."""
        if tp == 1:
            return [False] if self.limits.allows("sp", False) else []
        explicit = self.limits.allowed.get("sp")
        return [bool(v) for v in explicit] if explicit else [True]

    def flag_values(self, axis: str, applies: bool) -> list[bool]:
        """Overlap flags: on where they apply unless the user asked otherwise; the EP overlap both ways (pairing
        micro-batches to hide the all-to-all keeps more activations alive)."""
        if not applies:
            return [False]
        explicit = self.limits.allowed.get(axis)
        if explicit:
            return [bool(v) for v in explicit]
        return [True, False] if axis in SEARCHED_FLAGS else [True]

    def knob_values(self, axis: str) -> list[object]:
        """An optional axis's values: the `--fix`ed ones, else only "off" (the default space is unchanged)."""
        explicit = self.limits.allowed.get(axis)
        if axis == "moe_capacity" and not self.problem.model.is_moe:
            return [KNOB_DEFAULTS[axis]]
        return list(explicit) if explicit else [KNOB_DEFAULTS[axis]]

    def knob_combinations(self) -> list[dict[str, object]]:
        """Every combination of the knob axes' values ({} alone when none is searched)."""
        searched = [axis for axis in KNOB_AXES if self.knob_values(axis) != [KNOB_DEFAULTS[axis]]]
        return [
            dict(zip(searched, values, strict=True))
            for values in itertools.product(*(self.knob_values(axis) for axis in searched))
        ]

    def _pipeline_shapes(self, pp: int) -> list[tuple[str, int]]:
        """(schedule, vpp) pairs whose layer split works for this pp."""
        model = self.problem.model
        if pp == 1:
            shapes = [(megatron_schedule(1).name, 1)]
        else:
            shapes = []
            for schedule in self.limits.allowed.get("schedule", DEFAULT_SCHEDULES):
                if SCHEDULES[str(schedule)].interleaves:
                    limit = self.limits.max_values.get("vpp", model.num_layers)
                    vpps = [v for v in range(2, limit + 1) if pipeline_split(model, pp * v) is not None]
                    shapes += [(str(schedule), v) for v in vpps]
                elif pipeline_split(model, model_stages(str(schedule), pp, 1)) is not None:
                    shapes.append((str(schedule), 1))
        return [(s, v) for s, v in shapes if self.limits.allows("schedule", s) and self.limits.allows("vpp", v)]

    # ------------------------------------------------------------------ enumeration
    def normalize(self, c: Candidate) -> Candidate:
        """Flags that do not apply are False, so equivalent points are one point."""
        if c.recompute == "full" and c.recompute_layers is not None and c.recompute_layers >= self.layers_per_chunk(c):
            c = c.with_axes(recompute_layers=None)
        return c.with_axes(
            sp=c.sp and c.tp > 1,
            overlap_param_gather=c.overlap_param_gather and c.sharding in ("dist_opt", "zero2"),
            overlap_grad_reduce=c.overlap_grad_reduce and c.sharding != "fsdp" and c.dp * c.cp > 1,
            tp_comm_overlap=c.tp_comm_overlap and c.tp > 1 and c.sp,
            ep_overlap=c.ep_overlap and _ep_overlap_applies(c.schedule, c.pp, c.ep),
            etp=c.etp if self.problem.model.is_moe else c.tp,
        )

    def structures(self) -> Iterator[Candidate]:
        """Every group base, ordered so that neighbours share per-layer costs (warm caches)."""
        model = self.problem.model
        gbs = self.problem.gbs
        pps = self.pp_values()
        shapes = {p: self._pipeline_shapes(p) for p in pps}
        for num_gpus in self.problem.gpu_counts:
            for precision in self.precision_values():
                for tp, cp in itertools.product(self.tp_values(), self.cp_values()):
                    for sp in self.sp_values(tp):
                        for mbs in self.mbs_values():
                            for pp in pps:
                                if num_gpus % (tp * cp * pp):
                                    continue
                                dp = num_gpus // (tp * cp * pp)
                                if gbs % (mbs * dp) or not self.limits.allows("dp", dp):
                                    continue
                                yield from self._rest(num_gpus, precision, tp, cp, sp, mbs, pp, shapes[pp], model)

    def count_structures(self) -> int:
        """len(list(structures())) without building them (to choose between enumerating and sampling)."""
        model, gbs = self.problem.model, self.problem.gbs
        pps = self.pp_values()
        shapes = {p: self._pipeline_shapes(p) for p in pps}
        total = 0
        for num_gpus in self.problem.gpu_counts:
            for _precision in self.precision_values():
                for tp, cp in itertools.product(self.tp_values(), self.cp_values()):
                    for sp in self.sp_values(tp):
                        for mbs in self.mbs_values():
                            for pp in pps:
                                if num_gpus % (tp * cp * pp) or not shapes[pp]:
                                    continue
                                dp = num_gpus // (tp * cp * pp)
                                if gbs % (mbs * dp) or not self.limits.allows("dp", dp):
                                    continue
                                per_shape = 0
                                for (schedule, _), ep, etp, sharding in itertools.product(
                                    shapes[pp], self.ep_values(), self.etp_values(tp), self.sharding_values()
                                ):
                                    if model.is_moe and (tp * cp * dp) % (etp * ep):
                                        continue
                                    if not _searched_sharding(sharding, pp):
                                        continue
                                    per_shape += (
                                        len(self.flag_values("overlap_grad_reduce", sharding != "fsdp" and dp * cp > 1))
                                        * len(
                                            self.flag_values("overlap_param_gather", sharding in ("dist_opt", "zero2"))
                                        )
                                        * len(self.flag_values("tp_comm_overlap", tp > 1 and sp))
                                        * len(self.flag_values("ep_overlap", _ep_overlap_applies(schedule, pp, ep)))
                                    )
                                total += per_shape
        return total * len(self.knob_combinations())

    def _rest(self, num_gpus, precision, tp, cp, sp, mbs, pp, shapes, model) -> Iterator[Candidate]:  # noqa: ANN001
        dp = num_gpus // (tp * cp * pp)
        knob_combinations = self.knob_combinations()  # the same for every structure (read only)
        for (schedule, vpp), ep, etp, sharding in itertools.product(
            shapes, self.ep_values(), self.etp_values(tp), self.sharding_values()
        ):
            if model.is_moe and (tp * cp * dp) % (etp * ep):
                continue
            if not _searched_sharding(sharding, pp):
                continue
            for ogr, opg, tco, epo in itertools.product(
                self.flag_values("overlap_grad_reduce", sharding != "fsdp" and dp * cp > 1),
                self.flag_values("overlap_param_gather", sharding in ("dist_opt", "zero2")),
                self.flag_values("tp_comm_overlap", tp > 1 and sp),
                self.flag_values("ep_overlap", _ep_overlap_applies(schedule, pp, ep)),
            ):
                base = Candidate.of(
                    num_gpus=num_gpus,
                    precision=precision,
                    tp=tp,
                    cp=cp,
                    pp=pp,
                    vpp=vpp,
                    schedule=schedule,
                    ep=ep,
                    etp=etp,
                    mbs=mbs,
                    sp=sp,
                    sharding=sharding,
                    recompute="none",
                    recompute_layers=None,
                    overlap_grad_reduce=ogr,
                    overlap_param_gather=opg,
                    tp_comm_overlap=tco,
                    ep_overlap=epo,
                )
                for knobs in knob_combinations:
                    yield base.with_axes(**knobs) if knobs else base

    def layers_per_chunk(self, c: Candidate) -> int:
        chunks = model_stages(c.schedule, c.pp, c.vpp)
        return -(-self.problem.model.num_layers // chunks)

    def recompute_options(self, base: Candidate) -> list[tuple[str, int | None]]:
        """Recompute variants of a group, cheapest in time first: none, selective, full:1, full:2, full:4, ...,
        full (every layer); none and selective alone with the EP overlap."""
        allowed = self.limits.allowed.get("recompute")
        per_chunk = self.layers_per_chunk(base)
        options: list[tuple[str, int | None]] = [("none", None), ("selective", None)]
        options += [("full", n) for n in _powers_of_two(per_chunk - 1)]
        options.append(("full", None))
        if allowed:
            options = [o for o in options if o in allowed] + [
                o  # type: ignore[misc]
                for o in allowed
                if isinstance(o, tuple) and o not in options and o[1] is not None and o[1] < per_chunk
            ]
        if base.ep_overlap:  # Megatron runs the EP overlap without full recompute (`specs.knobs.ep_overlap_problems`)
            options = [o for o in options if o[0] != "full"]
        return options

    def recompute_chain(self, base: Candidate) -> list[Candidate]:
        return [
            base.with_axes(recompute=mode, recompute_layers=layers) for mode, layers in self.recompute_options(base)
        ]

    def axis_values(self, axis: str, around: Candidate) -> list[object]:
        """Values of one axis with the others held at `around` (the seed planner's line search)."""
        if axis == "tp":
            return list(self.tp_values())
        if axis == "cp":
            return list(self.cp_values())
        if axis == "pipeline":
            return [(p, s, v) for p in self.pp_values() for s, v in self._pipeline_shapes(p)]
        if axis == "mbs":
            return list(self.mbs_values())
        if axis == "ep":
            return list(self.ep_values())
        if axis == "etp":
            return list(self.etp_values(around.tp))
        if axis == "sp":
            return list(self.sp_values(around.tp))
        if axis == "sharding":
            return list(self.sharding_values())
        if axis == "precision":
            return list(self.precision_values())
        if axis == "recompute":
            return list(self.recompute_options(around))
        if axis == "num_gpus":
            return list(self.problem.gpu_counts)
        if axis in KNOB_AXES:
            return self.knob_values(axis)
        if axis in BOOL_AXES:
            explicit = self.limits.allowed.get(axis)
            return [bool(v) for v in explicit] if explicit else [True, False]
        raise KeyError(axis)

    def with_axis(self, c: Candidate, axis: str, value: object) -> Candidate:
        if axis == "pipeline":
            pp, schedule, vpp = value  # type: ignore[misc]
            return c.with_axes(pp=pp, schedule=schedule, vpp=vpp)
        if axis == "recompute":
            mode, layers = value  # type: ignore[misc]
            return c.with_axes(recompute=mode, recompute_layers=layers)
        if axis == "tp":
            etp = value if not self.problem.model.is_moe else min(c.etp, int(value))  # type: ignore[call-overload]
            return c.with_axes(tp=value, etp=etp)
        return c.with_axes(**{axis: value})

    def admits(self, c: Candidate) -> bool:
        """Whether a point lies inside the user's constraints (LLM proposals, `--candidates`)."""
        checks: dict[str, object] = {
            "tp": c.tp,
            "pp": c.pp,
            "vpp": c.vpp,
            "cp": c.cp,
            "ep": c.ep,
            "etp": c.etp,
            "mbs": c.mbs,
            "dp": c.dp,
            "sp": c.sp,
            "sharding": c.sharding,
            "schedule": c.schedule,
            "precision": c.precision,
            "recompute": (c.recompute, c.recompute_layers),
            **{axis: c.knob(axis) for axis in KNOB_AXES if axis in self.limits.allowed},
        }
        if c.num_gpus not in self.problem.gpu_counts:
            return False
        return all(self.limits.allows(axis, value) for axis, value in checks.items())

    def candidate_from_mapping(self, values: Mapping[str, object], num_gpus: int | None = None) -> Candidate:
        """A candidate from axis names (LLM proposals, candidate files); unknown axes are an error."""
        problems: list[str] = []
        parsed: dict[str, object] = {}
        for name, raw in values.items():
            axis = AXIS_ALIASES.get(str(name).lower(), str(name).lower())
            if axis in ("dp", "num_gpus", "recompute_layers", "recompute_num_layers"):
                parsed[axis] = raw
                continue
            if axis not in AXES:
                problems.append(f"unknown axis '{name}'")
                continue
            try:
                parsed[axis] = parse_axis_value(axis, str(raw).lower() if isinstance(raw, bool) else str(raw))
            except (ValueError, KeyError):
                problems.append(f"{axis}: bad value '{raw}'")
        if problems:
            raise ConfigError(problems)
        tp = int(parsed.get("tp", 1))  # type: ignore[call-overload]
        pp = int(parsed.get("pp", 1))  # type: ignore[call-overload]
        cp = int(parsed.get("cp", 1))  # type: ignore[call-overload]
        gpus = num_gpus or int(parsed.get("num_gpus", self.problem.gpu_counts[0]))  # type: ignore[call-overload]
        if "dp" in parsed and int(parsed["dp"]) * tp * pp * cp != gpus:  # type: ignore[call-overload]
            raise ConfigError(f"tp*pp*cp*dp = {tp}*{pp}*{cp}*{parsed['dp']} is not the GPU count {gpus}")
        recompute, layers = parsed.get("recompute", ("none", None))  # type: ignore[misc]
        if parsed.get("recompute_layers") or parsed.get("recompute_num_layers"):
            layers = int(parsed.get("recompute_layers") or parsed.get("recompute_num_layers"))  # type: ignore[call-overload]
        vpp = int(parsed.get("vpp", 1))  # type: ignore[call-overload]
        schedule = str(parsed.get("schedule", megatron_schedule(vpp).name))
        sp = bool(parsed.get("sp", tp > 1))
        sharding = str(parsed.get("sharding", "dist_opt"))
        ep = int(parsed.get("ep", 1))  # type: ignore[call-overload]
        c = Candidate.of(
            num_gpus=gpus,
            precision=str(parsed.get("precision", self.precision_values()[0])),
            tp=tp,
            cp=cp,
            pp=pp,
            vpp=1 if (SCHEDULES[schedule].chunks or 1) > 1 else vpp,  # a fixed 2 chunks whatever vpp says
            schedule=schedule,
            ep=ep,
            etp=int(parsed.get("etp", tp)),  # type: ignore[call-overload]
            mbs=int(parsed.get("mbs", 1)),  # type: ignore[call-overload]
            sp=sp,
            sharding=sharding,
            recompute=str(recompute),
            recompute_layers=layers,
            overlap_grad_reduce=bool(parsed.get("overlap_grad_reduce", True)),
            overlap_param_gather=bool(parsed.get("overlap_param_gather", True)),
            tp_comm_overlap=bool(parsed.get("tp_comm_overlap", True)),
            ep_overlap=bool(parsed.get("ep_overlap", True)),
        )
        knobs = {axis: parsed[axis] for axis in KNOB_AXES if axis in parsed}
        return self.normalize(c.with_axes(**knobs) if knobs else c)
