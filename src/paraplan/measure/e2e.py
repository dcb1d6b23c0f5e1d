"""A small reference training run on this machine's CPU, to check projections end to end.

A Llama-style decoder (RMSNorm, grouped-query attention through `scaled_dot_product_attention`, rotary
embeddings, SwiGLU MLP, tied or untied LM head, cross-entropy in fp32) trained with fused AdamW for a few
steps, in one process or data-parallel over gloo (local processes); plus what a CPU projection needs
measured here (`measure_cpu`, `framework_overhead`, `fit_allreduce`, `cpu_system`, `cpu_calibration`) and
breakdowns of the projected and the real step (`projected_ops`, `step_breakdown`, `measured_categories`).

The layout follows what paraplan's operator graph (`paraplan.graph.layers`) models, so that a projection
of the same model and batch is comparable op for op: one fused QKV projection with one rotary call over
the query and key heads, one fused gate+up projection, the whole model in the training dtype (parameters,
gradients and AdamW states; no master copy), and data parallelism as one all-reduce of a contiguous
gradient buffer after the backward (Megatron's DDP without overlap: `overlap_grad_reduce=False`). The loss
is divided by the data-parallel size before the backward, so the summed gradients are the mean. The model
is the reference model of `paraplan.measure.reference` (the layers the hybrid projection times,
`paraplan.measure.layers`), and the data-parallel processes are `paraplan.measure.processes`' (one harness).

fp32 by default (`--precision fp32` in paraplan): on CPUs with AMX, bf16 matmuls are fast but PyTorch's
bf16 flash-attention backward takes a scalar path (20x its forward, 5x the fp32 backward, time nearly
independent of the work, so `paraplan fit` rejects its samples) and bf16 elementwise kernels convert on
every op.

Step times are wall-clock and process CPU times of whole steps (forward, backward, gradient all-reduce,
optimizer step, zeroing gradients) after warm-up; the data-parallel time of a step is the slowest rank's.
torch is imported lazily: importing this module does not need it.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paraplan.measure.device import cpu_gpu_spec, torch_dtype, torch_threads
from paraplan.measure.processes import run_processes
from paraplan.measure.reference import TinyLlama, build_stage, flat_grad_buffer, parameter_count
from paraplan.specs.training import TrainingSpec

if TYPE_CHECKING:
    from paraplan.cost.calibration import Calibration
    from paraplan.result import Projection
    from paraplan.specs.system import SystemSpec


@dataclass(frozen=True, slots=True)
class RunConfig:
    batch: int = 4  # sequences per rank per step (one micro-batch)
    seq: int = 128
    steps: int = 8  # timed steps
    warmup: int = 2
    dtype: str = "fp32"  # "fp32" | "bf16" (see the module doc for why fp32 is the default on CPUs)
    threads: int = 1  # torch intra-op threads per process
    lr: float = 1e-3
    seed: int = 0

    def training_spec(self, world: int) -> TrainingSpec:
        """The same run as paraplan describes it: dp = world, one micro-batch per rank and step."""
        return TrainingSpec(
            data_parallel_size=world,
            micro_batch_size=self.batch,
            global_batch_size=self.batch * world,
            seq_length=self.seq,
            precision=self.dtype,
            grad_reduce_in_fp32=self.dtype == "fp32",  # gradients are all-reduced in the training dtype
            overlap_grad_reduce=False,
            attention_backend="flash",
            kernel_fusion=False,  # eager PyTorch: F.rms_norm, silu * up, rotate-half rotary, split gradients
            framework="pytorch-cpu",
        )


@dataclass(frozen=True, slots=True)
class StepTimes:
    """Measured seconds per timed step: wall clock, and the CPU time of the process (all its threads).
    Data-parallel runs: the slowest rank's, step by step."""

    world: int
    steps_s: tuple[float, ...]
    cpu_s: tuple[float, ...] = ()
    losses: tuple[float, ...] = ()
    params: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median_s(self) -> float:
        return statistics.median(self.steps_s)

    @property
    def min_s(self) -> float:
        return min(self.steps_s)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(self.cpu_s)


def _torch() -> Any:
    import torch

    return torch


# ---- the model --------------------------------------------------------------------------------------------
def build_model(config: TinyLlama, run: RunConfig) -> Any:
    """The decoder as a torch.nn.Module in the run's dtype; forward(tokens [b, s], targets [b, s]) -> scalar
    loss: the reference model (`paraplan.measure.reference`, the hybrid projection's layers) as one stage."""
    return build_stage(config.model_spec(), run.training_spec(1), 0, run.dtype, run.seed)


