"""Torch microbenchmarks that write samples in the kernel-samples layout (`paraplan measure`).

Operators (one file each under <out>/operator/, columns as in arXiv 2509.22832's release, plus `gemm`):
GEMMs over log-uniformly sampled (m, n, k) with forward Y = X W and backward dX = dY W^T plus
dW = X^T dY timed together; causal SDPA attention; LayerNorm and RMSNorm; GELU; SwiGLU (eager silu(gate) * up);
residual add; RoPE
(Megatron's rotate-half form); cross-entropy in fp32 over a vocabulary; embedding lookup; one fused
AdamW step over fp32 parameters (Megatron's fp32 master weights; torch's fused kernel on CPUs too).
Collectives (<out>/nccl/, `shape` = elements per rank for all-gather, of the buffer otherwise): all-reduce,
all-gather and a send/recv ping-pong among local processes, over gloo on CPU (2 processes) or NCCL on CUDA
(all local GPUs, if there are at least 2).

Times follow warm-up calls: medians of CUDA-event times on a GPU, of wall times on a CPU (of the thread's CPU
times for operators measured with one thread), operators with the cache flushed before each call (`time_us`).
torch is imported lazily: importing this module does not need it.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paraplan.measure.device import DTYPE_NAMES, LoadWatch, MachineLoad, cpu_model, torch_dtype
from paraplan.measure.processes import ping_pong, run_processes
from paraplan.measure.samples import sample_file_name, write_sample_table

FWD_BWD_COLUMNS = ("F_dur(us)", "B_dur(us)")
DTYPES = DTYPE_NAMES
VOCAB_QUICK, VOCAB_FULL = 4096, 32000  # cross-entropy and embedding vocabulary (already a multiple of 128)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    device: str  # "cpu" | "cuda"
    quick: bool = False
    dtype: str = "fp32"
    seed: int = 0
    threads: int | None = None  # CPU intra-op threads (torch.set_num_threads); None = torch's default

    @property
    def warmup(self) -> int:
        return 1 if self.quick else 3

    @property
    def repeats(self) -> int:
        """Timed calls per shape: 10, or 5 for a quick run. On a CPU each timed call first rewrites a buffer twice
        the last-level cache (`time_us`; 5.8 ms of CPU for 64 MiB on the 2-core test machine), which was about a
        third of a quick run's CPU time at 10 calls; a busy machine is reported (`MachineLoad`) rather than
        outvoted with more calls."""
        return 5 if self.quick else 10

    @property
    def on_gpu(self) -> bool:
        return self.device == "cuda"


@dataclass(frozen=True, slots=True)
class BenchTask:
    """One output file: `run()` returns its rows."""

    op: str
    category: str  # "operator" | "nccl"
    columns: tuple[str, ...]
    run: Callable[[], list[tuple[float, ...]]]
    nodes: int | None = None
    gpus_per_node: int | None = None


def _torch() -> Any:
    import torch

    return torch


def device_name(config: BenchConfig) -> str:
    """A GPU/CPU name usable in sample file names (no underscores or spaces), e.g. NVIDIAH200."""
    if config.on_gpu:
        raw = _torch().cuda.get_device_name(0)
    else:
        raw = "CPU-" + cpu_model("unknown")
    return re.sub(r"[^A-Za-z0-9.\-]", "", raw) or "device"


def _torch_dtype(config: BenchConfig) -> Any:
    return torch_dtype(config.dtype)


# ---- timing --------------------------------------------------------------------------------------------
FLUSH_DEFAULT_BYTES = 64 * 2**20  # when the cache size cannot be read
GPU_FLUSH_BYTES = 256 * 2**20  # as triton.testing.do_bench: well above any GPU's L2


def _cpu_cache_bytes() -> int:
    """The largest CPU cache (the last level) from Linux sysfs, or FLUSH_DEFAULT_BYTES / 2."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else FLUSH_DEFAULT_BYTES // 2


