"""Timing on one device: each block kind forward and backward at the target's shard shapes, one optimizer
step, and the device's achieved matmul and copy peaks.

Backward is timed as in training: the weight gradients accumulate into existing `.grad` buffers. When the
schedule needs them apart (zero-bubble, DualPipe), the input gradient alone (B) is timed too, and the
weight gradient is W = (B + W) - B. Each measurement is warm-up runs, then repeats; the median is used
and the spread (interquartile range / median) kept.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from paraplan.graph.layers import Shard
from paraplan.measure.device import DevicePeaks, torch_dtype
from paraplan.measure.hybrid.timing import DeviceTimer, Stats
from paraplan.measure.layers import build_block
from paraplan.specs.model import ModelSpec

BENCH_VERSION = 2  # bump when what is timed changes: old cache rows stop matching
OPTIMIZER_MAX_PARAMS = 256_000_000  # the optimizer is memory-bound: its time per parameter is flat past this


@dataclass(frozen=True, slots=True)
class BenchSettings:
    device: str = "cpu"
    dtype: str = "fp32"
    warmup: int = 2
    repeats: int = 5
    split_backward: bool = False
    seed: int = 0

    @classmethod
    def default(cls, device: str, dtype: str, split_backward: bool = False) -> BenchSettings:
        if device == "cuda":
            return cls(device, dtype, warmup=5, repeats=20, split_backward=split_backward)
        return cls(device, dtype, warmup=2, repeats=5, split_backward=split_backward)


@dataclass(frozen=True, slots=True)
class BlockMeasurement:
    kind: str
    forward: Stats
    backward: Stats  # input and weight gradients together (B + W)
    backward_input: Stats | None  # B alone, when measured
    params: int
    cached: bool = False

    @property
    def forward_s(self) -> float:
        return self.forward.expected_s

    @property
    def backward_s(self) -> float:
        return self.backward.expected_s

    @property
    def jitter_s(self) -> float:
        """Run-to-run standard deviation of one forward + backward."""
        return math.hypot(self.forward.stdev_s, self.backward.stdev_s)

    @property
    def backward_input_s(self) -> float | None:
        return self.backward_input.expected_s if self.backward_input is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "forward": self.forward.to_dict(),
            "backward": self.backward.to_dict(),
            "backward_input": self.backward_input.to_dict() if self.backward_input else None,
            "params": self.params,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], cached: bool = False) -> BlockMeasurement:
        bi = data.get("backward_input")
        return cls(
            kind=str(data["kind"]),
            forward=Stats.from_dict(data["forward"]),
            backward=Stats.from_dict(data["backward"]),
            backward_input=Stats.from_dict(bi) if bi else None,
            params=int(data["params"]),
            cached=cached,
        )


@dataclass(frozen=True, slots=True)
class OptimizerMeasurement:
    """One AdamW step (plus zeroing the gradients) over `params` parameters."""

    step: Stats
    params: int
    cached: bool = False

    @property
    def seconds_per_param(self) -> float:
        return self.step.expected_s / self.params if self.params else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step.to_dict(), "params": self.params}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], cached: bool = False) -> OptimizerMeasurement:
        return cls(Stats.from_dict(data["step"]), int(data["params"]), cached)


def shape_key(kind: str, model: ModelSpec, shard: Shard, settings: BenchSettings) -> dict[str, Any]:
    """What determines a block's time: the model fields its layers read, the shard, the settings."""
    fields = dataclasses.asdict(model)
    for unused in ("name", "num_layers", "source", "mtp_num_layers"):
        fields.pop(unused, None)
    return {
        "kind": kind,
        "model": fields,
        "shard": dataclasses.asdict(shard),
        "dtype": settings.dtype,
        "warmup": settings.warmup,
        "repeats": settings.repeats,
        "split": settings.split_backward,
        "version": BENCH_VERSION,
    }


def private_cache_bytes(device: str) -> int:
    """The largest cache one device has to itself: a CPU core's own L2 (or L1), a GPU's L2."""
    if device == "cuda":
        return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0))
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            shared = (index / "shared_cpu_list").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if "," in shared or "-" in shared:
            continue  # shared with other cores
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        best = max(best, int(size[:-1]) * units.get(size[-1], 1) if size[-1] in units else int(size))
    return best or 2**20


def rotation_copies(weight_bytes: float, cache_bytes: int, most: int = 4) -> int:
    """Copies of a block to cycle through so its weights are not warm in the cache on every repeat, as in
    a real model where other layers run in between (1 when the weights dwarf the cache anyway)."""
    if weight_bytes >= 2 * cache_bytes:
        return 1
    return min(most, 1 + math.ceil(2 * cache_bytes / max(weight_bytes, 1.0)))


