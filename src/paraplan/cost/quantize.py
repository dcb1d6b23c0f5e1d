"""The quantisation kernels of low-precision GEMM recipes, as memory passes with their bytes.

A low-precision GEMM reads operands some kernel quantised from the 16-bit tensors first. Transformer Engine's
recipes (`transformer_engine.common.recipe`: DelayedScaling, Float8CurrentScaling, Float8BlockScaling,
MXFP8BlockScaling, NVFP4BlockScaling) differ in what those kernels read and write:

- which copies an operand needs: the forward GEMM reads the input row-wise (blocks along K), the weight-gradient
  GEMM reads it transposed (column-wise). Per-tensor FP8 on Hopper needs a transposed copy (its FP8 GEMMs are
  TN only; TE's fused cast-transpose writes both in one kernel); on Blackwell per-tensor FP8 GEMMs take any layout
  and one copy serves both (TE `is_non_tn_fp8_gemm_supported`, compute capability >= 10.0). Block-scaled formats
  scale along the reduction dimension, so the transposed operand is quantised again with its own scales (TE
  MXFP8/NVFP4/Float8Block tensors hold `rowwise_data` and `columnwise_data`) on every GPU.
- whether the scale needs the whole tensor's amax first: current scaling (Float8CurrentScalingQuantizer: an amax
  kernel, then the cast) and NVFP4's FP32 second-level tensor scale do; delayed scaling casts with the scale of
  past amaxes and records the amax in the same kernel; MXFP8 (E8M0 per 1x32) and DeepSeek-style blockwise FP8
  (FP32 per 1x128 / 128x128) scale each block alone.
- the bytes of a quantised element: its data plus its block's scale (MXFP8 1 + 1/32, NVFP4 0.5 + 1/16 for
  1x16 blocks with an E4M3 scale, 0.5 + 1/256 for the 16x16 weight blocks; Float8 blockwise 1 + 4/128).

NVFP4 (Abecassis et al., "Pretraining Large Language Models with NVFP4", arXiv:2509.25149, section 4; TE
NVFP4BlockScaling): 1x16 blocks with E4M3 scales and an FP32 tensor scale for activations and gradients; 16x16
2D blocks for weights (one quantisation serves the forward and the transposed backward GEMM); a 16x16 random
Hadamard transform on the weight-gradient GEMM's operands (the column-wise copies of the input and the output
gradient); stochastic rounding of gradients. TE's NVFP4Quantizer (transformer_engine/pytorch/csrc/quantizer.cpp)
runs an amax kernel (the row-wise amax and the amax after the RHT together), a row-wise cast, and a fused RHT +
column-wise cast: three reads of the 16-bit tensor. Stochastic rounding draws its random bits inside the cast
kernel: no bytes of its own (its arithmetic is not modelled).

Fused kernels count once: a kernel that writes the row-wise and column-wise copies reads its input once.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.specs.training import LOW_PRECISIONS as _LOW_PRECISIONS

SOURCE_BYTES = 2  # the quantisers read 16-bit (bf16) activations, gradients and model weights


@dataclass(frozen=True, slots=True)
class QuantRecipe:
    """What quantising one operand for a recipe's GEMMs costs, per element of the operand."""

    name: str
    element_bytes: float
    """Bytes per element of a quantised activation or gradient copy, its block scales included: what the GEMM
    reads."""
    weight_element_bytes: float
    """Bytes per element of a quantised weight copy (2D blocks for NVFP4 and Float8 blockwise)."""
    amax_pass: bool
    """A separate amax kernel reads the tensor before the cast (the scale needs the whole tensor's amax)."""
    block_scaled: bool
    """Scales run along the reduction dimension: the transposed operand is quantised again (its own copy) on
    every GPU. Per-tensor FP8 needs the second copy only where FP8 GEMMs are TN only (Hopper)."""
    separate_columnwise_pass: bool = False
    """The column-wise copy is written by a kernel of its own that reads the input again (NVFP4's RHT cast)."""
    weight_two_d: bool = False
    """Weights in 2D blocks: one quantisation holds both orientations (written twice for the GEMM's layout,
    read once)."""
    weight_stored_bytes: float | None = None
    """Bytes per element of one orientation of a quantised weight as Transformer Engine stores it, its scales
    included, where that differs from `weight_element_bytes` (None: the same): TE 2.9's NVFP4Quantizer allocates
    1x16 scale storage in both orientations whatever the weight's 2D blocks (tensor/nvfp4_tensor.py
    `get_scale_shape`, `make_empty`), so a stored NVFP4 weight holds 0.5 + 1/16 bytes an element each way.
    Float8 blockwise stores its 2D weights' 128x128 scales as such (float8_blockwise_tensor.py `get_scale_shape`,
    `block_scaling_dim == 2`); MXFP8 one E8M0 scale per 32 elements each way (mxfp8_tensor.py `make_empty`)."""

    @property
    def stored_weight_bytes(self) -> float:
        """Bytes per element of one stored orientation of a quantised weight (`weight_stored_bytes`)."""
        return self.weight_element_bytes if self.weight_stored_bytes is None else self.weight_stored_bytes