@functools.cache
def _flush_buffer(device: str) -> Any:
    """A buffer twice the last-level cache (256 MiB on a GPU) whose rewrite evicts what a kernel left there."""
    torch = _torch()
    nbytes = GPU_FLUSH_BYTES if device.startswith("cuda") else 2 * _cpu_cache_bytes()
    return torch.empty(nbytes // 4, dtype=torch.float32, device=device)


def time_us(fn: Callable[[], Any], config: BenchConfig, wall: bool = False) -> float:
    """Median time of `fn` in microseconds over `config.repeats` calls: CUDA-event times on a GPU; on a CPU
    the wall times, or with one CPU thread (`threads=1`) the calling thread's CPU times unless `wall` (the op
    runs on that thread alone, and time it spent preempted by other processes does not count). The median,
    not the minimum that `timeit` advises for comparing code: a profile predicts a typical training step,
    which is the median of its steps, made of typical kernel times, not of each kernel's luckiest run. A
    collective (`wall`) waits for its slowest peer in a real step as well.

    Operators run with a cold cache: before each timed call a buffer twice the last-level cache is rewritten,
    as `triton.testing.do_bench` flushes a GPU's L2. A training step streams far more than the cache holds
    (weights, saved activations, gradients), so an op meets its operands in memory, not in the cache that a
    loop over the same tensors would keep warm."""
    torch = _torch()
    for _ in range(config.warmup):
        fn()
    samples: list[float] = []
    flush = None if wall else _flush_buffer("cuda" if config.on_gpu else "cpu")
    if config.on_gpu:
        torch.cuda.synchronize()
        for _ in range(config.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if flush is not None:
                flush.zero_()  # queued before the start event: not timed
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)
    else:
        clock = time.perf_counter if wall or config.threads != 1 else time.thread_time
        for _ in range(config.repeats):
            if flush is not None:
                flush.zero_()
            t0 = clock()
            fn()
            samples.append((clock() - t0) * 1e6)
    return statistics.median(samples)


def _forward_backward_us(forward: Callable[[], Any], inputs: list[Any], config: BenchConfig) -> tuple[float, float]:
    """(forward, backward) microseconds of an autograd op; backward w.r.t. `inputs`."""
    torch = _torch()
    out = forward()
    grad = torch.randn_like(out)
    t_forward = time_us(forward, config)
    t_backward = time_us(lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True), config)
    return t_forward, t_backward


# ---- shapes -------------------------------------------------------------------------------------------
def _log_uniform(rng: random.Random, low: int, high: int, multiple: int) -> int:
    value = math.exp(rng.uniform(math.log(low), math.log(high)))
    return max(multiple, int(round(value / multiple)) * multiple)


def _sizes(config: BenchConfig) -> dict[str, Any]:
    """Shape ranges: small enough for a laptop CPU in quick mode, transformer-sized on a GPU."""
    if config.on_gpu:
        return {
            "gemm": (256, 16384, 24 if config.quick else 120),
            "tokens": (1024, 2048, 4096, 8192),
            "dims": (1024, 2048, 4096, 8192),
            "heads": (8, 16, 32, 64),
            "head_dims": (64, 128),
            "seqs": (512, 1024, 2048, 4096),
            "opt_dims": (1024, 2048, 4096),
            "opt_layers": (1, 2, 4),
            "message_bytes": [2**p for p in range(16, 29, 2 if config.quick else 1)],
        }
    if config.quick:  # a laptop CPU (2 cores) in a few seconds per file; covers `paraplan.measure.e2e`'s model
        return {
            "gemm": (32, 2048, 24),
            "tokens": (64, 128, 256),
            "dims": (64, 128, 256, 512),
            "attention_batches": (1, 2, 4),
            "heads": (2, 4, 8),
            "head_dims": (16, 32, 64),
            "seqs": (64, 128, 256),
            "opt_dims": (64, 128, 256, 512),
            "opt_layers": (1, 2),
            "message_bytes": [2**p for p in range(13, 26, 2)],  # 8 KiB to 32 MiB
        }
    return {
        "gemm": (64, 2048, 60),
        "tokens": (128, 256, 512, 1024, 2048),
        "dims": (128, 256, 512, 1024, 2048),
        "heads": (2, 4, 8, 16),
        "head_dims": (32, 64),
        "seqs": (128, 256, 512, 1024),
        "opt_dims": (128, 256, 512, 1024),
        "opt_layers": (1, 2, 4),
        "message_bytes": [2**p for p in range(14, 25)],
    }