def _batches(config: TinyLlama, run: RunConfig, rank: int, count: int) -> list[tuple[Any, Any]]:
    """Random token sequences (next-token targets), different per rank and step."""
    torch = _torch()
    generator = torch.Generator().manual_seed(run.seed * 1000 + rank)
    out = []
    for _ in range(count):
        seq = torch.randint(0, config.vocab, (run.batch, run.seq + 1), generator=generator)
        out.append((seq[:, :-1].contiguous(), seq[:, 1:].contiguous()))
    return out


class Trainer:
    """One rank's model, optimizer and (for world > 1) contiguous gradient buffer."""

    def __init__(self, config: TinyLlama, run: RunConfig, world: int = 1) -> None:
        torch = _torch()
        self.config, self.run, self.world = config, run, world
        self.model = build_model(config, run)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.grad_buffer = None
        self.all_reduce_s: list[float] = []  # wall time of each step's gradient all-reduce
        if world > 1:  # gradients live in one flat buffer: a single all-reduce per step, no copies
            self.grad_buffer = flat_grad_buffer(self.params, torch_dtype(run.dtype))
        self.optimizer = torch.optim.AdamW(self.params, lr=run.lr, fused=True)

    def step(self, tokens: Any, targets: Any) -> float:
        """One training step; returns the loss (a float: the host waits for nothing on a CPU)."""
        torch = _torch()
        loss = self.model(tokens, targets)
        (loss / self.world if self.world > 1 else loss).backward()
        if self.grad_buffer is not None:
            start = time.perf_counter()
            torch.distributed.all_reduce(self.grad_buffer)
            self.all_reduce_s.append(time.perf_counter() - start)
        self.optimizer.step()
        self._zero_grads()
        return float(loss.detach())

    def _zero_grads(self) -> None:
        if self.grad_buffer is not None:
            self.grad_buffer.zero_()
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def empty_step_s(self, repeats: int = 10) -> float:
        """The "empty step": what a step does besides forward, backward, all-reduce and optimizer (zeroing the
        gradients, reading the loss); the minimum of `repeats` wall times."""
        torch = _torch()
        loss = torch.zeros((), dtype=torch_dtype(self.run.dtype))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            self._zero_grads()
            float((loss / self.world).detach())
            times.append(time.perf_counter() - start)
        return min(times)


def _timed_steps(
    trainer: Trainer, batches: list[tuple[Any, Any]], warmup: int, sync: Callable[[], None] | None
) -> tuple[list[float], list[float], list[float]]:
    """(wall seconds, process CPU seconds, losses) of the steps after `warmup`."""
    times, cpu, losses = [], [], []
    for i, (tokens, targets) in enumerate(batches):
        if sync is not None:
            sync()
        start, start_cpu = time.perf_counter(), time.process_time()
        loss = trainer.step(tokens, targets)
        elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        if i >= warmup:
            times.append(elapsed)
            cpu.append(elapsed_cpu)
            losses.append(loss)
    return times, cpu, losses


def run_single(config: TinyLlama, run: RunConfig) -> StepTimes:
    """Train in this process; returns the timed steps."""
    with torch_threads(run.threads):
        trainer = Trainer(config, run, world=1)
        batches = _batches(config, run, 0, run.warmup + run.steps)
        times, cpu, losses = _timed_steps(trainer, batches, run.warmup, None)
        extra = {"empty_step_s": trainer.empty_step_s()}
    return StepTimes(1, tuple(times), tuple(cpu), tuple(losses), params=parameter_count(trainer.model), extra=extra)


def _dp_worker(rank: int, world: int, config: TinyLlama, run: RunConfig) -> dict[str, Any]:
    """One data-parallel rank (`processes.run_processes`)."""
    torch = _torch()
    dist = torch.distributed
    trainer = Trainer(config, run, world=world)
    batches = _batches(config, run, rank, run.warmup + run.steps)
    times, cpu, losses = _timed_steps(trainer, batches, run.warmup, dist.barrier)
    check = trainer.params[0].detach().float().sum().reshape(1)  # replicas must stay identical
    gathered = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(gathered, check)
    return {
        "times": times,
        "cpu": cpu,
        "losses": losses,
        "params": parameter_count(trainer.model),
        "replica_sums": [float(g) for g in gathered],
        "empty_step_s": trainer.empty_step_s(),
        "all_reduce_s": trainer.all_reduce_s[run.warmup :],
    }


