"""Published layouts that ran, projected as published (issue 33): each part against the closed form of what the
framework allocates, and the FITS/OOM verdict with the reason.

- Llama 3.1 405B as Meta trained it (arXiv 2407.21783 section 3.3.2: TP8 PP16 CP1 at 8k tokens, 16M tokens a
  step, one layer fewer on the first and last stage, no activation checkpointing, FSDP sharding the optimizer
  states and gradients with the parameters not resharded after forward = torch FSDP SHARD_GRAD_OP, `--zero 2`).
- AMD Primus recipes on MI355X (Megatron-LM backend, distributed optimizer, overlapped gradient reduce and
  parameter gather, as `tests/formats/data/primus/exp_base.yaml`): Mixtral 8x22B (tp1 pp4 ep8, mbs 2, seq 8192)
  and Qwen3-235B-A22B (tp1 pp1 cp4 ep8, mbs 2, gbs 1024, FP8). As stated they hold more than the GPU: the tests
  pin the parts to megatron-core's allocations, so what the recipes must have set beyond what is stated (recompute,
  sharded parameters) shows in the numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from paraplan.api import memory
from paraplan.errors import ConfigError
from paraplan.memory.model import GIB, zero2_unsharded_grad_params
from paraplan.specs.training import TrainingSpec

# Llama 3.1 405B (HF config): hidden 16384, 128 heads of 128, 8 KV heads, FFN 53248, 126 layers.
H, Q_WIDTH, KV_WIDTH, FFN, TP = 16384, 128 * 128, 8 * 128, 53248, 8
LAYER_PARAMS_405B = (H * (Q_WIDTH + 2 * KV_WIDTH) + Q_WIDTH * H + 3 * H * FFN) // TP  # GEMM weights per GPU
META_405B = dict(
    model="llama3.1-405b", gpu="h100-sxm5-80gb", gpus=16384, tp=8, pp=16, seq=8192, mbs=1, gbs=2048, sp=True,
    overlap_grad_reduce=True, overlap_param_gather=True,
    decoder_first_pipeline_num_layers=7, decoder_last_pipeline_num_layers=7,
)  # fmt: skip
DP_405B = 16384 // (8 * 16)


def test_405b_meta_layout_fits_with_sharded_gradients() -> None:
    result = memory(**META_405B, zero_stage=2)
    assert result.fits, result.to_dict()
    parts = result.peak.parts
    assert result.peak.rank == 1  # 8 layers and 15 micro-batches in flight (rank 0: 7 layers, 16, the embedding)
    stage = 8 * LAYER_PARAMS_405B
    assert parts["weights"] == pytest.approx(2 * stage)  # bf16, gathered: not resharded after forward
    # fp32 gradients (Llama 3 section 3.3.4: reduce-scattered in fp32): the shard, and two layers' in flight
    assert parts["gradients"] == pytest.approx(4 * (stage / DP_405B + 2 * LAYER_PARAMS_405B))
    assert parts["optimizer"] == pytest.approx(12 * stage / DP_405B)


def test_405b_with_megatrons_distributed_optimizer_is_over_by_its_fp32_gradient_buffer() -> None:
    """Megatron's distributed optimizer keeps the whole stage's fp32 main gradients (its grad buffer): 11.9 GiB
    where ZeRO-2 keeps 3.1; the activations are the same."""
    dist_opt = memory(**META_405B, use_distributed_optimizer=True)
    zero2 = memory(**META_405B, zero_stage=2)
    assert not dist_opt.fits
    assert dist_opt.peak.parts["gradients"] == pytest.approx(4 * 8 * LAYER_PARAMS_405B)
    assert dist_opt.peak.parts["activations"] == zero2.peak.parts["activations"]
    gap = dist_opt.peak.total_bytes - zero2.peak.total_bytes
    assert gap == pytest.approx(dist_opt.peak.parts["gradients"] - zero2.peak.parts["gradients"])


def test_zero2_unsharded_gradients_closed_form() -> None:
    train = TrainingSpec(zero_stage=2)
    assert zero2_unsharded_grad_params(train, 1e9) == 2e9
    assert zero2_unsharded_grad_params(train.with_values(framework="deepspeed"), 1e9) == 0.0  # its own bucket
    assert zero2_unsharded_grad_params(TrainingSpec(use_distributed_optimizer=True), 1e9) == 0.0
    assert zero2_unsharded_grad_params(TrainingSpec(zero_stage=3, fsdp=True), 1e9) == 0.0


def test_deepspeed_still_refuses_zero2_with_pipeline_stages() -> None:
    with pytest.raises(ConfigError, match="DeepSpeed ZeRO-2 cannot be combined with pipeline parallelism"):
        memory(**{**META_405B, "framework": "deepspeed"}, zero_stage=2)


# Mixtral 8x22B (HF config): hidden 6144, 48 heads of 128, 8 KV heads, 8 experts of 16384, top-2, 56 layers.
MIXTRAL = dict(
    model="mixtral-8x22b", gpu="mi355x", gpus=64, tp=1, pp=4, ep=8, mbs=2, seq=8192, precision="bf16",
    use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True,
)  # fmt: skip


def mixtral_layer_saved_bytes(tokens: int) -> float:
    """What one megatron-core Mixtral layer (TE spec, flash attention, alltoall dispatcher, grouped GEMM, fused
    SwiGLU) keeps for backward, tensor by tensor (bf16 unless named)."""
    h, heads, kv, d, k, ffn = 6144, 48, 8, 128, 2, 16384
    attention = (
        2 * tokens * h  # input_layernorm input (TELayerNormColumnParallelLinear saves inputmat)
        + 2 * tokens * h  # its normed output, the QKV GEMM's input (ln_out, for wgrad)
        + 2 * tokens * (heads + 2 * kv) * d  # Q (rotated), K (rotated), V: flash attention's inputs
        + 2 * tokens * heads * d  # attention output (flash's `out`, the projection's input)
        + 4 * tokens * heads  # fp32 log-sum-exp per query row and head
    )
    moe = (
        2 * tokens * h  # pre_mlp_layernorm input
        + 2 * tokens * h  # its output: the router GEMM's input
        + 2 * tokens * k * h  # permuted tokens after the dispatch: the grouped fc1's input
        + 2 * tokens * k * 2 * ffn  # fc1 output: the fused (weighted) SwiGLU's input
        + 2 * tokens * k * ffn  # SwiGLU output: the grouped fc2's input
        + 4 * tokens * k  # fp32 routing probabilities of the routed copies
    )
    return attention + moe


def test_mixtral_8x22b_primus_as_published_parts_are_megatrons_and_do_not_fit() -> None:
    result = memory(**MIXTRAL, gbs=256)
    parts = result.peak.parts
    assert result.peak.rank == 0
    # rank 0: 14 layers, 4 micro-batches in flight under 1F1B (the embedding saves nothing)
    assert parts["activations"] == pytest.approx(4 * 14 * mixtral_layer_saved_bytes(2 * 8192), rel=1e-6)
    states = parts["weights"] + parts["gradients"] + parts["optimizer"]
    assert parts["gradients"] == pytest.approx(2 * parts["weights"])  # fp32 main grads beside bf16 weights
    # the activations alone are over what the states leave of the usable HBM, by ~20%
    assert parts["activations"] > result.usable_bytes - states
    assert not result.fits
    assert 250 * GIB < parts["activations"] < 260 * GIB


def test_mixtral_memory_does_not_depend_on_the_global_batch_beyond_micro_batches_in_flight() -> None:
    a, b = memory(**MIXTRAL, gbs=256).peak, memory(**MIXTRAL, gbs=1024).peak
    assert a.total_bytes == b.total_bytes  # 8 or 32 micro-batches a step: 4 in flight on rank 0 either way


def test_mixtral_8x22b_primus_as_a_measured_run_takes_the_memory_saver_it_must_have_used(public_csv: Path) -> None:
    """The published run leaves recompute unstated and ran: projected as a measured run (the path of public.csv's
    rows, `validate.savers`), it is not called OOM but takes the first memory saver that fits, named among its
    assumptions; the layout as stated (no recompute) stays OOM above."""
    from paraplan.projection import project_specs
    from paraplan.validate.measured import read_rows, run_from_row
    from paraplan.validate.savers import SAVER_KEY, memory_saver_for

    row = dict.fromkeys(read_rows(public_csv)[0], "")  # public.csv's columns, blank but for the published ones
    row.update(
        id="primus-mixtral-8x22b-mi355x", source="AMD Primus MI355X recipe (issue 33)", model="Mixtral 8x22B",
        model_preset="mixtral-8x22b", arch="mixtral", num_layers="56", hidden="6144", ffn_hidden="16384",
        num_heads="48", num_kv_heads="8", vocab="32768", num_experts="8", topk="2", gpu="MI355X", gpu_preset="mi355x",
        num_gpus="64", tp="1", pp="4", ep="8", mbs="2", gbs="256", seq_len="8192", precision="bf16", zero="1",
        framework="primus", metric="tokens_per_sec_per_gpu", value="1", complete="1",
    )  # fmt: skip
    run = run_from_row(row)
    assert run.train.framework == "megatron-lm"  # Primus's Megatron-LM backend
    assert not project_specs(run.model, run.system, run.train).memory.fits
    saved = memory_saver_for(run)
    assert saved is not None
    assert project_specs(saved.model, saved.system, saved.train).memory.fits
    assert [a.key for a in saved.defaults_used].count(SAVER_KEY) == 1


QWEN3 = dict(
    model="qwen3-235b-a22b", gpu="mi355x", gpus=32, tp=1, pp=1, cp=4, ep=8, mbs=2, gbs=1024, seq=4096,
    precision="fp8", use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True,
)  # fmt: skip


def test_qwen3_235b_primus_as_published_states_alone_exceed_the_gpu() -> None:
    """pp 1: every layer's weights on each GPU (the dense ones, 1/8 of the experts): bf16 weights, fp32 main
    gradients and the sharded 12 bytes of the distributed optimizer are more than the usable HBM before any
    activation, so the published run must have sharded the parameters (FSDP) or the gradients."""
    result = memory(**QWEN3)
    parts = result.peak.parts
    params = parts["weights"] / 2
    assert parts["gradients"] == pytest.approx(4 * params)
    states = parts["weights"] + parts["gradients"] + parts["optimizer"]
    assert states > result.usable_bytes
    assert not result.fits
    assert memory(**{**QWEN3, "use_distributed_optimizer": False}, fsdp=True).fits


def test_the_search_keeps_zero2_to_one_pipeline_stage() -> None:
    from paraplan.tune.space import _searched_sharding

    assert _searched_sharding("zero2", 1) and not _searched_sharding("zero2", 2)
    assert _searched_sharding("dist_opt", 16) and _searched_sharding("fsdp", 4)
