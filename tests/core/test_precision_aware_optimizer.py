"""Megatron's precision-aware optimizer (`--use-precision-aware-optimizer` with `--main-params-dtype`,
`--main-grads-dtype`, `--exp-avg-dtype`, `--exp-avg-sq-dtype`): the optimizer's bytes per parameter follow the
dtypes, and a non-fp32 dtype without the switch is refused, as Megatron-LM refuses it."""

from __future__ import annotations

import pytest

from paraplan.api import memory
from paraplan.errors import ConfigError
from paraplan.formats import read_config

COMMON = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=8, tp=2, pp=1, mbs=1, gbs=8, seq=4096)


def test_bf16_moments_shrink_the_optimizer_by_the_moments_bytes() -> None:
    plain = memory(**COMMON, use_distributed_optimizer=True).peak.parts
    aware = memory(
        **COMMON, use_distributed_optimizer=True, use_precision_aware_optimizer=True,
        exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16",
    ).peak.parts  # fmt: skip
    assert aware["optimizer"] / plain["optimizer"] == pytest.approx((4 + 2 + 2) / 12)
    assert aware["gradients"] == plain["gradients"]  # main grads stay fp32


def test_bf16_main_grads_halve_the_gradient_buffer() -> None:
    plain = memory(**COMMON, use_distributed_optimizer=True).peak.parts
    aware = memory(
        **COMMON, use_distributed_optimizer=True, use_precision_aware_optimizer=True, main_grads_dtype="bf16"
    ).peak.parts
    assert aware["gradients"] == pytest.approx(plain["gradients"] / 2)
    assert aware["optimizer"] == pytest.approx(plain["optimizer"])


def test_switch_on_with_fp32_dtypes_changes_nothing() -> None:
    plain = memory(**COMMON, use_distributed_optimizer=True).peak.total_bytes
    aware = memory(**COMMON, use_distributed_optimizer=True, use_precision_aware_optimizer=True).peak.total_bytes
    assert aware == plain


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"exp_avg_dtype": "bf16"}, "needs use_precision_aware_optimizer"),
        ({"use_precision_aware_optimizer": True, "main_params_dtype": "bf16"}, "unknown main_params_dtype"),
    ],
)
def test_bad_dtypes_are_refused(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        memory(**COMMON, **values)


def test_megatron_args_reader_and_writer(tmp_path) -> None:
    args = tmp_path / "args.txt"
    args.write_text(
        "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
        "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm "
        "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
        "--vocab-size 128256 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
        "--global-batch-size 8 --bf16 --tensor-model-parallel-size 2 --use-distributed-optimizer "
        "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --main-grads-dtype bf16\n"
    )
    _, train, _ = read_config(args, "megatron", num_gpus=8, env={})
    assert train.use_precision_aware_optimizer
    assert (train.main_params_dtype, train.main_grads_dtype, train.exp_avg_dtype, train.exp_avg_sq_dtype) == (
        "fp32", "bf16", "bf16", "bf16",
    )  # fmt: skip