def _subset(items: list[Any], keep: int, seed: int) -> list[Any]:
    if len(items) <= keep:
        return items
    return random.Random(seed).sample(items, keep)


def _spread(items: list[tuple[int, ...]], keep: int) -> list[tuple[int, ...]]:
    """`keep` shapes evenly spaced in size (product of the dims), the smallest and the largest included: a few
    samples that still span the whole range (quick mode; a random subset may miss the large end)."""
    if len(items) <= keep:
        return items
    ordered = sorted(items, key=lambda shape: (math.prod(shape), shape))
    return [ordered[round(i * (len(ordered) - 1) / (keep - 1))] for i in range(keep)]


# ---- operator benchmarks ----------------------------------------------------------------------------------
def _gemm_rows(config: BenchConfig) -> list[tuple[float, ...]]:
    torch = _torch()
    low, high, count = _sizes(config)["gemm"]
    rng = random.Random(config.seed)
    dtype, device = _torch_dtype(config), config.device
    rows = []
    for _ in range(count):
        m, n, k = (_log_uniform(rng, low, high, 16) for _ in range(3))
        x = torch.randn(m, k, dtype=dtype, device=device)
        w = torch.randn(k, n, dtype=dtype, device=device)
        dy = torch.randn(m, n, dtype=dtype, device=device)
        t_forward = time_us(lambda x=x, w=w: x @ w, config)
        t_backward = time_us(lambda x=x, w=w, dy=dy: (dy @ w.T, x.T @ dy), config)
        rows.append((m, n, k, t_forward, t_backward))
    return rows


def _token_shapes(config: BenchConfig, keep: int) -> Iterator[tuple[int, int, int]]:
    """(b, l, dim) combinations, a fixed subset."""
    sizes = _sizes(config)
    shapes = [(b, seq, d) for b in (1, 2) for seq in sizes["tokens"] for d in sizes["dims"]]
    yield from _spread(shapes, keep) if config.quick else _subset(shapes, keep, config.seed)


def _per_token_rows(config: BenchConfig, op: str) -> list[tuple[float, ...]]:
    torch = _torch()
    F = torch.nn.functional
    dtype, device = _torch_dtype(config), config.device
    keep = 10 if config.quick else 40
    rows = []
    for b, seq, dim in _token_shapes(config, keep):
        tokens = b * seq
        if op == "gelu":  # on the MLP's 4h intermediate (mp = 1)
            x = torch.randn(tokens, 4 * dim, dtype=dtype, device=device, requires_grad=True)
            times = _forward_backward_us(lambda x=x: F.gelu(x), [x], config)
            rows.append((1, b, seq, dim, *times))
            continue
        if op == "swiglu":  # eager silu(gate) * up on the 4h intermediate (mp = 1)
            gate, up = (torch.randn(tokens, 4 * dim, dtype=dtype, device=device, requires_grad=True) for _ in "gu")
            times = _forward_backward_us(lambda g=gate, u=up: F.silu(g) * u, [gate, up], config)
            rows.append((1, b, seq, dim, *times))
            continue
        x = torch.randn(tokens, dim, dtype=dtype, device=device, requires_grad=True)
        if op == "layernorm":
            w = torch.ones(dim, dtype=dtype, device=device, requires_grad=True)
            bias = torch.zeros(dim, dtype=dtype, device=device, requires_grad=True)
            times = _forward_backward_us(
                lambda x=x, w=w, bias=bias, dim=dim: F.layer_norm(x, (dim,), w, bias), [x, w, bias], config
            )
        elif op == "RMSlayernorm":
            w = torch.ones(dim, dtype=dtype, device=device, requires_grad=True)
            times = _forward_backward_us(lambda x=x, w=w, dim=dim: F.rms_norm(x, (dim,), w), [x, w], config)
        elif op == "res_add":
            y = torch.randn_like(x, requires_grad=True)
            times = _forward_backward_us(lambda x=x, y=y: x + y, [x, y], config)
        else:
            raise ValueError(op)
        rows.append((b, seq, dim, *times))
    return rows


