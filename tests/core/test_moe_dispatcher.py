"""Megatron's flex MoE token dispatcher (DeepEP / HybridEP): a token crosses NVLink once per destination rank and
the network once per destination node, where the alltoall dispatcher sends one copy per chosen expert."""

from __future__ import annotations

from itertools import combinations
from math import comb

import pytest

from paraplan.cost.calibration import Calibration
from paraplan.cost.comm import _flex_dispatch_bytes, collective_time_s, hit_probability, place_group
from paraplan.errors import ConfigError
from paraplan.formats.megatron import read_megatron
from paraplan.graph import layers as L
from paraplan.graph.backward import backward_ops
from paraplan.graph.ops import CommKind
from paraplan.memory.model import GIB, deepep_buffer_bytes
from paraplan.projection import project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

QWEN3_235B = model_preset("qwen3-235b-a22b")  # 128 experts, top-8
H100_256 = system_preset("h100-sxm5-80gb", 256)


def test_hit_probability_counts_the_expert_sets_that_touch_a_rank() -> None:
    experts, topk, share = 8, 3, 2  # the rank holds experts 0 and 1
    touching = sum(1 for picked in combinations(range(experts), topk) if {0, 1} & set(picked))
    assert hit_probability(experts, topk, share) == pytest.approx(touching / comb(experts, topk))
    assert hit_probability(128, 8, 128) == 1.0
    assert hit_probability(128, 1, 16) == pytest.approx(16 / 128)


def test_flex_sends_a_token_once_per_rank_inside_a_node() -> None:
    group = place_group(8, 1, 8)  # ep8 on one 8-GPU node
    nbytes = 8.0 * 1e6  # top-8 copies of 1 MB of tokens
    nvlink, network = _flex_dispatch_bytes(nbytes, (128, 8), group)
    distinct_others = 7 * hit_probability(128, 8, 16)  # 16 experts per rank: 4.67 ranks for 7 alltoall copies
    assert nvlink == pytest.approx(1e6 * distinct_others)
    assert network == 0.0
    assert distinct_others == pytest.approx(4.67, abs=0.01)


def test_flex_sends_a_token_once_per_node_across_nodes() -> None:
    group = place_group(32, 1, 8)  # ep32 over 4 nodes (Qwen3-235B on H100, Megatron-Bridge)
    assert (group.per_node, group.nodes) == (8, 4)
    nbytes = 8.0 * 1e6
    _, network = _flex_dispatch_bytes(nbytes, (128, 8), group)
    alltoall_network = nbytes * (32 - 8) / 32  # 6 of the 8 copies leave the node
    assert network == pytest.approx(1e6 * 3 * hit_probability(128, 8, 32))
    assert network / alltoall_network == pytest.approx(0.45, abs=0.01)
    cal = Calibration()
    flex = collective_time_s(CommKind.ALL_TO_ALL, 64e6, group, H100_256, cal, routing=(128, 8))
    plain = collective_time_s(CommKind.ALL_TO_ALL, 64e6, group, H100_256, cal)
    assert flex < 0.5 * plain


def _train(dispatcher: str) -> TrainingSpec:
    return TrainingSpec(
        tensor_model_parallel_size=2,
        pipeline_model_parallel_size=8,
        virtual_pipeline_model_parallel_size=4,
        pipeline_schedule="interleaved",
        expert_model_parallel_size=32,
        expert_tensor_parallel_size=1,
        sequence_parallel=True,
        global_batch_size=2048,
        seq_length=4096,
        use_distributed_optimizer=True,
        precision="fp8_cs",
        moe_token_dispatcher_type=dispatcher,
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
    )


def test_backward_keeps_the_routing_of_the_dispatch() -> None:
    ops = L.moe_ops(QWEN3_235B, L.Shard.of(_train("flex")))
    dispatch = next(op for op in ops if op.name == "ep_dispatch")
    assert dispatch.comm is not None and dispatch.comm.routing == (128, 8)
    (back,) = backward_ops(dispatch)
    assert back.comm is not None and back.comm.routing == (128, 8)
    plain = next(op for op in L.moe_ops(QWEN3_235B, L.Shard.of(_train("alltoall"))) if op.name == "ep_dispatch")
    assert plain.comm is not None and plain.comm.routing is None


def test_flex_shortens_an_ep_bound_step_and_adds_deepep_buffers() -> None:
    flex = project_specs(QWEN3_235B, H100_256, _train("flex"))
    plain = project_specs(QWEN3_235B, H100_256, _train("alltoall"))
    assert flex.breakdown["ep_comm_exposed"] < 0.6 * plain.breakdown["ep_comm_exposed"]
    assert flex.step_time_s < 0.85 * plain.step_time_s
    extra = flex.memory.ranks[0].parts["communication_buffers"] - plain.memory.ranks[0].parts["communication_buffers"]
    assert extra == pytest.approx(deepep_buffer_bytes(QWEN3_235B.hidden_size, 32))
    assert 0.1 * GIB < extra < 1 * GIB  # DeepEP's NVLink + RDMA queues at hidden 4096


def test_unknown_dispatcher_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown MoE token dispatcher 'deepep'"):
        project_specs(QWEN3_235B, H100_256, _train("deepep"))


@pytest.mark.parametrize(
    "flags",
    ["--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep", "--moe-enable-deepep"],
)
def test_megatron_arguments_select_the_flex_dispatcher(flags: str) -> None:
    args = (
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --max-position-embeddings 2048 "
        "--micro-batch-size 1 --global-batch-size 8 --num-experts 8 --moe-router-topk 2 "
        f"--expert-model-parallel-size 8 --bf16 {flags}"
    )
    assert read_megatron(args, num_gpus=8).train.moe_token_dispatcher_type == "flex"
