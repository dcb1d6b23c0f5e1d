"""The devices at hand: kind, name, count, memory, software versions.

`detect` imports torch lazily and raises `HybridUnavailable` with a readable reason when PyTorch or the
requested device is missing, so callers can fall back to the operator profiles or the analytic model.
"""

from __future__ import annotations

import datetime
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paraplan.hybrid as hybrid_package


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


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


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
    if not hybrid_package.torch_available():
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
        name=cpu_model_name(),
        count=count,
        memory_bytes=_available_memory_bytes() / count,
        threads=threads,
        software=software,
    )