def _rotary(x: Any, cos: Any, sin: Any) -> Any:
    """Megatron's apply_rotary_pos_emb (rotate-half form) on x [l, b, heads, head_dim]."""
    torch = _torch()
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _attention_like_rows(config: BenchConfig, op: str) -> list[tuple[float, ...]]:
    torch = _torch()
    F = torch.nn.functional
    sizes = _sizes(config)
    dtype, device = _torch_dtype(config), config.device
    shapes = [
        (b, h, seq, d)
        for b in sizes.get("attention_batches", (1, 2))
        for h in sizes["heads"]
        for seq in sizes["seqs"]
        for d in sizes["head_dims"]
    ]
    chosen = _spread(shapes, 12) if config.quick else _subset(shapes, 40, config.seed)
    rows = []
    for b, heads, seq, head_dim in chosen:
        dim = heads * head_dim
        if op == "flash_atten":
            q, k, v = (
                torch.randn(b, heads, seq, head_dim, dtype=dtype, device=device, requires_grad=True) for _ in range(3)
            )
            times = _forward_backward_us(
                lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [q, k, v], config
            )
            rows.append((1, b, heads, seq, dim, 1, *times))  # causal = 1
        elif op == "RoPE":
            x = torch.randn(seq, b, heads, head_dim, dtype=dtype, device=device, requires_grad=True)
            angle = torch.randn(seq, 1, 1, head_dim, dtype=dtype, device=device)
            cos, sin = angle.cos(), angle.sin()
            times = _forward_backward_us(lambda x=x, cos=cos, sin=sin: _rotary(x, cos, sin), [x], config)
            rows.append((1, b, heads, seq, dim, *times))
        elif op == "softmax":
            x = torch.randn(b, heads, seq, seq, dtype=dtype, device=device, requires_grad=True)
            times = _forward_backward_us(lambda x=x: F.softmax(x, dim=-1), [x], config)
            rows.append((1, b, heads, seq, *times))
        else:
            raise ValueError(op)
    return rows


def _vocab_rows(config: BenchConfig, op: str) -> list[tuple[float, ...]]:
    torch = _torch()
    F = torch.nn.functional
    dtype, device = _torch_dtype(config), config.device
    vocab = VOCAB_QUICK if config.quick else VOCAB_FULL
    rows = []
    for b, seq, dim in _token_shapes(config, 10 if config.quick else 30):
        tokens = b * seq
        target = torch.randint(0, vocab, (tokens,), device=device)
        if op == "cross_entropy":  # fp32 loss over 16-bit logits, as Megatron's vocab-parallel loss
            logits = torch.randn(tokens, vocab, dtype=dtype, device=device, requires_grad=True)
            times = _forward_backward_us(lambda lg=logits, t=target: F.cross_entropy(lg.float(), t), [logits], config)
            rows.append((1, b, seq, vocab, *times))
        elif op == "embedding":
            table = torch.randn(vocab, dim, dtype=dtype, device=device, requires_grad=True)
            times = _forward_backward_us(lambda t=target, w=table: F.embedding(t, w), [table], config)
            rows.append((1, b, seq, dim, vocab, *times))
        else:
            raise ValueError(op)
    return rows


