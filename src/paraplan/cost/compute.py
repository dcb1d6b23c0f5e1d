"""Analytic time of one compute operator: a roofline with shape-dependent efficiency.

time = max(FLOPs / (peak * efficiency), bytes / (HBM bandwidth * memory efficiency)) + launch floor.
GEMM efficiency falls with wave quantisation over the SMs (a partial last wave of output tiles idles
SMs) and with small inner dimensions; attention efficiency with small head dims and short sequences.
"""

from __future__ import annotations

import math

from paraplan.cost.calibration import Calibration
from paraplan.cost.quantize import (
    RECIPES,
    activation_quantize_bytes,
    activation_quantize_kernels,
    primary_weight_cast_bytes,
    recipe_of,
    weight_quantize_bytes,
    weight_transpose_bytes,
)
from paraplan.graph.backward import is_weightless_gemm
from paraplan.graph.ops import Op, OpKind, Phase
from paraplan.specs.system import GpuSpec

FP8 = frozenset({"fp8", "fp8_cs", "fp8_blockwise", "mxfp8"})
FP4 = frozenset({"nvfp4"})
# CUTLASS/cuBLAS output tile used for wave quantisation (128x256 on Hopper/Blackwell, 128x128 before).
_TILE_BIG = (128, 256)
_TILE_SMALL = (128, 128)
# Inner dimension at which a GEMM reaches half its asymptotic efficiency: each output tile's epilogue (the store
# of its results) does not overlap its K loop, so a short K loop leaves the tensor cores idle for a fixed time per
# tile. Fitted on the fp16 GEMM samples of ../shared/data/kernel-samples (the attention score and context batched
# GEMMs, k = head dim or sequence, and the QKV and MLP linears), one value for A100 and GH200: 96 left the score
# GEMM (k = head dim) 1.6x faster than measured relative to the linears; 192 brings the spread of the per-kernel
# median log-ratios from 0.47 to 0.17 on A100 and from 0.16 to 0.08 on GH200 (tests/cost/test_gemm_samples.py).
_K_HALF = 192.0
# The inner dimension at which the efficiencies hold as given: the calibrated and default GEMM efficiencies are those
# of a large GEMM (the 8192-cubed size cuBLAS throughput figures quote); shorter K loops run slower, longer faster.
_K_REF = 8192.0
# The weight GEMMs' backward (input gradient and weight gradient together) runs this much more efficiently than the
# forward GEMM of the same linear, beyond what the shapes give: the median over the fp16 linear samples (QKV, attention
# output, MLP up and down, LM head) of ../shared/data/kernel-samples, A100 and GH200, of model/measured backward over
# model/measured forward was 1.07 (per kernel 1.03-1.12 on both chips; tests/cost/test_gemm_samples.py). The batched
# GEMMs of unfused attention show no such gap (0.99-1.02), so they keep the forward's rate.
WEIGHT_GEMM_BACKWARD_SPEEDUP = 1.07
# FlashAttention reaches half its peak efficiency at about this many keys per query block (FA2 paper
# figures: throughput saturates from ~2k tokens).
_ATTN_SEQ_HALF = 384.0


_K_REF_FACTOR = _K_REF / (_K_REF + _K_HALF)


def any_layout_fp8(gpu: GpuSpec) -> bool:
    """Whether the GPU's per-tensor FP8 GEMMs take any operand layout (Blackwell: TE's
    `is_non_tn_fp8_gemm_supported`, compute capability >= 10.0), told by the FP4 tensor cores that came with
    them; Hopper's are TN only."""
    return gpu.fp4_tflops > 0


def activation_quantize_s(op: Op, gpu: GpuSpec, cal: Calibration) -> float:
    """The quantisation kernels a low-precision GEMM op waits for (`cost.quantize`): the forward GEMM's input
    (row-wise and, for the weight gradient, column-wise), the input-gradient GEMM's output gradient (both copies);
    the weight-gradient GEMM reads the column-wise copies those made. Weights are cast apart from the ops
    (`weight_quantize_s`)."""
    recipe = recipe_of(op.precision)
    shape = op.gemm
    if recipe is None or shape is None or op.phase is Phase.BACKWARD_WEIGHT:
        return 0.0
    layout = any_layout_fp8(gpu)
    nbytes = activation_quantize_bytes(recipe, shape.m * shape.k * shape.count, layout)
    launches = activation_quantize_kernels(recipe, layout)
    return nbytes / (gpu.hbm_bytes_per_s * cal.memory_efficiency) + launches * cal.kernel_launch_s