class BlockTimer:
    """Times one block, one repeat at a time (`once`), so a caller can interleave it with other work.
    Repeats cycle through a few copies of the block when its weights would otherwise stay in the cache."""

    def __init__(self, kind: str, model: ModelSpec, shard: Shard, settings: BenchSettings) -> None:
        self.settings = settings
        first = build_block(kind, model, shard, settings.dtype, settings.device, seed=settings.seed)
        weight_bytes = sum(p.numel() * p.element_size() for p in first.params)
        copies = rotation_copies(weight_bytes, private_cache_bytes(settings.device))
        self.runs = [first] + [
            build_block(kind, model, shard, settings.dtype, settings.device, seed=settings.seed + i)
            for i in range(1, copies)
        ]
        for run in self.runs:
            for p in run.params:  # gradient buffers that backward accumulates into, as in a training step
                p.grad = torch.zeros_like(p)
        probe = first.forward()
        self.grad_out = None if probe.dim() == 0 else torch.randn_like(probe)
        self.timer = DeviceTimer(settings.device)
        self.samples: list[tuple[float, float, float]] = []  # (forward, backward, input-gradient backward)

    @property
    def kind(self) -> str:
        return self.runs[0].kind

    def once(self) -> None:
        run = self.runs[len(self.samples) % len(self.runs)]
        grad_out, timer, params = self.grad_out, self.timer, run.params
        timer.sync()
        t_f, out = timer.elapsed_s(run.forward)
        t_b, _ = timer.elapsed_s(lambda: torch.autograd.backward(out, grad_out, inputs=[*run.inputs, *params]))
        for x in run.inputs:
            x.grad = None
        del out
        t_bi = 0.0
        if self.settings.split_backward and run.inputs:
            out = run.forward()
            timer.sync()
            t_bi, _ = timer.elapsed_s(lambda: torch.autograd.grad(out, run.inputs, grad_out))
            del out
        self.samples.append((t_f, t_b, t_bi))

    def result(self) -> BlockMeasurement:
        kept = self.samples[self.settings.warmup :]
        forward, backward, backward_input = (Stats.of([row[i] for row in kept]) for i in range(3))
        n_params = sum(p.numel() for p in self.runs[0].params)
        split = backward_input if self.settings.split_backward else None
        return BlockMeasurement(self.kind, forward, backward, split, n_params)


def time_block(kind: str, model: ModelSpec, shard: Shard, settings: BenchSettings) -> BlockMeasurement:
    """Warm-up runs, then repeats, of one block's forward and backward."""
    timer = BlockTimer(kind, model, shard, settings)
    for _ in range(settings.warmup + settings.repeats):
        timer.once()
    result = timer.result()
    del timer
    _free(settings.device)
    return result


def _free(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()


def _optimizer_shapes(shapes: list[tuple[int, ...]], max_params: int) -> list[tuple[int, ...]]:
    """The benchmark blocks' parameter shapes, smallest first, up to `max_params` parameters."""
    kept, total = [], 0
    for shape in sorted(shapes, key=_numel):
        if total + _numel(shape) > max_params and kept:
            break
        kept.append(shape)
        total += _numel(shape)
    return kept


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class OptimizerTimer:
    """AdamW over fp32 master weights of the given shapes, then zeroing the gradients; with 16-bit model
    weights the updated master weights are also copied into them (Megatron's mixed-precision optimizer).
    One timed step per `once`."""

    def __init__(
        self, param_shapes: list[tuple[int, ...]], settings: BenchSettings, max_params: int = OPTIMIZER_MAX_PARAMS
    ) -> None:
        self.settings = settings
        shapes = _optimizer_shapes(param_shapes, max_params)
        device = torch.device(settings.device)
        self.master = [torch.nn.Parameter(torch.randn(s, device=device) * 0.02) for s in shapes]
        for p in self.master:
            p.grad = torch.randn_like(p) * 1e-3
        model_dtype = torch_dtype(settings.dtype)
        self.copies = (
            [torch.empty(s, device=device, dtype=model_dtype) for s in shapes] if model_dtype != torch.float32 else []
        )
        kwargs = {"fused": True} if settings.device == "cuda" else {"foreach": True}
        self.optimizer = torch.optim.AdamW(self.master, lr=1e-4, **kwargs)
        self.params = sum(_numel(s) for s in shapes)
        self.timer = DeviceTimer(settings.device)
        self.samples: list[float] = []

    def _step(self) -> None:
        self.optimizer.step()
        for p in self.master:
            p.grad.zero_()
        if self.copies:
            torch._foreach_copy_(self.copies, [p.detach() for p in self.master])

    def once(self) -> None:
        self.timer.sync()
        self.samples.append(self.timer.elapsed_s(self._step)[0])

    def result(self) -> OptimizerMeasurement:
        return OptimizerMeasurement(Stats.of(self.samples[self.settings.warmup :]), self.params)


def time_optimizer(
    param_shapes: list[tuple[int, ...]], settings: BenchSettings, max_params: int = OPTIMIZER_MAX_PARAMS
) -> OptimizerMeasurement:
    timer = OptimizerTimer(param_shapes, settings, max_params)
    for _ in range(settings.warmup + settings.repeats):
        timer.once()
    result = timer.result()
    del timer
    _free(settings.device)
    return result


def _repeat(fn: Callable[[], Any], settings: BenchSettings) -> list[float]:
    timer = DeviceTimer(settings.device)
    samples = []
    for i in range(settings.warmup + settings.repeats):
        timer.sync()
        t, _ = timer.elapsed_s(fn)
        if i >= settings.warmup:
            samples.append(t)
    return samples


def block_param_shapes(kind: str, model: ModelSpec, shard: Shard) -> list[tuple[int, ...]]:
    """Parameter shapes of one block, built on the meta device (no memory)."""
    with torch.device("meta"):
        run = build_block(kind, model, shard, "fp32", "meta")
    return [tuple(p.shape) for p in run.params]


def time_peaks(settings: BenchSettings) -> DevicePeaks:
    """A large square matmul and a large copy, the best of a few runs."""
    n = 4096 if settings.device == "cuda" else 1024
    copy_elems = 2**28 if settings.device == "cuda" else 2**24
    device, dtype = torch.device(settings.device), torch_dtype(settings.dtype)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    src = torch.randn(copy_elems, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    quick = BenchSettings(settings.device, settings.dtype, warmup=1, repeats=3)
    matmul_s = min(_repeat(lambda: a @ b, quick))
    copy_s = min(_repeat(lambda: dst.copy_(src), quick))
    copy_bytes = 2 * src.numel() * src.element_size()  # read + write
    _free(settings.device)
    return DevicePeaks(2 * n**3 / matmul_s, copy_bytes / copy_s)