def _optimizer_rows(config: BenchConfig) -> list[tuple[float, ...]]:
    """One AdamW step over `encoders` transformer layers of width `dim` (weights 12 dim^2, norms, biases)."""
    torch = _torch()
    sizes = _sizes(config)
    rows = []
    for dim in sizes["opt_dims"]:
        for layers in sizes["opt_layers"]:
            shapes = [(dim, 3 * dim), (3 * dim,), (dim, dim), (dim,), (dim, 4 * dim), (4 * dim,), (4 * dim, dim)]
            shapes += [(dim,)] * 5  # second linear bias, two LayerNorms (weight, bias)
            params = [torch.randn(*s, device=config.device, requires_grad=True) for _ in range(layers) for s in shapes]
            for p in params:
                p.grad = torch.randn_like(p)
            optimizer = torch.optim.AdamW(params, lr=1e-4, fused=True)  # fused kernels on CPUs too (torch >= 2.4)
            t_step = time_us(optimizer.step, config)
            n_params = sum(p.numel() for p in params)
            rows.append((1, dim, layers, n_params, t_step))
    return rows


# ---- collectives -----------------------------------------------------------------------------------------
def _collective_worker(rank: int, world: int, config: BenchConfig) -> dict[str, list[tuple[float, float]]] | None:
    """One process of the collective benchmark (`processes.run_processes`); rank 0 returns the rows."""
    torch = _torch()
    dist = torch.distributed
    dtype = _torch_dtype(config)
    element_bytes = torch.tensor([], dtype=dtype).element_size()
    results: dict[str, list[tuple[float, float]]] = {"allreduce": [], "allgather": [], "p2p": []}
    device = f"cuda:{rank}" if config.on_gpu else "cpu"

    def timed(fn: Callable[[], Any]) -> float:  # wall time: a collective waits for its peers
        dist.barrier()
        return time_us(fn, config, wall=True)

    for message_bytes in _sizes(config)["message_bytes"]:
        elements = max(1, message_bytes // element_bytes)
        buffer = torch.ones(elements, dtype=dtype, device=device)
        results["allreduce"].append((elements, timed(lambda b=buffer: dist.all_reduce(b))))
        gathered = [torch.empty_like(buffer) for _ in range(world)]
        results["allgather"].append((elements, timed(lambda b=buffer, g=gathered: dist.all_gather(g, b))))
        # rank 0 <-> rank 1; one way = half the round trip
        results["p2p"].append((elements, timed(lambda b=buffer: ping_pong(b, rank)) / 2))
    return results if rank == 0 else None


def collective_world_size(config: BenchConfig) -> int:
    return _torch().cuda.device_count() if config.on_gpu else 2


def _collective_rows(config: BenchConfig) -> dict[str, list[tuple[float, ...]]]:
    world = collective_world_size(config)
    if world < 2:
        return {}
    results = run_processes(_collective_worker, world, (config,), config.device, config.threads, pin_cores=False)[0]
    # send/recv runs between two GPUs of the node: the kernel-samples' p2p_fp16_1_2 topology
    return {
        op: [(elements, 1, 2 if op == "p2p" else world, t_us) for elements, t_us in rows]
        for op, rows in results.items()
    }


# ---- the plan ------------------------------------------------------------------------------------------
def plan_benchmarks(config: BenchConfig) -> list[BenchTask]:
    """The operator benchmarks, one task per output file (collectives are `collective_task`)."""
    per_token = ("b", "l", "dim", *FWD_BWD_COLUMNS)
    attention = ("mp", "b", "h", "l", "dim", *FWD_BWD_COLUMNS)
    flash = ("mp", "b", "h", "l", "dim", "causal", *FWD_BWD_COLUMNS)
    return [
        BenchTask("gemm", "operator", ("m", "n", "k", *FWD_BWD_COLUMNS), lambda: _gemm_rows(config)),
        BenchTask("flash_atten", "operator", flash, lambda: _attention_like_rows(config, "flash_atten")),
        BenchTask("layernorm", "operator", per_token, lambda: _per_token_rows(config, "layernorm")),
        BenchTask("RMSlayernorm", "operator", per_token, lambda: _per_token_rows(config, "RMSlayernorm")),
        BenchTask("gelu", "operator", ("mp", *per_token), lambda: _per_token_rows(config, "gelu")),
        BenchTask("swiglu", "operator", ("mp", *per_token), lambda: _per_token_rows(config, "swiglu")),
        BenchTask("res_add", "operator", per_token, lambda: _per_token_rows(config, "res_add")),
        BenchTask("RoPE", "operator", attention, lambda: _attention_like_rows(config, "RoPE")),
        BenchTask(
            "softmax",
            "operator",
            ("mp", "b", "h", "l", *FWD_BWD_COLUMNS),
            lambda: _attention_like_rows(config, "softmax"),
        ),
        BenchTask(
            "cross_entropy",
            "operator",
            ("mp", "b", "l", "vocab", *FWD_BWD_COLUMNS),
            lambda: _vocab_rows(config, "cross_entropy"),
        ),
        BenchTask(
            "embedding",
            "operator",
            ("mp", "b", "l", "dim", "vocab", *FWD_BWD_COLUMNS),
            lambda: _vocab_rows(config, "embedding"),
        ),
        BenchTask(
            "middleStage_optimizer",
            "operator",
            ("mp", "dim", "encoders", "params", "dur(us)"),
            lambda: _optimizer_rows(config),
        ),
    ]


COLLECTIVE_COLUMNS = ("shape", "nodes", "GPUsPerNode", "dur(us)")


def collective_ops() -> tuple[str, ...]:
    return ("allreduce", "allgather", "p2p")


def write_task(
    out: Path,
    gpu: str,
    config: BenchConfig,
    op: str,
    category: str,
    columns: tuple[str, ...],
    rows: list,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
) -> Path:
    path = out / category / sample_file_name(gpu, op, config.dtype, nodes, gpus_per_node)
    write_sample_table(path, columns, rows)
    return path


def run_collectives(config: BenchConfig, out: Path, gpu: str) -> list[Path]:
    """Spawn the local processes, time the collectives and write one file per collective."""
    paths = []
    for op, rows in _collective_rows(config).items():
        paths.append(write_task(out, gpu, config, op, "nccl", COLLECTIVE_COLUMNS, rows, 1, int(rows[0][2])))
    return paths


def run_benchmarks(
    config: BenchConfig,
    out: Path,
    on_start: Callable[[str], None] | None = None,
    on_done: Callable[[str, Path | None], None] | None = None,
) -> list[Path]:
    """Run every benchmark and write its file under `out`; callbacks report progress per file."""
    torch = _torch()
    torch.manual_seed(config.seed)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    gpu = device_name(config)
    paths: list[Path] = []
    watch = LoadWatch()  # over the operators: the collectives' processes load the CPUs themselves
    for task in plan_benchmarks(config):
        if on_start:
            on_start(task.op)
        path = write_task(out, gpu, config, task.op, task.category, task.columns, task.run())
        paths.append(path)
        if on_done:
            on_done(task.op, path)
    load = watch.reading()
    if on_start:
        on_start("collectives")
    collective_paths = run_collectives(config, out, gpu)
    paths += collective_paths
    paths.append(_write_metadata(out, gpu, config, load))
    if on_done:
        on_done("collectives", collective_paths[0] if collective_paths else None)
    return paths


def _write_metadata(out: Path, gpu: str, config: BenchConfig, load: MachineLoad | None = None) -> Path:
    """`measure.json`: how the samples were taken (the fit ignores it; people read it)."""
    torch = _torch()
    path = out / "measure.json"
    metadata = {
        "device": gpu,
        "torch": torch.__version__,
        "dtype": config.dtype,
        "quick": config.quick,
        "threads": torch.get_num_threads() if not config.on_gpu else None,
        "timing": ("median of CUDA events" if config.on_gpu else "median of wall times")
        + (" (operators: of thread CPU times)" if config.threads == 1 and not config.on_gpu else "")
        + "; operators with the last-level cache flushed before each call",
        "warmup": config.warmup,
        "repeats": config.repeats,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if load is not None and not config.on_gpu:  # a GPU's kernels do not share the host's cores
        metadata["machine_load"] = load.to_dict()
    path.write_text(json.dumps(metadata, indent=1) + "\n")
    return path
