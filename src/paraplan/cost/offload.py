"""Time of the optimizer step (on the GPU, or partly on the host) and of host-memory copies.

The fused Adam step is memory-bound (`Calibration.optimizer_bytes_per_param` bytes per parameter at the achievable
HBM bandwidth). Megatron's precision-aware optimizer (TransformerEngine FusedAdam) streams its main parameters,
main gradients and moments in their own dtypes, so the step moves fewer bytes in proportion (`adam_bytes_per_param`).
With CPU offload (Megatron HybridDeviceOptimizer, torch FSDP2 CPUOffloadPolicy) the offloaded share's gradients go
down the host link, its Adam step runs on the CPU at the host memory's bandwidth, and its updated parameters come
back up; the step's GPU share and host share are issued one after the other (Megatron's `step` runs its sub-optimizers
in turn; `--overlap-cpu-optimizer-d2h-h2d` is not modelled).
"""

from __future__ import annotations

from paraplan.cost.calibration import Calibration
from paraplan.cost.compute import optimizer_time_s
from paraplan.specs.system import GpuSpec
from paraplan.specs.training import TrainingSpec

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
HOST_COPY_EFFICIENCY = 0.8
"""Pinned host<->device copies reach about 80% of the link's peak (CUDA `bandwidthTest` / nvbandwidth: about 26 of
32 GB/s on PCIe Gen4 x16, 52 of 64 on Gen5 x16)."""
HOST_ADAM_BYTES_PER_PARAM = 30.0
"""Host DRAM bytes per parameter of a CPU Adam step (DeepSpeed CPU-Adam, torch AdamW on CPU, fp32 throughout): fp32
gradient read (4), master weight, m and v read and written (3 x 8), the 16-bit copy written for the GPU (2)."""


def adam_bytes_per_param(train: TrainingSpec) -> float:
    """Bytes one fused Adam step moves per parameter with the spec's optimizer dtypes: the gradient read twice (the
    step and the grad-norm pass), main weight and both moments read and written, the 16-bit weight written."""
    grad = DTYPE_BYTES[train.main_grads_dtype] if train.use_precision_aware_optimizer else 4
    states = 12  # fp32 main weight, m and v
    if train.use_precision_aware_optimizer:
        states = sum(DTYPE_BYTES[d] for d in (train.main_params_dtype, train.exp_avg_dtype, train.exp_avg_sq_dtype))
    return 2 * grad + 2 * states + 2


FP32_ADAM_BYTES_PER_PARAM = 2 * 4 + 2 * 12 + 2
"""`adam_bytes_per_param` of the default fp32 layout: the calibrated `optimizer_bytes_per_param` stands for it."""


def host_copy_s(nbytes: float, gpu: GpuSpec) -> float:
    """One copy between GPU and host memory over the host link (`GpuSpec.host_link_gbps`, per direction)."""
    return nbytes / (gpu.host_link_bytes_per_s * HOST_COPY_EFFICIENCY)


def cpu_adam_s(params: float, gpu: GpuSpec, cal: Calibration) -> float:
    """A CPU Adam step over `params`: memory-bound on the host DRAM share of one GPU (`GpuSpec.host_memory_gbps`)
    at the same streaming efficiency as HBM (STREAM-like)."""
    return params * HOST_ADAM_BYTES_PER_PARAM / (gpu.host_memory_bytes_per_s * cal.memory_efficiency)


def optimizer_step_s(params: float, train: TrainingSpec, gpu: GpuSpec, cal: Calibration) -> float:
    """The optimizer step over the `params` parameters one GPU updates: the GPU share (scaled by the precision-aware
    optimizer's bytes), then the host share (`TrainingSpec.offloaded_optimizer_fraction`): gradients down, CPU
    Adam, 16-bit parameters up."""
    offloaded = params * train.offloaded_optimizer_fraction
    on_gpu = params - offloaded
    ratio = adam_bytes_per_param(train) / FP32_ADAM_BYTES_PER_PARAM
    seconds = optimizer_time_s(on_gpu * ratio, gpu, cal) if ratio != 1.0 else optimizer_time_s(on_gpu, gpu, cal)
    if offloaded:
        grad_bytes = DTYPE_BYTES[train.main_grads_dtype] if train.use_precision_aware_optimizer else 4
        seconds += host_copy_s(offloaded * grad_bytes, gpu) + cpu_adam_s(offloaded, gpu, cal)
        seconds += host_copy_s(offloaded * train.param_gather_bytes, gpu)
    return seconds