def weight_quantize_s(precision: str, weight_elements: float, gpu: GpuSpec, cal: Calibration) -> float:
    """One cast of `weight_elements` weights of low-precision GEMMs (`cost.quantize.weight_quantize_bytes`); 0 for
    16-bit GEMMs."""
    recipe = recipe_of(precision)
    if recipe is None or weight_elements <= 0:
        return 0.0
    nbytes = weight_quantize_bytes(recipe, weight_elements, any_layout_fp8(gpu))
    return nbytes / (gpu.hbm_bytes_per_s * cal.memory_efficiency)


def weight_transposes_s(precision: str, weight_elements: float, gpu: GpuSpec, cal: Calibration) -> float:
    """The column-wise copies of `weight_elements` quantised weights made from their row-wise data
    (`cost.quantize.weight_transpose_bytes`); 0 for 16-bit GEMMs and where one copy serves both GEMMs."""
    recipe = recipe_of(precision)
    if recipe is None or weight_elements <= 0:
        return 0.0
    return weight_transpose_bytes(recipe, weight_elements, any_layout_fp8(gpu)) / (
        gpu.hbm_bytes_per_s * cal.memory_efficiency
    )


def primary_weight_cast_s(precision: str, shard_elements: float, gpu: GpuSpec, cal: Calibration) -> float:
    """The distributed optimizer's cast of its `shard_elements` main params into quantised primary weights
    (`cost.quantize.primary_weight_cast_bytes`); 0 for 16-bit GEMMs."""
    recipe = recipe_of(precision)
    if recipe is None or shard_elements <= 0:
        return 0.0
    return primary_weight_cast_bytes(recipe, shard_elements) / (gpu.hbm_bytes_per_s * cal.memory_efficiency)


def gemm_time_s(op: Op, gpu: GpuSpec, cal: Calibration) -> float:
    return clock_of(gpu, cal).gemm_s(op)


# Flash attention's rate against head dim, relative to 128: (d / 128) ** 0.26 for the head dims kernels are
# built for, a log-least-squares fit on the power-of-two head dims (32, 64, 128) of the A100 and GH200
# flash-attention samples in ../shared/data/kernel-samples (forward 0.30 / 0.24, backward 0.23 / 0.27; hd 64
# runs at 0.88-0.92 of hd 128). FlashAttention-2 instantiates head dims in steps of 32 (32, 64, 96, ...,
# 256): others run padded.
_HEAD_DIM_EXPONENT = 0.26
_HEAD_DIM_STEP = 32
# The Triton flash-attention kernel that runs attention with an ALiBi bias (llm-foundry's MPT) tiles 128 x 128
# blocks at every head dim and does not run slower per FLOP at head dim 64: with FA2's exponent, llm-foundry's
# head-dim-64 models (MPT-125m, -350m) came out slower and slower than measured as the sequence (the attention
# share) grows, 0% at 512 tokens to -14% at 32k-64k, while its head-dim-128 models stayed within a few percent
# at every length.
_TRITON_HEAD_DIM_EXPONENT = 0.0


def _head_dim_factor(head_dim: float, exponent: float = _HEAD_DIM_EXPONENT) -> float:
    padded = math.ceil(head_dim / _HEAD_DIM_STEP) * _HEAD_DIM_STEP
    return min(1.0, padded / 128.0) ** exponent * head_dim / padded


def attention_time_s(op: Op, gpu: GpuSpec, cal: Calibration) -> float:
    return clock_of(gpu, cal).attention_s(op)


# The chunked scans of Mamba-2 (SSD, mamba_ssm's Triton `mamba_chunk_scan_combined`) and Gated DeltaNet (fla's
# chunked delta rule) run at this share of the 16-bit peak, counted on the scan ops' FLOPs (Megatron-Bridge's
# convention, 7·s·d_in·N and 8·s·Hv·dk·dv; the chunked algorithms themselves do 1.58x and 1.38x that at Nemotron-H 8B
# and Qwen3-Next shapes, tests/hybrid/test_hybrid_mixers.py). AN ASSUMPTION, NOT A MEASUREMENT: the kernel samples in
# ../shared/data (A100 on Perlmutter, GH200 on Vista) hold no scan kernel, and Dao & Gu 2024 ("Transformers are
# SSMs", section 9.3, Figure 10) give only relative timings (SSD against FlashAttention-2 and Mamba-1's scan,
# crossing FlashAttention-2 at about 2K tokens), no fraction of peak. 0.12 reads that crossing as: at 2K the scan's
# counted FLOPs are about a third of attention's, attention runs at about a third of peak. `paraplan measure` has no
# scan microbenchmark to fit it yet; `--hybrid` times whole M and Gated DeltaNet blocks (measure/mixers.py, plain
# torch, slower than the fused kernels).
SCAN_EFFICIENCY = 0.12