RECIPES: dict[str, QuantRecipe] = {
    # TE DelayedScaling: the cast kernel takes the scale from the amax history and records the new amax.
    "fp8": QuantRecipe("fp8", 1.0, 1.0, amax_pass=False, block_scaled=False),
    # TE Float8CurrentScaling: nvte_compute_amax, then the scale, then the cast.
    "fp8_cs": QuantRecipe("fp8_cs", 1.0, 1.0, amax_pass=True, block_scaled=False),
    # TE Float8BlockScaling (DeepSeek-V3, arXiv:2412.19437 section 3.3): 1x128 activations, 128x128 weights,
    # FP32 scales.
    "fp8_blockwise": QuantRecipe("fp8_blockwise", 1.0 + 4 / 128, 1.0 + 4 / (128 * 128), False, True),
    # TE MXFP8BlockScaling (OCP MX v1.0): E4M3 data, one E8M0 scale per 1x32 block.
    "mxfp8": QuantRecipe("mxfp8", 1.0 + 1 / 32, 1.0 + 1 / 32, amax_pass=False, block_scaled=True),
    # TE NVFP4BlockScaling (arXiv:2509.25149): E2M1 data (half a byte), one E4M3 scale per 1x16 block; weights in
    # 16x16 blocks; FP32 tensor scales (4 bytes a tensor, left out).
    "nvfp4": QuantRecipe(
        "nvfp4",
        0.5 + 1 / 16,
        0.5 + 1 / 256,
        amax_pass=True,
        block_scaled=True,
        separate_columnwise_pass=True,
        weight_two_d=True,
        weight_stored_bytes=0.5 + 1 / 16,
    ),  # fmt: skip
}
LOW_PRECISIONS = frozenset(_LOW_PRECISIONS)
assert LOW_PRECISIONS == frozenset(RECIPES), "every low precision of the specs has a quantisation recipe"

WEIGHT_CAST_ONCE_PER_STEP_FRAMEWORKS = frozenset({"megatron-lm", "nemo-megatron"})
"""Frameworks whose quantised weights are cast once per step and cached over the micro-batches: megatron-core's
schedules call `set_is_first_microbatch()` on the first micro-batch and its TE layers pass `is_first_microbatch`
to Transformer Engine, which keeps the weights' casts and transposes for the following micro-batches (unless
`--disable-parameter-transpose-cache`). Others (torchtitan's torchao Float8Linear) cast the weights in every
forward."""


def recipe_of(precision: str) -> QuantRecipe | None:
    """The recipe of a GEMM precision; None for 16- and 32-bit GEMMs."""
    return RECIPES.get(precision)


def needs_columnwise_copy(recipe: QuantRecipe, any_layout_fp8: bool) -> bool:
    """Whether the transposed operand is a copy of its own: block-scaled always, per-tensor FP8 where the GPU's
    FP8 GEMMs are TN only (`any_layout_fp8` False: Hopper)."""
    return recipe.block_scaled or not any_layout_fp8


def quantized_weight_bytes(recipe: QuantRecipe, elements: float, any_layout_fp8: bool) -> float:
    """Bytes of one stored quantised copy of a weight of `elements` with both usages a training GEMM needs: the
    row-wise data of the forward GEMM and, for the input-gradient GEMM, the column-wise data where it is a copy of
    its own (`needs_columnwise_copy`: Float8Tensor keeps `_transpose` beside `_data` on Hopper only, TE
    float8_tensor_storage.py `update_usage` under `is_non_tn_fp8_gemm_supported`; MXFP8, NVFP4 and blockwise
    tensors hold `rowwise_data` and `columnwise_data`). What a TE linear's cached weight workspace holds
    (module/base.py `get_weight_workspace`) and what a quantised primary weight holds (`--fp8-param-gather`)."""
    copies = 2 if needs_columnwise_copy(recipe, any_layout_fp8) else 1
    return elements * copies * recipe.stored_weight_bytes


