"""The few named constants of the analytic cost model, per GPU and per framework, with their provenance.

Defaults come from public microbenchmarks (cuBLAS / FlashAttention / NCCL-tests figures quoted in the
comments). `paraplan calibrate` refits them on measured runs with leave-one-source-out cross-validation
and writes `calibration.yaml`, which, when present in the package, overrides these defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache, lru_cache
from importlib import resources
from statistics import NormalDist
from typing import Any

import yaml

from paraplan.errors import reject_unknown_names
from paraplan.specs.presets import gpu_names


@dataclass(frozen=True, slots=True)
class Calibration:
    gemm_efficiency: float = 0.80
    """Large-GEMM fraction of the 16-bit tensor-core peak (cuBLAS: ~270/312 TF on A100, ~750/989 on H100)."""
    fp8_gemm_efficiency: float = 0.65
    """Large-GEMM fraction of the FP8 peak, scaling and casts included (Transformer Engine on H100:
    FP8 end to end is 1.3-1.5x BF16, not 2x)."""
    attention_efficiency: float = 0.60
    """Flash-attention forward fraction of the 16-bit peak at head dim 128 (FA2 on A100: ~190/312 TF;
    FA3 on H100: ~600/989)."""
    attention_backward_efficiency: float = 0.50
    memory_efficiency: float = 0.80
    """Achievable fraction of HBM bandwidth for streaming kernels (STREAM-like: 80-90%)."""
    kernel_launch_s: float = 3e-6
    """Per-kernel GPU-side floor: launch latency and tail (NVIDIA Nsight traces: 2-5 us)."""
    host_launch_s: float = 15e-6
    """Host time to issue one forward op in PyTorch eager (framework Python + dispatcher + launch;
    10-30 us in PyTorch profiler traces of Megatron). Phases with small kernels become host-bound."""
    host_backward_factor: float = 1.5
    """Backward ops cost more host time (autograd engine bookkeeping)."""
    alibi_attention_factor: float = 0.55
    """Attention with an ALiBi bias runs the Triton flash-attention kernel, which FlashAttention-2 beats
    by 1.3-2.5x (Dao 2023, figure 4): relative speed ~0.55."""
    scale_up_efficiency: float = 0.75
    """Bus-bandwidth fraction NCCL reaches on NVLink for large messages (NCCL-tests all-reduce on DGX
    A100: ~230 of 300 GB/s)."""
    scale_out_efficiency: float = 0.80
    """Bus-bandwidth fraction NCCL reaches on InfiniBand/RoCE for large messages."""
    comm_half_bytes: float = 4e6
    """Message size at which a collective reaches half its large-message bandwidth (NCCL-tests curves)."""
    overlap_interference: float = 0.15
    """Compute time added per second of communication hidden under it: NCCL's kernels take SMs (one CTA per
    channel, 16-32 on NVLink and IB) and HBM bandwidth from the kernels they overlap, which run 10-40% slower
    meanwhile (Rashidi et al., ISCA'21, "ACE"; Pati et al., ASPLOS'24, "T3": a GEMM beside a concurrent
    reduce-scatter). Applied to the collectives the model hides: FSDP's prefetched gathers and reduce-scatters,
    the asynchronous backward TP collectives (not under `tp_comm_overlap`, whose userbuffers use 2-16 SMs or the
    copy engines), the CP ring and the overlapped EP all-to-all."""
    tp_overlap_exposed: float = 0.3
    """Fraction of TP communication left exposed with userbuffer overlap (`tp_comm_overlap`)."""
    optimizer_bytes_per_param: float = 36.0
    """HBM bytes touched per parameter by the fused Adam step: fp32 master, grad, m, v read+write and
    the 16-bit copy written (4+4+8+8+4+4+2 plus the grad-norm pass)."""
    step_overhead_s: float = 0.05
    """Per-step framework time outside the pipeline: data loading, logging, grad-norm all-reduce,
    synchronisation."""
    microbatch_overhead_s: float = 2e-4
    """Per-micro-batch framework time (Python, scheduling) on each stage."""
    gpu_speed_cv: float = 0.02
    """Chip-to-chip spread (coefficient of variation) of sustained compute throughput under load: power and
    thermal management run identical GPUs at different clocks, a few percent apart (Sinha et al., SC'22, "Not
    All GPUs Are Created Equal"). Synchronous training waits for the slowest of its GPUs (`at_scale`)."""
    compute_slowdown: float = 1.0
    """Set by `at_scale`: the slowest-of-n factor of a synchronous job. The analytic efficiencies are divided by it
    there; kernel times from a fitted profile (measured on one chip) are multiplied by it where they are used."""
    source: str = "defaults from public microbenchmarks"

    def with_values(self, **values: Any) -> Calibration:
        """Replace constants by name; an unknown name is a ConfigError (a misspelt constant must not be dropped)."""
        reject_unknown_names(values, CALIBRATION_NAMES, "calibration constant")
        return replace(self, **values)


CALIBRATION_NAMES = frozenset(f.name for f in fields(Calibration))


@cache
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals]: the integral of x * n * phi(x) * Phi(x)^(n-1) (0 for n = 1;
    0.564 for 2, 1.424 for 8, 3.97 for 16,384)."""
    if n <= 1:
        return 0.0
    unit, step = NormalDist(), 0.005
    grid = [-9.0 + step * i for i in range(int(18.0 / step) + 1)]
    return step * sum(x * n * unit.pdf(x) * unit.cdf(x) ** (n - 1) for x in grid)


_COMPUTE_EFFICIENCIES = (
    "gemm_efficiency", "fp8_gemm_efficiency", "attention_efficiency", "attention_backward_efficiency",
)  # fmt: skip


@lru_cache(maxsize=1024)
def at_scale(cal: Calibration, num_gpus: int) -> Calibration:
    """The calibration of a synchronous job on `num_gpus` GPUs: every step waits at its collectives for the
    slowest GPU, so compute-bound kernels run at the speed of the slowest of n chips (mean speed minus
    E[max of n normals] standard deviations). Host time and memory-bound kernels are not clock-bound."""
    if cal.gpu_speed_cv <= 0 or num_gpus <= 1:
        return cal
    slow = 1.0 + cal.gpu_speed_cv * expected_max_normal(num_gpus)
    scaled = {name: getattr(cal, name) / slow for name in _COMPUTE_EFFICIENCIES}
    return replace(cal, **scaled, gpu_speed_cv=0.0, compute_slowdown=cal.compute_slowdown * slow)


# Per-GPU defaults where the generation differs from the base values above.
_GPU_DEFAULTS: dict[str, dict[str, float]] = {
    # Volta: no flash attention, cuBLAS fp16 ~ 100/125 TF (NVIDIA DL performance pages)
    "v100-sxm3-32gb": {"gemm_efficiency": 0.75, "attention_efficiency": 0.35, "attention_backward_efficiency": 0.3},
    # Hopper: cuBLAS bf16 ~ 700-760 TF of 989; FA3 ~ 60% forward
    "h100-sxm5-80gb": {"gemm_efficiency": 0.74},
    "h800-sxm5-80gb": {"gemm_efficiency": 0.74},
    "h200-sxm-141gb": {"gemm_efficiency": 0.76},
    "gh200": {"gemm_efficiency": 0.76},
    # Blackwell: cuBLAS bf16 ~ 1.5-1.7 PF of 2.25 PF
    "b200": {"gemm_efficiency": 0.70, "fp8_gemm_efficiency": 0.60},
    "b300": {"gemm_efficiency": 0.70, "fp8_gemm_efficiency": 0.60},
    "gb200-nvl72": {"gemm_efficiency": 0.70, "fp8_gemm_efficiency": 0.60},
    "gb300-nvl72": {"gemm_efficiency": 0.70, "fp8_gemm_efficiency": 0.60},
    # CDNA3: hipBLASLt bf16 ~ 55-65% of peak in public MLPerf-style reports
    "mi300x": {"gemm_efficiency": 0.60, "fp8_gemm_efficiency": 0.50, "attention_efficiency": 0.45},
    "mi325x": {"gemm_efficiency": 0.60, "fp8_gemm_efficiency": 0.50, "attention_efficiency": 0.45},
    # CDNA4 (MI350X/MI355X): no published GEMM or attention efficiency in the sources paraplan ships; the CDNA3
    # figures of the same software stack (ROCm, hipBLASLt, AITER/CK attention) until a measured run says otherwise.
    "mi350x": {"gemm_efficiency": 0.60, "fp8_gemm_efficiency": 0.50, "attention_efficiency": 0.45},
    "mi355x": {"gemm_efficiency": 0.60, "fp8_gemm_efficiency": 0.50, "attention_efficiency": 0.45},
}


FAMILIES = {
    "volta": ("v100",),
    "ampere": ("a100",),
    "hopper": ("h100", "h800", "h200", "gh200"),
    # Blackwell Ultra (B300 die: 1,400 W, 288 GB, its own clocks) before Blackwell, whose prefixes it would match
    "blackwell_ultra": ("b300", "gb300"),
    "blackwell": ("b200", "gb200"),
    "cdna3": ("mi300", "mi325"),
    # CDNA 4 (AMD CDNA 4 architecture white paper, 2025): MI350X and MI355X, a new matrix core (FP4/FP6, doubled
    # FP16/FP8 rate per CU), not CDNA 3
    "cdna4": ("mi350", "mi355"),
}


def representative_gpu(family: str) -> str:
    """The first GPU preset of a family (the family's datasheet defaults), or the name itself."""
    prefixes = FAMILIES.get(family, ())
    return next((name for name in gpu_names() if name.startswith(prefixes)), family) if prefixes else family


# A family the fit has not seen takes the fitted efficiencies of its neighbour where both run the same software
# generation (Hopper and Blackwell: FlashAttention-3/cuDNN attention, TransformerEngine FP8, NCCL on NVLink
# switches) rather than the datasheet defaults; other families keep their defaults (Volta has no flash
# attention, CDNA3 another software stack).
# Blackwell Ultra runs Blackwell's software and takes its fit first.
NEIGHBOUR_FAMILY = {"blackwell_ultra": "blackwell", "blackwell": "hopper", "hopper": "blackwell"}


# The efficiencies a neighbour's fit carries over as its ratio to the neighbour's own defaults (what the software
# stack loses against the kernel microbenchmarks each default quotes): a family's own datasheet and microbenchmark
# figures stay its scale. The rest (chip spread, overlap interference, NVLink efficiency) carry over as they are.
_RELATIVE_CONSTANTS = (
    "gemm_efficiency",
    "fp8_gemm_efficiency",
    "attention_efficiency",
    "attention_backward_efficiency",
)


def _gpu_defaults(gpu: str) -> Calibration:
    return Calibration().with_values(**_GPU_DEFAULTS.get(gpu, {}))


def _carried_over(fitted: dict[str, Any], own: Calibration, neighbour: Calibration) -> dict[str, Any]:
    """A neighbour family's fitted constants for a family the fit has not seen (`NEIGHBOUR_FAMILY`)."""
    return {
        name: value * getattr(own, name) / getattr(neighbour, name) if name in _RELATIVE_CONSTANTS else value
        for name, value in fitted.items()
    }


def family_of(gpu: str) -> str:
    for family, prefixes in FAMILIES.items():
        if gpu.startswith(prefixes):
            return family
    return gpu


@cache
def fitted_table() -> dict[str, Any]:
    """The shipped fit (calibration.yaml next to this module), or {} when there is none."""
    try:
        text = resources.files("paraplan.cost").joinpath("calibration.yaml").read_text()
    except FileNotFoundError:
        return {}
    return yaml.safe_load(text) or {}


def calibration_for(gpu: str, framework: str = "", table: dict[str, Any] | None = None) -> Calibration:
    """Defaults, then per-GPU defaults, then the fitted table's family, GPU and framework sections."""
    if table is None:
        return _shipped_calibration(gpu, framework)
    return _calibration_from(gpu, framework, table)


@lru_cache(maxsize=256)
def _shipped_calibration(gpu: str, framework: str) -> Calibration:
    """`calibration_for` with the shipped table (read once per process, `fitted_table`): a frozen value, built once
    per GPU and framework (every projection asks; about 25 us to build)."""
    return _calibration_from(gpu, framework, fitted_table())


def _calibration_from(gpu: str, framework: str, fitted: dict[str, Any]) -> Calibration:
    cal = _gpu_defaults(gpu)
    values: dict[str, Any] = {}
    values.update(fitted.get("all", {}) or {})
    families = fitted.get("family", {}) or {}
    own = family = family_of(gpu)
    seen = {family}
    while family not in families and NEIGHBOUR_FAMILY.get(family) not in (None, *seen):
        family = NEIGHBOUR_FAMILY[family]
        seen.add(family)
    borrowed = families.get(family, {}) or {}
    if family != own and borrowed:
        borrowed = _carried_over(borrowed, cal, _gpu_defaults(representative_gpu(family)))
    values.update(borrowed)
    values.update((fitted.get("gpu", {}) or {}).get(gpu, {}) or {})
    values.update((fitted.get("framework", {}) or {}).get(framework, {}) or {})
    if values:
        cal = cal.with_values(**values, source=str(fitted.get("source", "fitted")))
    return _with_attention_kernels(cal, gpu, framework)


# The flash-attention kernels a framework runs. Megatron-core (Megatron-LM, NeMo / Megatron-Bridge) runs Transformer
# Engine's DotProductAttention, which takes cuDNN's fused attention or FlashAttention-3 on Hopper: the Hopper attention
# efficiencies above are theirs (fitted on NeMo and Megatron-Bridge rows). Torch-native trainers run FlashAttention-2's
# kernels: llm-foundry (`attn_impl: flash`) and Megatron-DeepSpeed (`--use-flash-attn-v2`) the flash-attn 2 package,
# torchtitan and DeepSpeed's models PyTorch's `scaled_dot_product_attention`, whose flash backend is
# FlashAttention-2 and comes first in its backend order (PyTorch 2.5.0 put cuDNN attention first on H100 and 2.5.1
# took that back). On Ampere both are FlashAttention-2.
FA2_FRAMEWORKS = frozenset({"llm-foundry", "torchtitan", "deepspeed", "megatron-deepspeed"})
# FlashAttention-2 does not use Hopper's TMA and warpgroup MMA: FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608:
# abstract and section 4.1, H100 SXM5, BF16) runs the forward 1.5-2.0x and the backward 1.5-1.75x faster. The
# geometric middles of those ranges divide the Hopper efficiencies for FlashAttention-2's kernels. Not applied on
# Blackwell: no published FlashAttention-2 against cuDNN / FlashAttention-4 figure on sm100 was found.
FA2_ON_HOPPER_SLOWDOWN = ((1.5 * 2.0) ** 0.5, (1.5 * 1.75) ** 0.5)  # (forward, backward)


def _with_attention_kernels(cal: Calibration, gpu: str, framework: str) -> Calibration:
    """`cal` with the attention efficiencies of the kernels `framework` runs on `gpu` (`FA2_FRAMEWORKS`)."""
    if framework not in FA2_FRAMEWORKS or family_of(gpu) != "hopper":
        return cal
    forward, backward = FA2_ON_HOPPER_SLOWDOWN
    return replace(
        cal,
        attention_efficiency=cal.attention_efficiency / forward,
        attention_backward_efficiency=cal.attention_backward_efficiency / backward,
    )