def scan_time_s(op: Op, gpu: GpuSpec, cal: Calibration) -> float:
    """A chunked scan: a roofline at `SCAN_EFFICIENCY`, plus a launch floor per kernel of the scan."""
    return clock_of(gpu, cal).scan_s(op)


def elementwise_time_s(op: Op, gpu: GpuSpec, cal: Calibration) -> float:
    """Bytes over bandwidth, plus the kernel floor when the op launches a kernel (a view moves nothing)."""
    return clock_of(gpu, cal).elementwise_s(op)


def optimizer_time_s(params: float, gpu: GpuSpec, cal: Calibration) -> float:
    """Fused Adam over `params` parameters: memory-bound (`Calibration.optimizer_bytes_per_param`)."""
    return params * cal.optimizer_bytes_per_param / (gpu.hbm_bytes_per_s * cal.memory_efficiency)


class OpClock:
    """The analytic seconds of compute operators on one GPU under one calibration (`compute_time_s`), with what the
    ops share read once: the peaks by precision, the memory bandwidth, the GEMM tile (a block's phase times 20-40 ops
    under one context, issue 35: a call per op through `compute_time_s` cost about twice as much). Each formula is
    here once; the functions of this module call it."""

    __slots__ = ("cal", "gpu", "_bandwidth", "_launch", "_peaks", "_sm_count", "_tile_m", "_tile_n")

    def __init__(self, gpu: GpuSpec, cal: Calibration) -> None:
        self.gpu, self.cal = gpu, cal
        self._bandwidth = gpu.hbm_bytes_per_s * cal.memory_efficiency
        self._launch = cal.kernel_launch_s
        self._sm_count = gpu.sm_count
        # CUTLASS/cuBLAS output tile used for wave quantisation
        self._tile_m, self._tile_n = _TILE_BIG if gpu.sm_count >= 132 else _TILE_SMALL
        self._peaks: dict[str, float] = {}

    def peak(self, precision: str) -> float:
        """`GpuSpec.peak_flops`, once per precision (the methods below look it up in `_peaks` first)."""
        peak = self._peaks[precision] = self.gpu.peak_flops(precision)
        return peak

    def __call__(self, op: Op) -> float:
        kind = op.kind
        if kind is _GEMM:
            return self.gemm_s(op)
        if kind is _ELEMENTWISE:
            return self.elementwise_s(op)
        if kind is _ATTENTION:
            return self.attention_s(op)
        if kind is _SCAN:
            return self.scan_s(op)
        raise ValueError(f"not a compute operator: {op.name} ({kind})")

    def gemm_s(self, op: Op) -> float:
        shape = op.gemm
        assert shape is not None
        precision, cal = op.precision, self.cal
        m, n, k, count = shape.m, shape.n, shape.k, shape.count
        peak = self._peaks.get(precision) or self.peak(precision)
        # The efficiency. No published NVFP4 GEMM efficiency relative to its peak was found: FP4 GEMMs take the
        # fitted FP8 one.
        base = cal.fp8_gemm_efficiency if precision in FP8 or precision in FP4 else cal.gemm_efficiency
        # wave quantisation: the last wave of output tiles leaves SMs idle
        tile_m, tile_n, sm_count = self._tile_m, self._tile_n, self._sm_count
        tiles_m, tiles_n = math.ceil(m / tile_m), math.ceil(n / tile_n)
        tiles = tiles_m * tiles_n * count
        waves = math.ceil(tiles / sm_count)
        fill = tiles / (waves * sm_count)
        # Padding waste inside tiles for dims that are not tile multiples.
        pad = (m / (tiles_m * tile_m)) * (n / (tiles_n * tile_n))
        eff = base * (fill * (0.5 + 0.5 * pad)) * (k / (k + _K_HALF)) / _K_REF_FACTOR
        if eff < 0.02:  # max(eff, 0.02)
            eff = 0.02
        if op.phase is not _FORWARD and not is_weightless_gemm(op):
            eff = min(eff * WEIGHT_GEMM_BACKWARD_SPEEDUP, 0.98)
        recipe = RECIPES.get(precision)  # `recipe_of`
        # operands as the GEMM reads them: quantised (data and block scales), or 16/32-bit
        element_bytes = recipe.element_bytes if recipe is not None else 4 if precision == "fp32" else 2
        out_bytes = 4 if precision == "fp32" else 2
        io_bytes = element_bytes * (m * k + k * n) * count + out_bytes * m * n * count
        compute_s = op.flops / (peak * eff)
        memory_s = io_bytes / self._bandwidth
        if recipe is None:  # 16-bit: no quantisation kernels (x + 0.0 is x: no term to add)
            return max(compute_s, memory_s) + self._launch
        return max(compute_s, memory_s) + activation_quantize_s(op, self.gpu, cal) + self._launch

    def attention_s(self, op: Op) -> float:
        att = op.attention
        assert att is not None
        cal = self.cal
        # A causal square, a context-parallel shard of one (load-balanced halves), or local attention counted as
        # the square-equivalent of the keys it attends (`graph.layers._local_attention`): kernels do half the
        # counted work.
        causal = 0.5 if att.causal else 1.0
        flops = op.flops * causal
        base = cal.attention_efficiency if op.phase is _FORWARD else cal.attention_backward_efficiency
        alibi = "alibi" in op.tags
        head_factor = _head_dim_factor(
            (att.head_dim_qk + att.head_dim_v) / 2, _TRITON_HEAD_DIM_EXPONENT if alibi else _HEAD_DIM_EXPONENT
        )
        seq_factor = att.seq_kv / (att.seq_kv + _ATTN_SEQ_HALF)
        eff = max(base * head_factor * seq_factor / (4096 / (4096 + _ATTN_SEQ_HALF)), 0.02)
        if alibi:
            eff *= cal.alibi_attention_factor
        precision = "fp32" if op.precision == "fp32" else "bf16"  # attention is 16-bit in FP8 runs too
        peak = self._peaks.get(precision) or self.peak(precision)
        memory_s = op.bytes_moved / self._bandwidth
        # The softmax's exponentials run on the special-function units, which flash attention cannot fully hide
        # behind the tensor cores (FlashAttention-3/4 papers: the exp throughput bounds attention at head dim
        # 128 on Hopper and Blackwell); backward recomputes them once.
        exp_s = 0.0
        gpu = self.gpu
        if gpu.exp_tera_per_s > 0:
            exp_s = att.batch * att.heads * att.seq_q * att.seq_kv * causal / (gpu.exp_tera_per_s * 1e12)
        return max(flops / (peak * eff) + exp_s, memory_s) + self._launch

    def scan_s(self, op: Op) -> float:
        peak = self.peak("fp32" if op.precision == "fp32" else "bf16")  # 16-bit in FP8 runs too
        compute_s = op.flops / (peak * SCAN_EFFICIENCY)
        memory_s = op.bytes_moved / self._bandwidth
        return max(compute_s, memory_s) + self._launch * max(1, op.host_ops)

    def elementwise_s(self, op: Op) -> float:
        moved = op.bytes_moved
        if moved <= 0:
            return 0.0
        return moved / self._bandwidth + self._launch


_GEMM, _ATTENTION, _ELEMENTWISE, _SCAN = OpKind.GEMM, OpKind.ATTENTION, OpKind.ELEMENTWISE, OpKind.SCAN
_FORWARD = Phase.FORWARD


_LAST_CLOCK: list[OpClock] = []


def clock_of(gpu: GpuSpec, cal: Calibration) -> OpClock:
    """An `OpClock` of `gpu` and `cal`: the last one made here when it is of these very objects (the callers that
    time op by op, `compute_time_s`, pass the same GPU and calibration op after op)."""
    last = _LAST_CLOCK[0] if _LAST_CLOCK else None
    if last is not None and last.gpu is gpu and last.cal is cal:
        return last
    clock = OpClock(gpu, cal)
    _LAST_CLOCK[:] = [clock]
    return clock


def compute_time_s(op: Op, gpu: GpuSpec, cal: Calibration) -> float:
    return clock_of(gpu, cal)(op)


__all__ = [
    "FP8",
    "OpClock",
    "activation_quantize_s",
    "any_layout_fp8",
    "compute_time_s",
    "optimizer_time_s",
    "primary_weight_cast_s",
    "weight_quantize_s",
    "weight_transposes_s",
]
