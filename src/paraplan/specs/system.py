"""The cluster: GPU, scale-up domain (NVLink/xGMI) and scale-out network."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from types import MappingProxyType

from paraplan.errors import ConfigError, bound_problems, reject_unknown_names
from paraplan.specs.fieldtypes import coerce_fields

# Precision names (as in the measured data) -> the tensor-core peak they run on.
PRECISION_PEAK_KEY: Mapping[str, str] = MappingProxyType(
    {
        "fp32": "fp16",  # TF32/FP32 runs are not modelled separately; treated as 16-bit math
        "fp16": "fp16",
        "bf16": "bf16",
        "fp8": "fp8",  # FP8 with delayed scaling (Transformer Engine)
        "fp8_cs": "fp8",  # FP8 with current (per-tensor) scaling
        "fp8_blockwise": "fp8",  # DeepSeek-V3 style 128x128 / 1x128 block scaling
        "mxfp8": "fp8",  # OCP MX FP8 (Blackwell)
        "nvfp4": "fp4",  # NVFP4 (Blackwell)
    }
)
_PEAK_FIELD = {precision: f"{key}_tflops" for precision, key in PRECISION_PEAK_KEY.items()}  # `GpuSpec.peak_flops`


INF = float("inf")
TINY = 1e-9
"""Bandwidths, capacities and the FP16 peak (every precision's fallback) must exceed this: each divides
somewhere, and 0 or less is a typo."""
MAX_GPUS = 2**24
"""Most GPUs accepted (16.7 M, far above any cluster): group sizes and rank orders are built per GPU."""


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator. Peaks are dense tensor-core TFLOP/s per math type (0: not supported)."""

    name: str
    fp16_tflops: float
    bf16_tflops: float
    fp8_tflops: float
    fp4_tflops: float
    hbm_gib: float
    hbm_tbps: float
    sm_count: int
    source: str = ""
    exp_tera_per_s: float = 0.0
    """Exponentials per second of the special-function units, 1e12 (attention's softmax; 0: not modelled)."""
    host_link_gbps: float = 64.0
    """GPU <-> host memory link, GB/s per direction (CPU offload): PCIe Gen5 x16 = 64 (PCI-SIG), Gen4 x16 = 32;
    NVLink-C2C on GH200 = 450 (900 GB/s total, NVIDIA GH200 datasheet)."""
    host_memory_gbps: float = 77.0
    """Host DRAM bandwidth one GPU's process gets, GB/s (the CPU optimizer step): the node's peak over its GPUs;
    default DGX H100, two Xeon 8480C x 8 DDR5-4800 channels = 614 GB/s over 8 GPUs."""

    def __post_init__(self) -> None:
        problems = bound_problems(
            [
                ("fp16_tflops", self.fp16_tflops, TINY, INF),
                ("bf16_tflops", self.bf16_tflops, 0, INF),
                ("fp8_tflops", self.fp8_tflops, 0, INF),
                ("fp4_tflops", self.fp4_tflops, 0, INF),
                ("hbm_gib", self.hbm_gib, TINY, INF),
                ("hbm_tbps", self.hbm_tbps, TINY, INF),
                ("sm_count", self.sm_count, 1, INF),
                ("exp_tera_per_s", self.exp_tera_per_s, 0, INF),
                ("host_link_gbps", self.host_link_gbps, TINY, INF),
                ("host_memory_gbps", self.host_memory_gbps, TINY, INF),
            ],
            f"GPU {self.name}:",
        )
        if problems:
            raise ConfigError(problems)

    @property
    def peak_tflops(self) -> dict[str, float]:
        return {"fp16": self.fp16_tflops, "bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "fp4": self.fp4_tflops}

    def peak_flops(self, precision: str) -> float:
        name = _PEAK_FIELD.get(precision)
        tflops = getattr(self, name if name is not None else f"{precision}_tflops", 0.0) or self.fp16_tflops
        return tflops * 1e12

    def supports(self, precision: str) -> bool:
        key = PRECISION_PEAK_KEY.get(precision)
        return key is not None and getattr(self, f"{key}_tflops", 0.0) > 0

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gib * 2**30

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12

    @property
    def host_link_bytes_per_s(self) -> float:
        return self.host_link_gbps * 1e9

    @property
    def host_memory_bytes_per_s(self) -> float:
        return self.host_memory_gbps * 1e9


@dataclass(frozen=True, slots=True)
class SystemSpec:
    """A homogeneous cluster of `num_gpus` GPUs, `gpus_per_node` of them per scale-up domain."""

    gpu: GpuSpec
    num_gpus: int
    gpus_per_node: int
    scale_up_gbps: float
    """Scale-up (NVLink/xGMI) bandwidth per GPU per direction, GB/s."""
    nic_gbps: float
    """Scale-out bandwidth per GPU, Gb/s."""
    scale_up_latency_us: float = 3.0
    nic_latency_us: float = 8.0
    name: str = ""

    def __post_init__(self) -> None:
        problems = bound_problems(
            [
                ("num_gpus", self.num_gpus, 0, MAX_GPUS),
                ("gpus_per_node", self.gpus_per_node, 1, MAX_GPUS),
                ("scale_up_gbps", self.scale_up_gbps, TINY, INF),
                ("nic_gbps", self.nic_gbps, TINY, INF),
                ("scale_up_latency_us", self.scale_up_latency_us, 0, INF),
                ("nic_latency_us", self.nic_latency_us, 0, INF),
            ],
            "system",
        )
        if problems:
            raise ConfigError(problems)

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)

    @property
    def scale_up_bytes_per_s(self) -> float:
        return self.scale_up_gbps * 1e9

    @property
    def nic_bytes_per_s(self) -> float:
        return self.nic_gbps * 1e9 / 8

    def with_overrides(self, **values: object) -> SystemSpec:
        """Replace SystemSpec and GpuSpec fields by name; None values are ignored; an unknown name is a
        ConfigError."""
        reject_unknown_names(values, SYSTEM_FIELD_NAMES | GPU_FIELD_NAMES, "system field")
        own, problems = coerce_fields(
            SystemSpec, {k: v for k, v in values.items() if k in SYSTEM_FIELD_NAMES and v is not None}, "system field"
        )
        gpu_values, gpu_problems = coerce_fields(
            GpuSpec, {k: v for k, v in values.items() if k in GPU_FIELD_NAMES and v is not None}, "gpu field"
        )
        if problems or gpu_problems:
            raise ConfigError(problems + gpu_problems)
        gpu = replace(self.gpu, **gpu_values) if gpu_values else self.gpu
        return replace(self, **{"gpu": gpu, **own})


GPU_FIELD_NAMES: frozenset[str] = frozenset(f.name for f in fields(GpuSpec))
SYSTEM_FIELD_NAMES: frozenset[str] = frozenset(f.name for f in fields(SystemSpec))