def run_data_parallel(config: TinyLlama, run: RunConfig, world: int = 2) -> StepTimes:
    """Train data-parallel on `world` local processes over gloo; the step time is the slowest rank's."""
    results = run_processes(_dp_worker, world, (config, run), "cpu", run.threads, pin_cores=False)
    steps = tuple(max(r["times"][i] for r in results) for i in range(len(results[0]["times"])))
    cpu = tuple(max(r["cpu"][i] for r in results) for i in range(len(results[0]["cpu"])))
    extra = {
        "per_rank_median_s": [statistics.median(r["times"]) for r in results],
        "replica_sums": results[0]["replica_sums"],
        "empty_step_s": max(r["empty_step_s"] for r in results),
        # the slowest rank's all-reduce: the others' also wait for it to finish its backward
        "all_reduce_s": statistics.median(min(r["all_reduce_s"][i] for r in results) for i in range(len(steps))),
    }
    return StepTimes(world, steps, cpu, tuple(results[0]["losses"]), params=results[0]["params"], extra=extra)


# ---- this CPU as a paraplan system --------------------------------------------------------------------------
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True, slots=True)
class CpuFigures:
    """Quick measurements of this CPU: what its GpuSpec and the framework-overhead calibration need."""

    dtype: str
    threads: int
    matmul_flops: float  # FLOP/s of a 1024^3 matmul in `dtype`: the "peak" of the GpuSpec
    stream_bytes_per_s: float  # an out-of-place add over 8 MiB operands (bytes read and written per second)
    dispatch_s: float  # one trivial op: eager dispatch without work (the host launch of an op)
    backward_dispatch_s: float  # the autograd backward of one trivial op
    memory_gib: float


