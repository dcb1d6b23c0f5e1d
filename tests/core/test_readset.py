"""`paraplan.readset`: the declared read-set of `projection._dp_times` is complete (inputs with equal keys give equal
results, over variations of every field of the training spec and of every other argument) and each declared read
is needed (dropping it lets two inputs of different results share a key: the memo would go stale)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import pytest

from paraplan.cost.calibration import calibration_for
from paraplan.cost.comm import place_group
from paraplan.cost.profiled import shipped_ref
from paraplan.graph.ops import CommAxis
from paraplan.projection import (
    DP_TIMES_READS,
    _dp_times_logged,
    _dp_times_memo,
)
from paraplan.readset import ReadSet, ReadSetMemo
from paraplan.specs.presets import system_preset
from paraplan.specs.schedule import SCHEDULES
from paraplan.specs.training import (
    ATTENTION_BACKENDS,
    CUDA_GRAPH_SCOPES,
    DDP_IMPLS,
    DISPATCHERS,
    FRAMEWORKS,
    RECOMPUTE_METHODS,
    RECOMPUTES,
    TRAINING_PRECISIONS,
    TrainingSpec,
)  # fmt: skip

DTYPES = ("fp32", "fp16", "bf16")
# alternatives of every TrainingSpec field (a new field must be added here: the read-set is checked against it)
TRAIN_VALUES: dict[str, tuple[Any, ...]] = {
    "tensor_model_parallel_size": (1, 2, 8),
    "pipeline_model_parallel_size": (1, 4),
    "virtual_pipeline_model_parallel_size": (1, 2),
    "context_parallel_size": (1, 2),
    "expert_model_parallel_size": (1, 4, 8),
    "expert_tensor_parallel_size": (None, 1, 2),
    "data_parallel_size": (None, 8, 64),
    "micro_batch_size": (1, 2),
    "global_batch_size": (64, 512),
    "seq_length": (2048, 8192),
    "sequence_parallel": (False, True),
    "recompute_granularity": RECOMPUTES,
    "recompute_num_layers": (None, 2),
    "recompute_method": RECOMPUTE_METHODS,
    "recompute_modules": (None, ("core_attn", "mlp")),
    "recompute_layer_ids": (None, (0, 1)),
    "use_distributed_optimizer": (False, True),
    "zero_stage": (0, 1, 2, 3),
    "fsdp": (False, True),
    "overlap_grad_reduce": (False, True),
    "overlap_param_gather": (False, True),
    "ddp_impl": DDP_IMPLS,
    "ddp_bucket_size": (None, 10_000_000, 200_000_000),
    "tp_comm_overlap": (False, True),
    "tp_async_backward": (True, False),
    "moe_ep_overlap": (False, True),
    "moe_pad_expert_input_to_capacity": (False, True),
    "moe_expert_capacity_factor": (None, 1.5),
    "moe_token_dispatcher_type": DISPATCHERS,
    "precision": TRAINING_PRECISIONS,
    "first_last_layers_bf16": (False, True),
    "num_layers_at_start_in_bf16": (1, 2),
    "num_layers_at_end_in_bf16": (1, 2),
    "fp8_param_gather": (False, True),
    "attention_backend": ATTENTION_BACKENDS,
    "kernel_fusion": (True, False),
    "cross_entropy_fusion": (False, True),
    "loss_compiled": (False, True),
    "pipeline_schedule": tuple(SCHEDULES),
    "decoder_first_pipeline_num_layers": (None, 3),
    "decoder_last_pipeline_num_layers": (None, 3),
    "pipeline_layout": (None, (4, 4)),
    "account_for_embedding_in_pipeline_split": (False, True),
    "account_for_loss_in_pipeline_split": (False, True),
    "grad_reduce_in_fp32": (True, False),
    "use_precision_aware_optimizer": (False, True),
    "main_params_dtype": DTYPES,
    "main_grads_dtype": DTYPES,
    "exp_avg_dtype": DTYPES,
    "exp_avg_sq_dtype": DTYPES,
    "optimizer_cpu_offload": (False, True),
    "optimizer_offload_fraction": (1.0, 0.5),
    "cpu_offloading_num_layers": (0, 2),
    "cuda_graph_scope": CUDA_GRAPH_SCOPES,
    "expandable_segments": (False, True),
    "fsdp_float8_all_gather": (False, True),
    "framework": FRAMEWORKS,
}


def _other_values() -> dict[str, tuple[Any, ...]]:
    """Alternatives of the functions' other arguments (the held ones: distinct objects)."""
    gh200, h100 = system_preset("gh200", 1024), system_preset("h100-sxm5-80gb", 1024)
    cal = calibration_for("gh200", "megatron-lm")
    return {
        "dense_params": (1e9, 3.5e9),
        "expert_params": (0.0, 2e9),
        "system": (gh200, h100),
        "cal": (cal, replace(cal, scale_out_efficiency=cal.scale_out_efficiency * 0.9)),
        "groups": ({CommAxis.DP: place_group(64, 8, 4)}, {CommAxis.DP: place_group(16, 1, 4)}),
        "fsdp_units": (1, 4),
        "timer": (None, shipped_ref("gh200")),
        "float8_params": (0.0, 5e8),
        "quantized_expert_params": (0.0, 1e9),
        "sources": (None, {}),
    }


