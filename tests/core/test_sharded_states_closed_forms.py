"""Sharded states against the closed form of what the framework allocates (issue 33): DeepSpeed ZeRO-3's partitions,
kept tail and gradient bucket (`memory.zero3`), and torch FSDP2's unsharded gradients, which live in the backward,
not at the loss."""

from __future__ import annotations

import pytest

from paraplan.api import memory
from paraplan.memory.zero3 import (
    ZERO3_PREFETCH_PARAMS,
    ZERO3_REDUCE_BUCKET_PARAMS,
    kept_tail_params,
    live_params,
)

# Llama 3.1 8B (HF config): hidden 4096, 32 heads of 128, 8 KV heads, FFN 14336, vocabulary 128256, 32 layers.
H, FFN, VOCAB, LAYERS, DP = 4096, 14336, 128256, 32, 8
LAYER = H * (H + 2 * 1024) + H * H + 3 * H * FFN  # GEMM weights of one layer
PARAMS = LAYERS * LAYER + 2 * VOCAB * H  # untied embedding and head (norms: under 1e5 elements, not counted)
COMMON = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=DP, zero_stage=3, fsdp=True, mbs=1, seq=4096, gbs=64)


def test_kept_tail_walks_back_within_the_reuse_distance() -> None:
    assert kept_tail_params([]) == 0.0
    assert kept_tail_params([6e8, 6e8, 6e8]) == 6e8  # the second is 2 x 6e8 = 1.2e9 > 1e9 away: only the first
    assert kept_tail_params([3e8, 1e8, 2e8, 1e8]) == 6e8  # distances 0, 6e8, 8e8 stay; 1.2e9 goes
    assert kept_tail_params([1e8] * 10) == 6e8  # the sixth is 2 x 5e8 = 1e9 away: stays; the seventh 1.2e9: goes
    assert live_params(2e9, 5e8) == 1e9 + ZERO3_PREFETCH_PARAMS  # at most the live limit
    assert live_params(2e9, 1.5e9) == 1.5e9 + ZERO3_PREFETCH_PARAMS  # a larger module is still gathered whole


def test_deepspeed_zero3_llama_8b_parts() -> None:
    """Llama 8B: the head (525M) is the only module kept at the loss (the last down projection is 2 x 525M > 1e9
    away); 16-bit partitions of the parameters and gradients, the 16-bit bucket of 5e8 elements, 12 bytes of fp32
    partition and Adam moments."""
    parts = memory(**COMMON, framework="deepspeed").peak.parts
    head = VOCAB * H
    assert parts["weights"] == pytest.approx(2 * PARAMS / DP + 2 * (head + ZERO3_PREFETCH_PARAMS), rel=1e-4)
    assert parts["gradients"] == pytest.approx(2 * PARAMS / DP + 2 * ZERO3_REDUCE_BUCKET_PARAMS, rel=1e-4)
    assert parts["optimizer"] == pytest.approx(12 * PARAMS / DP, rel=1e-4)


def test_deepspeed_zero3_fp32_training_keeps_no_separate_master() -> None:
    parts = memory(**COMMON, framework="deepspeed", precision="fp32").peak.parts
    assert parts["optimizer"] == pytest.approx(8 * PARAMS / DP, rel=1e-4)
    assert parts["gradients"] == pytest.approx(4 * (PARAMS / DP + ZERO3_REDUCE_BUCKET_PARAMS), rel=1e-4)


def test_fsdp2_unsharded_gradients_are_not_live_at_the_loss() -> None:
    """torchtitan's FSDP2: the root unit (embedding, norm, head) and the last block stay gathered through the loss;
    their 16-bit gradients appear only in the backward, the embedding's after every block's, beside the previous
    block's fp32 reduce-scatter input. The loss's transient (12 bytes per logit past the 4 saved ones without TP) is
    counted beyond the backward's working sets, the unsharded gradients among them."""
    result = memory(**COMMON, framework="torchtitan", recompute_granularity="full")
    parts = result.peak.parts
    gathered = 2 * VOCAB * H + LAYER
    assert parts["weights"] == pytest.approx(4 * PARAMS / DP + 2 * gathered, rel=1e-4)
    in_backward = 2 * (gathered - VOCAB * H) + 4 * LAYER  # the head's and the block's; the reduce-scatter input
    assert parts["gradients"] == pytest.approx(4 * PARAMS / DP + in_backward, rel=1e-4)
    logits = 4096 * VOCAB
    backward = parts["recompute_working_set"] + parts["backward_working_set"] + in_backward
    assert parts["loss_working_set"] == pytest.approx(max(0.0, 8 * logits - backward), rel=1e-6)


def test_fsdp2_under_pp_holds_the_block_in_backward_16bit_gradients() -> None:
    """torchtitan's FSDP2 under PP keeps the stage gathered (`unsharded_params_and_grads`) and accumulates in fp32
    there; in a block's backward its 16-bit gradients are live until its post-backward adds them in: 2 bytes per
    parameter of one block, the gradients' only part beyond the sharded fp32 ones (the weights' only part is theirs)."""
    parts = memory(**{**COMMON, "gpus": 4 * DP}, pp=4, framework="torchtitan").ranks[1].parts
    assert parts["gradients"] - parts["weights"] == pytest.approx(2 * LAYER, rel=1e-6)