def activation_quantize_bytes(recipe: QuantRecipe, elements: float, any_layout_fp8: bool) -> float:
    """Bytes moved to quantise a 16-bit activation or output gradient of `elements` for a linear's GEMMs: the
    row-wise copy (forward / input-gradient GEMM) and the column-wise one (weight-gradient GEMM)."""
    copies = 2 if needs_columnwise_copy(recipe, any_layout_fp8) else 1
    reads = 1 + recipe.amax_pass + (recipe.separate_columnwise_pass and copies == 2)
    return elements * (reads * SOURCE_BYTES + copies * recipe.element_bytes)


def activation_quantize_kernels(recipe: QuantRecipe, any_layout_fp8: bool) -> int:
    """Kernel launches of one activation's quantisation (`activation_quantize_bytes`)."""
    copies = 2 if needs_columnwise_copy(recipe, any_layout_fp8) else 1
    return 1 + recipe.amax_pass + (recipe.separate_columnwise_pass and copies == 2)


def weight_quantize_bytes(recipe: QuantRecipe, elements: float, any_layout_fp8: bool) -> float:
    """Bytes moved to quantise a 16-bit weight of `elements` for the forward GEMM and the transposed one of the
    input gradient (2D blocks: one cast writes both orientations; TE casts weights without an RHT)."""
    copies = 2 if needs_columnwise_copy(recipe, any_layout_fp8) else 1
    reads = 1 + recipe.amax_pass
    return elements * (reads * SOURCE_BYTES + copies * recipe.weight_element_bytes)


def weight_transpose_bytes(recipe: QuantRecipe, elements: float, any_layout_fp8: bool) -> float:
    """Bytes moved to make the column-wise copy of a quantised weight of `elements` from its row-wise data where it is
    a copy of its own (`needs_columnwise_copy`): one transpose, one read and one write (TE `tex.fp8_transpose`,
    float8_tensor_storage.py `_create_transpose`; float8_blockwise_tensor_storage.py `_create_columnwise` for 2D
    blocks). 0 where one copy serves both GEMMs."""
    if not needs_columnwise_copy(recipe, any_layout_fp8):
        return 0.0
    return 2 * recipe.weight_element_bytes * elements


def primary_weight_cast_bytes(recipe: QuantRecipe, elements: float) -> float:
    """Bytes moved to cast `elements` of the distributed optimizer's fp32 main shard into quantised primary weights
    (`TrainingSpec.gathers_quantized_weights`), beyond the 16-bit copy of the step: TE 2.9 tensor/utils.py
    `cast_master_weights_to_fp8` first casts the master shard to the weight's 16-bit dtype (`master_weight.to(
    model_weight.dtype)`, the copy the step makes of every parameter, `cost.offload.adam_bytes_per_param`), then reads
    it for its amax where the scale needs one over the shard (current scaling's `tex.compute_amax`, blockwise's
    `fp8_block_scaling_compute_partial_amax`; delayed scaling casts with its history's scale), then casts it into the
    row-wise data alone (the transposes are reset, remade after the all-gather: `weight_transpose_bytes`)."""
    amax_read = recipe.amax_pass or recipe.block_scaled
    return elements * ((1 + amax_read) * SOURCE_BYTES + recipe.weight_element_bytes)


AMAX_BYTES = 4
"""One fp32 amax."""
WEIGHT_BLOCK_ELEMENTS = 128 * 128
"""Elements of a 2D weight block of Float8 blockwise scaling (one amax and one scale each)."""


def primary_weight_amax_bytes(recipe: QuantRecipe, elements: float) -> float:
    """Bytes of the amax all-reduce (MAX over the data-parallel group) with which `cast_master_weights_to_fp8` makes
    the scales of `elements` quantised primary weights agree across the ranks that each cast a shard: one fp32 per
    128x128 block of every weight under blockwise scaling (`packed_amaxes`, sized by the weights' scale shapes);
    one per weight tensor under per-tensor scaling, a few hundred floats, costed as one message of one (its latency)."""
    if recipe.block_scaled:
        return AMAX_BYTES * elements / WEIGHT_BLOCK_ELEMENTS
    return float(AMAX_BYTES)


__all__ = [
    "LOW_PRECISIONS",
    "RECIPES",
    "WEIGHT_CAST_ONCE_PER_STEP_FRAMEWORKS",
    "QuantRecipe",
    "activation_quantize_bytes",
    "activation_quantize_kernels",
    "primary_weight_amax_bytes",
    "primary_weight_cast_bytes",
    "quantized_weight_bytes",
    "recipe_of",
    "weight_quantize_bytes",
    "weight_transpose_bytes",
]
