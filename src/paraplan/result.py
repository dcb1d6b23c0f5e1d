"""The typed answer of a projection (its breakdown's parts: `BreakdownPart`)."""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.calibration import Calibration
from paraplan.cost.collectives import CollectiveSource
from paraplan.memory.model import MemoryResult
from paraplan.sim.breakdown import BreakdownPart
from paraplan.sim.pipeline import PipelineOutcome
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import PRECISION_PEAK_KEY, SystemSpec
from paraplan.specs.training import TrainingSpec

__all__ = ["BreakdownPart", "Projection"]


@dataclass(frozen=True, slots=True)
class Projection:
    model: ModelSpec
    system: SystemSpec
    train: TrainingSpec
    calibration: Calibration
    pipeline: PipelineOutcome
    memory: MemoryResult
    step_time_s: float
    tokens_per_step: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    collectives: tuple[CollectiveSource, ...] | None = None
    """With a fitted profile: each collective kind per axis, measured or modelled and why (`cost.collectives`),
    with its share of the axis's communication on the critical rank; None without a profile (all modelled)."""

    @classmethod
    def build(cls, **kw) -> Projection:
        return cls(step_time_s=kw["pipeline"].step_time_s, **kw)

    @property
    def tokens_per_sec_per_gpu(self) -> float:
        return self.tokens_per_step / self.step_time_s / self.system.num_gpus

    @property
    def tflops_per_gpu(self) -> float:
        return self.model_flops_per_step / self.step_time_s / self.system.num_gpus / 1e12

    @property
    def peak_precision(self) -> str:
        """The tensor-core math the run's GEMMs use (`specs.system.PRECISION_PEAK_KEY`: "fp8" for every FP8
        recipe, "fp4" for NVFP4, "fp16" for fp32 training and for a GPU without a BF16 peak): the peak `mfu` is
        against. A GPU with no peak for it falls back to its FP16 one (`GpuSpec.peak_flops`)."""
        key = PRECISION_PEAK_KEY.get(self.train.precision, self.train.precision)
        return key if self.system.gpu.peak_tflops.get(key, 0.0) > 0 else "fp16"

    @property
    def peak_flops_per_gpu(self) -> float:
        """MFU/HFU denominator: the dense peak of the math the run computes in (`peak_precision`), so MFU <= 1
        holds for FP8 and NVFP4 runs too."""
        return self.system.gpu.peak_flops(self.train.precision)

    @property
    def bf16_peak_flops_per_gpu(self) -> float:
        """The dense 16-bit peak: the denominator of `mfu_bf16_peak` (the convention of Megatron-LM / NeMo
        reports, which keep it for FP8 runs, so an FP8 or NVFP4 run can exceed 100% of it)."""
        return self.system.gpu.peak_flops("bf16")

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation against the peak of the precision the run computes in (`peak_precision`): the
        primary figure, at most 1."""
        return self.tflops_per_gpu * 1e12 / self.peak_flops_per_gpu

    @property
    def hfu(self) -> float:
        """Hardware FLOPs (recompute included) utilisation against the same peak as `mfu`."""
        return self._hardware_flops_per_gpu_s / self.peak_flops_per_gpu

    @property
    def mfu_bf16_peak(self) -> float:
        """`mfu` against the dense BF16 peak whatever the precision (comparable across precisions and with
        published figures, which use this convention; above 1 is possible for FP8 / NVFP4 runs)."""
        return self.tflops_per_gpu * 1e12 / self.bf16_peak_flops_per_gpu

    @property
    def hfu_bf16_peak(self) -> float:
        return self._hardware_flops_per_gpu_s / self.bf16_peak_flops_per_gpu

    @property
    def _hardware_flops_per_gpu_s(self) -> float:
        return self.hardware_flops_per_step / self.step_time_s / self.system.num_gpus

    @property
    def breakdown(self) -> dict[str, float]:
        """Seconds per named part of the step (`BreakdownPart`, its values the keys); they sum to the step time."""
        return dict(self.pipeline.breakdown)

    def to_dict(self) -> dict:
        t = self.train
        return {
            "model": self.model.name,
            "gpu": self.system.gpu.name,
            "num_gpus": self.system.num_gpus,
            "config": {
                "tp": t.tp,
                "pp": t.pp,
                "vpp": t.vpp,
                "cp": t.cp,
                "ep": t.ep,
                "etp": t.etp,
                "dp": t.dp,
                "mbs": t.mbs,
                "gbs": t.gbs,
                "seq": t.seq,
                "num_microbatches": t.num_microbatches,
                "sequence_parallel": t.sequence_parallel,
                "recompute": t.recompute_granularity,
                "recompute_num_layers": t.recompute_num_layers,
                "distributed_optimizer": t.use_distributed_optimizer,
                "zero_stage": t.zero_stage,
                "fsdp": t.fsdp,
                "schedule": t.pipeline_schedule,
                "precision": t.precision,
                "overlap_grad_reduce": t.overlap_grad_reduce,
                "overlap_param_gather": t.overlap_param_gather,
                "tp_comm_overlap": t.tp_comm_overlap,
                "tp_async_backward": t.tp_async_backward,
                "attention_backend": t.attention_backend,
                "kernel_fusion": t.kernel_fusion,
                "cross_entropy_fusion": t.cross_entropy_fusion,
                "framework": t.framework,
            },
            "step_time_s": self.step_time_s,
            "tokens_per_sec_per_gpu": self.tokens_per_sec_per_gpu,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "mfu_peak": {"precision": self.peak_precision, "tflops_per_gpu": self.peak_flops_per_gpu / 1e12},
            "mfu_bf16_peak": self.mfu_bf16_peak,
            "hfu_bf16_peak": self.hfu_bf16_peak,
            "tflops_per_gpu": self.tflops_per_gpu,
            "model_flops_per_step": self.model_flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step,
            "breakdown": self.breakdown,
            "communication": {
                "total_s": self.pipeline.comm_total_s,
                "exposed_s": self.pipeline.comm_exposed_s,
            },
            "pipeline": {
                "simulated": self.pipeline.simulated,
                "critical_rank": self.pipeline.critical_rank,
                "bubble_s": list(self.pipeline.bubble_s),
                "peak_inflight_microbatches": list(self.pipeline.peak_inflight_microbatches),
            },
            "cost_sources": {
                "profiled_fraction": self.pipeline.profiled_fraction,
                "measured_fraction": self.pipeline.measured_fraction,
                "calibration": self.calibration.source,
                **({"collectives": [c.to_dict() for c in self.collectives]} if self.collectives is not None else {}),
            },
            "memory": self.memory.to_dict(),
        }