def _min_time_s(fn: Callable[[], Any], warmup: int = 2, repeats: int = 7) -> float:
    """Minimum wall time of `fn` (other processes on a shared CPU only ever add time)."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure_cpu(dtype: str = "fp32", threads: int = 1, start_together: Callable[[], Any] | None = None) -> CpuFigures:
    """Matmul peak, streaming bandwidth and dispatch costs, with `threads` torch threads. `start_together`
    (a barrier, `measure_cpu_shared`) is called before each timing loop."""
    torch = _torch()
    together = start_together or (lambda: None)
    with torch_threads(threads):
        dt = torch_dtype(dtype)
        n = 1024
        a, b = torch.randn(n, n, dtype=dt), torch.randn(n, n, dtype=dt)
        together()
        matmul_flops = 2.0 * n**3 / _min_time_s(lambda: a @ b, repeats=5)
        elements = 8 * 2**20 // torch.tensor([], dtype=dt).element_size()
        x, y = torch.randn(elements, dtype=dt), torch.randn(elements, dtype=dt)
        together()
        stream = 3 * x.numel() * x.element_size() / _min_time_s(lambda: x + y)
        one = torch.ones(1, dtype=dt)
        dispatch = _min_time_s(lambda: one + one, warmup=20, repeats=200)
        leaf = torch.ones(1, dtype=dt, requires_grad=True)
        out = leaf * 2.0
        grad = torch.ones_like(out)
        backward = _min_time_s(lambda: torch.autograd.grad(out, leaf, grad, retain_graph=True), 20, 200)
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory_gib = 16.0
    return CpuFigures(dtype, threads, matmul_flops, stream, dispatch, backward, memory_gib)


@dataclass(frozen=True, slots=True)
class SharedCpu:
    """What `world` processes training at once on this CPU each get of it, against one process alone.

    Local "devices" on one CPU are not independent as GPUs are: the processes share the caches, the memory
    bandwidth and the power budget (turbo), so each runs its kernels slower when all train. Measured directly:
    the same matmul and streaming add in `world` processes at once (`measure_cpu_shared`). The profile's
    times, fitted on samples taken by one process, scale by these factors for a multi-process run.
    """

    compute_factor: float  # solo matmul rate / shared matmul rate (>= 1 when the processes contend)
    memory_factor: float  # solo streaming bandwidth / shared

    def scaled(self, profile: Any) -> Any:
        """A projection's profile (`cost.profiled.ProfileRef`) whose times carry the shared CPU's slowdown."""
        if profile is None or (self.compute_factor == 1.0 and self.memory_factor == 1.0):
            return profile
        from paraplan.cost.profiled import ScaledTimes

        return ScaledTimes(profile, self.compute_factor, self.memory_factor)


def _shared_worker(rank: int, world: int, dtype: str, threads: int) -> dict[str, Any]:
    """One of the processes of `measure_cpu_shared` (`processes.run_processes`)."""
    return asdict(measure_cpu(dtype, threads, start_together=_torch().distributed.barrier))


def measure_cpu_shared(dtype: str, threads: int, world: int) -> CpuFigures:
    """`measure_cpu` in `world` processes at once, each timing loop started together; the slowest rank's
    rate of each resource (a data-parallel step waits for its slowest rank)."""
    if world == 1:
        return measure_cpu(dtype, threads)
    rows = run_processes(_shared_worker, world, (dtype, threads), "cpu", None, pin_cores=False)
    ranks = [CpuFigures(**row) for row in rows]
    return replace(
        ranks[0],
        matmul_flops=min(f.matmul_flops for f in ranks),
        stream_bytes_per_s=min(f.stream_bytes_per_s for f in ranks),
    )


def shared_cpu(solo: CpuFigures, shared: CpuFigures) -> SharedCpu:
    """The slowdown factors between one process alone and `world` at once (never below 1: sharing a CPU
    cannot make a process faster; a lower reading is noise)."""
    return SharedCpu(
        max(1.0, solo.matmul_flops / shared.matmul_flops),
        max(1.0, solo.stream_bytes_per_s / shared.stream_bytes_per_s),
    )


BANDWIDTH_REGIME_BYTES = 2**20  # all-reduce samples from 1 MiB up fit the link line (see LinkFit)


@dataclass(frozen=True, slots=True)
class LinkFit:
    """A line t = latency + bytes / bandwidth through measured all-reduce times in the bandwidth regime (messages
    of at least `BANDWIDTH_REGIME_BYTES`, where a gradient all-reduce is), fitted by least squares on the
    relative error (one noisy size moves it little; a line through two chosen points follows whatever noise
    those two points carry). Below a few hundred KiB gloo over loopback TCP is bimodal on a small shared
    machine (the same size takes 0.3 or 3 ms run to run), so those sizes say nothing about a 27 MB message."""

    bytes_per_s: float
    latency_s: float
    samples: int
    max_error: float  # the largest relative error of the line over the samples
    largest_bytes: float


def fit_allreduce(samples_root: Path, group: int = 2) -> LinkFit:
    """Fit the line to the `nccl/<CPU>_allreduce_<dtype>_1_<group>.csv` samples that `paraplan measure` wrote."""
    import numpy as np

    from paraplan.measure.samples import SampleError, find_sample_files, read_sample_table

    files = [
        f
        for f in find_sample_files(samples_root)
        if f.category == "nccl" and f.op == "allreduce" and f.nodes == 1 and f.gpus_per_node == group
    ]
    if len(files) != 1:
        raise SampleError(f"expected one all-reduce sample file for 1 x {group} under {samples_root}")
    table = read_sample_table(files[0])
    nbytes = np.asarray(table.column("shape"), dtype=float) * ELEMENT_BYTES[files[0].precision]
    t = np.asarray(table.column("dur(us)"), dtype=float) * 1e-6
    keep = nbytes >= min(BANDWIDTH_REGIME_BYTES, float(np.sort(nbytes)[-2]))  # at least the two largest sizes
    nbytes, t = nbytes[keep], t[keep]
    latency, inverse = _relative_line(nbytes, t)
    error = float(np.max(np.abs((latency + nbytes * inverse) / t - 1.0)))
    return LinkFit(1.0 / inverse, latency, len(t), error, float(nbytes.max()))


def _relative_line(x: Any, t: Any) -> tuple[float, float]:
    """(intercept, slope) >= 0 minimising sum((intercept + slope x) / t - 1)^2: least squares on the relative
    error, so the microsecond latency regime and the millisecond bandwidth regime weigh alike."""
    import numpy as np

    design = np.column_stack([1.0 / t, x / t])
    (intercept, slope), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if intercept < 0.0:  # no latency: the best line through the origin
        intercept, slope = 0.0, float(np.sum(x / t) / np.sum((x / t) ** 2))
    return float(intercept), max(float(slope), 1e-15)


def cpu_system(figures: CpuFigures, link: LinkFit, world: int) -> SystemSpec:
    """This CPU as a one-node system of `world` "GPUs" (one process each, `figures.threads` threads).

    The all-reduce line maps onto the core's ring model inside a scale-up domain with efficiency 1 and no
    half-bandwidth size (`cpu_calibration`): a 2-rank all-reduce of S bytes costs S / bandwidth + 2 latency,
    so the measured line's intercept is split over the two steps. fp32 runs on the `fp16_tflops` field
    (`specs.system.PRECISION_PEAK_KEY`); both 16-bit fields carry the measured matmul rate.
    """
    from paraplan.specs.system import SystemSpec

    gpu = cpu_gpu_spec(
        figures.threads,
        figures.matmul_flops,
        figures.stream_bytes_per_s,
        figures.memory_gib,
        f"measured: {figures.dtype} 1024^3 matmul, 8 MiB add, {figures.threads} thread(s)",
    )
    gbps = link.bytes_per_s / 1e9
    return SystemSpec(
        gpu=gpu,
        num_gpus=world,
        gpus_per_node=2,
        scale_up_gbps=gbps,
        nic_gbps=8 * gbps,
        scale_up_latency_us=link.latency_s / 2 * 1e6,
        nic_latency_us=link.latency_s / 2 * 1e6,
        name="this CPU (local processes over gloo)",
    )


def cpu_calibration(
    figures: CpuFigures, optimizer_s_per_param: float, overhead: FrameworkOverhead, bookkeeping_s: float = 0.0
) -> Calibration:
    """Framework constants measured here instead of the GPU frameworks' fitted ones.

    Efficiencies are 1: the peak and the bandwidth are what this CPU reached, and the fitted profile covers
    most operators anyway. Host launch per op and the kernel floor are one trivial op's dispatch, the
    backward factor that of its autograd backward (on a CPU the host runs the ops, so the launch floor only
    matters where an op would take less than its dispatch). The optimizer's bytes per parameter turn the
    measured seconds per parameter into the core's bandwidth-bound Adam term. The empty step gives the
    per-micro-batch and per-step framework time; `bookkeeping_s` (the trainer's own per-step work, such as
    zeroing a data-parallel gradient buffer) is added to the step's.
    """
    from paraplan.cost.calibration import Calibration

    return Calibration(
        gemm_efficiency=1.0,
        fp8_gemm_efficiency=1.0,
        attention_efficiency=1.0,
        attention_backward_efficiency=1.0,
        memory_efficiency=1.0,
        kernel_launch_s=figures.dispatch_s,
        host_launch_s=figures.dispatch_s,
        host_backward_factor=figures.backward_dispatch_s / figures.dispatch_s,
        scale_up_efficiency=1.0,
        scale_out_efficiency=1.0,
        comm_half_bytes=0.0,
        optimizer_bytes_per_param=optimizer_s_per_param * figures.stream_bytes_per_s,
        step_overhead_s=overhead.step_s + bookkeeping_s,
        microbatch_overhead_s=overhead.microbatch_s,
        source="measured on this CPU (paraplan.measure.e2e)",
    )


@dataclass(frozen=True, slots=True)
class FrameworkOverhead:
    """PyTorch's own time in a step of the reference model, measured on an (almost) empty step: the same
    code, layers and heads at negligible widths (head dim 2, FFN 2, vocabulary 128, one sequence of 2
    tokens), so nearly all of it is Python, module calls, dispatch and the autograd engine: what paraplan's
    per-operator costs do not contain (the size-independent part of the ops it does model is in both)."""

    microbatch_s: float  # forward + backward of one micro-batch
    step_s: float  # optimizer step + zeroing gradients (the per-tensor part; per-parameter work is modelled)


def framework_overhead(config: TinyLlama, run: RunConfig, repeats: int = 10) -> FrameworkOverhead:
    """Minima over `repeats` empty steps (thread CPU time with one thread, else wall time)."""
    empty_model = replace(config, vocab=128, hidden=2 * config.heads, ffn=2)
    empty_run = replace(run, batch=1, seq=2)
    clock = time.thread_time if run.threads == 1 else time.perf_counter
    with torch_threads(run.threads):
        trainer = Trainer(empty_model, empty_run, world=1)
        tokens, targets = _batches(empty_model, empty_run, 0, 1)[0]
        microbatch, step = [], []
        for i in range(repeats + 2):
            start = clock()
            loss = trainer.model(tokens, targets)
            loss.backward()
            middle = clock()
            trainer.optimizer.step()
            trainer._zero_grads()
            float(loss.detach())
            if i >= 2:
                microbatch.append(middle - start)
                step.append(clock() - middle)
    return FrameworkOverhead(min(microbatch), min(step))


def optimizer_s_per_param(dtype: str = "fp32", threads: int = 1, params: int = 2**21) -> float:
    """Seconds per parameter of one fused AdamW step (the training's optimizer) over `params` parameters in 8
    tensors, measured directly (for models outside the profile's optimizer samples: give the model's count,
    so that the states stream from memory as in a step)."""
    torch = _torch()
    with torch_threads(threads):
        tensors = [torch.randn(params // 8, dtype=torch_dtype(dtype), requires_grad=True) for _ in range(8)]
        for p in tensors:
            p.grad = torch.randn_like(p)
        optimizer = torch.optim.AdamW(tensors, lr=1e-4, fused=True)
        return _min_time_s(optimizer.step, repeats=5) / params


def project_cpu(
    config: TinyLlama,
    run: RunConfig,
    world: int,
    system: SystemSpec,
    calibration: Calibration,
    profile: Path,
    shared: SharedCpu | None = None,
) -> Projection:
    """The projection of the reference run: the fitted profile where it covers an op (`--profile PATH`), its
    times scaled by `shared` when several processes share this CPU."""
    from paraplan.cost.profiled import path_ref
    from paraplan.projection import ProjectionOptions, project_specs

    fitted = path_ref(profile)
    options = ProjectionOptions(calibration=calibration, profile=shared.scaled(fitted) if shared else fitted)
    return project_specs(config.model_spec(), system, run.training_spec(world), options)


# ---- diagnostics: where the time goes, projected and measured -----------------------------------------------
@dataclass(frozen=True, slots=True)
class OpTime:
    block: str  # "layer" (times `count`), "embedding", "head"
    name: str
    phase: str
    seconds: float
    source: str  # "profile:<regressor>" or "analytic"
    count: int = 1
    category: str = ""


def _category(kind: str) -> str:
    if kind == "gemm":
        return "gemm"
    if kind == "attention":
        return "attention"
    return "elementwise"


def projected_ops(
    config: TinyLlama, run: RunConfig, system: SystemSpec, calibration: Calibration, profile: Path
) -> list[OpTime]:
    """Every compute op of one step on one rank with its projected time and where it came from."""
    from paraplan.cost.compute import compute_time_s
    from paraplan.cost.profiled import path_ref
    from paraplan.graph import layers as L
    from paraplan.graph.backward import backward_ops
    from paraplan.graph.ops import OpKind

    model = config.model_spec()
    shard = L.Shard.of(run.training_spec(1))
    timer = path_ref(profile)
    blocks = [
        ("embedding", L.embedding_ops(model, shard), 1),
        ("layer", L.decoder_layer_ops(model, shard, moe=False), model.num_layers),
        ("head", L.head_ops(model, shard, L.padded_vocab(model, 1)), 1),
    ]
    rows = []
    for block, ops, count in blocks:
        for forward in ops:
            if forward.kind is OpKind.COMM:
                continue
            for op in [forward, *backward_ops(forward)]:
                timed = timer(op)
                if timed is None:
                    timed = (compute_time_s(op, system.gpu, calibration), "analytic")
                rows.append(OpTime(block, op.name, op.phase.value, *timed, count, _category(op.kind.value)))
    return rows


def projected_categories(projection: Projection, ops: list[OpTime]) -> dict[str, float]:
    """Seconds per category: gemm, attention, elementwise (compute ops), then optimizer, all-reduce, overhead."""
    out: dict[str, float] = {}
    for row in ops:
        out[row.category] = out.get(row.category, 0.0) + row.seconds * row.count
    from paraplan.result import BreakdownPart as Part

    breakdown = projection.breakdown
    out["optimizer"] = breakdown.get(Part.OPTIMIZER, 0.0)
    out["all_reduce"] = breakdown.get(Part.DP_GRAD_REDUCE_EXPOSED, 0.0)
    microbatches = projection.train.num_microbatches * projection.calibration.microbatch_overhead_s
    framework = breakdown.get(Part.FRAMEWORK_OVERHEAD, 0.0) + breakdown.get(Part.HOST_LAUNCH_BOUND, 0.0)
    out["framework"] = framework + microbatches
    return out


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """A single-process step measured op by op: each aten op's CPU time on the training thread (a
    TorchDispatchMode around every op), the minimum over the steps (the microbenchmarks take minima), summed
    per category. `framework` is the rest of a step without the mode: the median CPU time of plain steps
    (run in turn with the timed ones) less the median of the timed steps' op sums: Python, module calls,
    autograd bookkeeping, dispatch above the ops."""

    categories: dict[str, float]
    step_s: float  # median CPU time of the plain steps
    ops: int  # aten ops per step


def _aten_category(name: str) -> str:
    name = name.lower()
    return next((c for c, keys in _TORCH_CATEGORIES if any(k.lower() in name for k in keys)), "elementwise")


def step_breakdown(config: TinyLlama, run: RunConfig, steps: int = 4) -> StepBreakdown:
    """Where one process's step spends its CPU time, per category (gemm, attention, optimizer, elementwise,
    framework): `steps` timed op by op, as many plain."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpTimer(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[tuple[str, float]] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            start = time.thread_time()
            out = func(*args, **(kwargs or {}))
            self.records.append((func.overloadpacket.__name__, time.thread_time() - start))
            return out

    with torch_threads(run.threads):
        trainer = Trainer(config, run, world=1)
        batches = _batches(config, run, 0, run.warmup + 2 * steps)
        for tokens, targets in batches[: run.warmup]:
            trainer.step(tokens, targets)
        recorded, plain = [], []
        for i, (tokens, targets) in enumerate(batches[run.warmup :]):
            start = time.thread_time()
            if i % 2:
                trainer.step(tokens, targets)
                plain.append(time.thread_time() - start)
                continue
            timer = OpTimer()
            with timer:
                trainer.step(tokens, targets)
            recorded.append(timer.records)
    count = min(len(r) for r in recorded)
    categories: dict[str, float] = {}
    for i in range(count):
        category = _aten_category("aten::" + recorded[0][i][0])
        categories[category] = categories.get(category, 0.0) + min(r[i][1] for r in recorded)
    step = statistics.median(plain)
    categories["framework"] = max(0.0, step - statistics.median(sum(t for _, t in r) for r in recorded))
    return StepBreakdown(categories, step, count)


