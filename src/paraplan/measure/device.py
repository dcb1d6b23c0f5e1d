"""The devices at hand and the PyTorch that drives them: whether torch (and CUDA) is there, the device kind,
name, count, memory, software versions, torch dtypes by name, a scoped thread count, and how busy the machine is.

The one place the torch harnesses (`paraplan.measure.e2e`, `paraplan.measure.hybrid`, `paraplan.measure.bench`)
and the CLI ask about the local machine. Importing this module does not import torch: `torch_available` asks
without importing it, and `detect` imports torch lazily and raises `HybridUnavailable` with a readable reason
when PyTorch or the requested device is missing, so callers can fall back to the operator profiles or the
analytic model.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import os
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paraplan.specs.system import GpuSpec, SystemSpec

DTYPE_NAMES = ("fp32", "bf16", "fp16")
CPU_PREFIX = "cpu"  # a GpuSpec named cpu... describes processes on this CPU (`cpu_gpu_spec`)


def torch_available() -> bool:
    """Whether PyTorch can be imported (the `measure` extra), without importing it."""
    return importlib.util.find_spec("torch") is not None


def cuda_available() -> bool:
    """Whether PyTorch sees a CUDA device (False without PyTorch)."""
    if not torch_available():
        return False
    import torch

    return bool(torch.cuda.is_available())


def torch_dtype(name: str) -> Any:
    """The torch dtype of a precision name: fp32, bf16 or fp16."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to `threads` inside the block and restored after (None: unchanged)."""
    import torch

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@dataclass(frozen=True, slots=True)
class DevicePeaks:
    """Achieved matmul and copy peaks on the device (they describe a CPU "GPU"; measured blocks do not use
    them)."""

    matmul_flops_per_s: float
    copy_bytes_per_s: float


def cpu_gpu_spec(
    threads: int, matmul_flops_per_s: float, copy_bytes_per_s: float, memory_gib: float, source: str
) -> GpuSpec:
    """One process of `threads` threads on this CPU as a "GPU": its measured matmul rate on every 16-bit field
    (fp32 runs on `fp16_tflops`: `specs.system.PRECISION_PEAK_KEY`), its measured streaming bandwidth as HBM,
    one "SM" per thread; named `cpu-<threads>t`."""
    tflops = matmul_flops_per_s / 1e12
    return GpuSpec(
        name=f"{CPU_PREFIX}-{threads}t",
        fp16_tflops=tflops,
        bf16_tflops=tflops,
        fp8_tflops=0.0,
        fp4_tflops=0.0,
        hbm_gib=memory_gib,
        hbm_tbps=copy_bytes_per_s / 1e12,
        sm_count=threads,
        source=source,
    )


def is_local_cpu(system: SystemSpec) -> bool:
    """Whether a target system describes CPU processes (a `gpu` named cpu..., as `cpu_gpu_spec` names them)."""
    return system.gpu.name.lower().startswith(CPU_PREFIX)


class HybridUnavailable(RuntimeError):
    """The hybrid projection cannot run here (no PyTorch, no such device); the message says why."""


@dataclass(frozen=True, slots=True)
class LocalDevices:
    """What the benchmark may use. On CPU a "device" is one single-threaded process on its own core."""

    kind: str  # "cpu" | "cuda"
    name: str  # e.g. "NVIDIA H200", "Intel(R) Xeon(R) Processor"
    count: int
    memory_bytes: float  # per device
    threads: int = 1  # CPU threads per process (torch.set_num_threads)
    software: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Cache key part: the device model and how it is driven."""
        suffix = f"x{self.threads}t" if self.kind == "cpu" else ""
        return f"{self.kind}:{self.name}{suffix}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "count": self.count,
            "memory_gib": self.memory_bytes / 2**30,
            "threads": self.threads,
            "software": dict(self.software),
        }


def cpu_model(default: str = "cpu") -> str:
    """This CPU's model name (Linux /proc/cpuinfo), else the platform's processor or machine, else `default`."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or default


def _available_memory_bytes() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30  # unknown: assume a small laptop


def software_versions() -> dict[str, str]:
    import torch

    versions = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }
    if torch.version.cuda:
        versions["cuda"] = str(torch.version.cuda)
    if torch.cuda.is_available() and torch.backends.cudnn.is_available():
        versions["cudnn"] = str(torch.backends.cudnn.version())
    return versions