def _inputs(params: tuple[str, ...], seed: int = 0, bases: int = 24) -> list[dict[str, Any]]:
    """Random inputs, and each one with one value changed (every alternative of every field and argument)."""
    rng = random.Random(seed)
    values = TRAIN_VALUES | {name: v for name, v in _other_values().items() if name in params}
    out = []
    for _ in range(bases):
        base = {name: rng.choice(alternatives) for name, alternatives in values.items()}
        out.append(base)
        for name, alternatives in values.items():
            out += [{**base, name: value} for value in alternatives if value is not base[name]]
    return out


# the memoized functions and their declared read-sets
MEMOS = {"dp_times": (_dp_times_logged, DP_TIMES_READS)}


def _call(function: Callable[..., Any], reads: ReadSet, inputs: dict[str, Any]) -> tuple[list[Any], Any]:
    train = TrainingSpec(**{name: inputs[name] for name in TRAIN_VALUES})
    args = [train if name == "train" else inputs[name] for name in reads.params]
    if reads.params[-1] == "sources" and args[-1] is not None:
        args[-1] = {}  # a fresh dict per call
    return args, function(*args)


@pytest.fixture(scope="module", params=list(MEMOS))
def memo(request: pytest.FixtureRequest) -> tuple[ReadSet, list[tuple[list[Any], Any]]]:
    function, reads = MEMOS[request.param]
    return reads, [_call(function, reads, inputs) for inputs in _inputs(reads.params)]


def _stale(reads: ReadSet, calls: list[tuple[list[Any], Any]]) -> int:
    """Keys (with the held arguments' identities) under which the inputs' results differ."""
    results: dict[tuple[Any, ...], set[str]] = {}
    for args, result in calls:
        key = (reads.key(args), tuple(map(id, reads.held_objects(args))))
        results.setdefault(key, set()).add(repr(result))
    return sum(len(found) > 1 for found in results.values())


def test_every_training_field_is_varied() -> None:
    assert set(TRAIN_VALUES) == {f.name for f in fields(TrainingSpec)}


def test_the_read_set_is_complete(memo: tuple[ReadSet, list[tuple[list[Any], Any]]]) -> None:
    reads, calls = memo
    assert _stale(reads, calls) == 0


def test_each_read_is_needed(memo: tuple[ReadSet, list[tuple[list[Any], Any]]]) -> None:
    reads, calls = memo
    unneeded = [f"{param}.{label}" for param, label in reads.labels() if not _stale(reads.without(param, label), calls)]
    assert not unneeded, f"declared reads never needed (or not varied by the test): {unneeded}"


def test_the_memo_gives_the_function_s_results(memo: tuple[ReadSet, list[tuple[list[Any], Any]]]) -> None:
    """Through the memo, cold and warm: the same results (the data-parallel records in the same order)."""
    reads, calls = memo
    _dp_times_memo.cache_clear()
    for _ in range(2):
        for args, result in calls[:400]:
            assert repr(_dp_times_memo(*args)) == repr(result)


def test_memo_holds_objects_by_identity() -> None:
    memo = ReadSetMemo(lambda box, n: (box[0], n), ReadSet(("box", "n"), held=("box",)))
    first, second = [1], [2]
    assert memo(first, 3) == (1, 3) and memo(second, 3) == (2, 3) and memo(first, 3) == (1, 3)
    assert memo.misses == 2
    memo.cache_clear()
    assert memo(first, 3) == (1, 3) and memo.misses == 3
    with pytest.raises(ValueError, match="unknown"):
        ReadSet(("a",), reads={"b": ("x",)})