_TORCH_CATEGORIES = (
    ("attention", ("scaled_dot_product", "flash_attention")),
    ("gemm", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")),
    ("optimizer", ("_fused_adamw", "adamw", "lerp", "addcdiv", "addcmul")),
    ("all_reduce", ("all_reduce", "allreduce")),
)


def measured_categories(config: TinyLlama, run: RunConfig, steps: int = 2) -> dict[str, float]:
    """Self CPU seconds per category of one single-process step under the torch profiler (mean of `steps`
    steps after a warm-up): gemm, attention, optimizer, and everything else as elementwise (with the
    framework's own time). The profiler adds some overhead of its own."""
    from torch.profiler import ProfilerActivity, profile

    with torch_threads(run.threads):
        trainer = Trainer(config, run, world=1)
        batches = _batches(config, run, 0, run.warmup + steps)
        for tokens, targets in batches[: run.warmup]:
            trainer.step(tokens, targets)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for tokens, targets in batches[run.warmup :]:
                trainer.step(tokens, targets)
    out: dict[str, float] = {}
    for event in prof.key_averages():
        name = event.key.lower()
        category = next((c for c, keys in _TORCH_CATEGORIES if any(k.lower() in name for k in keys)), "elementwise")
        out[category] = out.get(category, 0.0) + event.self_cpu_time_total * 1e-6 / steps
    return out


def describe(config: TinyLlama, run: RunConfig) -> str:
    return json.dumps({"model": asdict(config), "run": asdict(run)}, sort_keys=True)


if __name__ == "__main__":  # python -m paraplan.measure.e2e: a quick look at the step times
    model_config, run_config = TinyLlama(), RunConfig()
    os.environ.setdefault("OMP_NUM_THREADS", str(run_config.threads))
    for result in (run_single(model_config, run_config), run_data_parallel(model_config, run_config)):
        print(
            f"world {result.world}: median {result.median_s * 1e3:.1f} ms, min {result.min_s * 1e3:.1f} ms "
            f"(CPU time {result.median_cpu_s * 1e3:.1f} ms)"
        )