def detect(device: str = "cpu", threads: int = 1) -> LocalDevices:
    """The local devices of `device` kind ("cpu" or "cuda")."""
    if device not in ("cpu", "cuda"):
        raise HybridUnavailable(f"unknown device '{device}': choose cpu or cuda")
    if not torch_available():
        raise HybridUnavailable("PyTorch is not installed (pip install 'paraplan[measure]')")
    import torch

    software = software_versions()
    if device == "cuda":
        if not torch.cuda.is_available():
            raise HybridUnavailable("no CUDA device is visible to PyTorch")
        props = torch.cuda.get_device_properties(0)
        return LocalDevices(
            kind="cuda",
            name=props.name,
            count=torch.cuda.device_count(),
            memory_bytes=float(props.total_memory),
            threads=torch.get_num_threads(),
            software=software,
        )
    cores = os.cpu_count() or 1
    count = max(1, cores // max(1, threads))
    return LocalDevices(
        kind="cpu",
        name=cpu_model(),
        count=count,
        memory_bytes=_available_memory_bytes() / count,
        threads=threads,
        software=software,
    )


BUSY_PRESSURE = 30.0  # % of the last 10 s in which some task waited for a CPU (Linux PSI)


def machine_busy(cores_needed: int = 2) -> str | None:
    """Why this machine cannot give the validation its cores to itself (other jobs running), or None.

    The validation compares two timings of a 2-process job; with other work taking the cores in bursts, the
    two see different machines and differ by 10-25% run to run whatever the model. Linux CPU pressure
    (/proc/pressure/cpu) says it directly; without it, the load average against the core count."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        pressure = float(line.split("avg10=")[1].split()[0])
        if pressure > BUSY_PRESSURE:
            return f"CPU pressure {pressure:.0f}% (tasks waiting for a core over the last 10 s)"
        return None
    except (OSError, IndexError, ValueError):
        pass
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if cores < cores_needed or load > cores - cores_needed + 0.5:
        return f"load average {load:.1f} on {cores} cores"
    return None


# ---- how busy the machine was over a measurement --------------------------------------------------------------
PSI_CPU = Path("/proc/pressure/cpu")
BUSY_STALL_SHARE = BUSY_PRESSURE / 100
"""A measurement ran on a busy machine when, over its whole span, some task waited for a CPU this share of the
time (Linux PSI `some`, kernel Documentation/accounting/psi.rst): its wall times then carry other jobs' work."""


def cpu_stall_us(path: Path = PSI_CPU) -> int | None:
    """Microseconds, since boot, in which some task waited for a CPU (PSI `some ... total=`), or None."""
    try:
        first = path.read_text().splitlines()[0]
        return int(first.split("total=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class MachineLoad:
    """How busy the CPUs were over a span: the PSI stall share (None without PSI) and the load average after it."""

    seconds: float
    stall_share: float | None
    load_avg_1m: float
    cores: int

    @property
    def busy(self) -> str | None:
        """Why the span counts as busy, or None: PSI when the kernel has it, else the load average above the
        core count (more runnable tasks than cores, the measurement's own included)."""
        if self.stall_share is not None:
            if self.stall_share > BUSY_STALL_SHARE:
                return (
                    f"tasks waited for a CPU {self.stall_share:.0%} of the {self.seconds:.0f} s measured "
                    f"(/proc/pressure/cpu; over {BUSY_STALL_SHARE:.0%} is busy)"
                )
            return None
        if self.load_avg_1m > self.cores + 0.5:
            return f"load average {self.load_avg_1m:.1f} on {self.cores} cores"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 1),
            "cpu_stall_share": None if self.stall_share is None else round(self.stall_share, 3),
            "load_avg_1m": round(self.load_avg_1m, 2),
            "cores": self.cores,
            "busy": self.busy,
        }


class LoadWatch:
    """Started before a measurement, `reading()` after it: how busy the machine was in between."""

    def __init__(self, psi: Path = PSI_CPU) -> None:
        self.psi = psi
        self.started = time.monotonic()
        self.stall_at_start = cpu_stall_us(psi)

    def reading(self) -> MachineLoad:
        seconds = time.monotonic() - self.started
        stall = cpu_stall_us(self.psi)
        share = None
        if stall is not None and self.stall_at_start is not None and seconds > 0:
            share = min(1.0, (stall - self.stall_at_start) / 1e6 / seconds)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        return MachineLoad(seconds, share, load, os.cpu_count() or 1)


def wait_until_quiet(
    max_wait_s: float = 120.0, cores_needed: int = 2, first_wait_s: float = 5.0, sleep=time.sleep
) -> str | None:
    """Wait, polling `machine_busy` with doubling pauses (5 s, 10 s, 20 s, ...), until the machine is quiet or
    `max_wait_s` have passed; None when it is quiet, else why it is still busy. A timing check that failed on a
    busy machine measures again after this rather than giving up."""
    waited, pause = 0.0, first_wait_s
    while True:
        busy = machine_busy(cores_needed)
        if busy is None or waited >= max_wait_s:
            return busy
        pause = min(pause, max_wait_s - waited)
        sleep(pause)
        waited += pause
        pause *= 2
