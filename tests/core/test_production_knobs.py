"""The production knobs of issue 36 (recompute by layer and by module, precision-aware optimizer time, drop-and-pad
MoE without the host sync, CUDA graphs, CPU offload of the optimizer and of activations): each moves the projection
in the direction and by the size its mechanism gives, checked against closed forms."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import paraplan
from paraplan.api import memory
from paraplan.cost.block import block_cost
from paraplan.cost.calibration import Calibration
from paraplan.cost.compute import compute_time_s, optimizer_time_s
from paraplan.cost.offload import HOST_ADAM_BYTES_PER_PARAM, HOST_COPY_EFFICIENCY, optimizer_step_s
from paraplan.errors import ConfigError
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.ops import OpKind
from paraplan.memory.activations import FULL_INNER, OFFLOAD, layer_modes
from paraplan.memory.blocks import block_memory
from paraplan.projection import _layer_input_bytes, block_context, stage_costs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check, resolve_dp

LLAMA = model_preset("llama3.1-8b")
H100 = system_preset("h100-sxm5-80gb", 8)
GH200 = system_preset("gh200", 8)
COMMON = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=8, tp=1, pp=1, mbs=1, gbs=8, seq=4096)
CAL = Calibration()


def _train(system=H100, **values: object) -> TrainingSpec:
    values = {"gbs": 8, **values}
    return check(LLAMA, system, resolve_dp(TrainingSpec().with_values(**values), system))


def _dense_block(train: TrainingSpec, mode: str, system=H100, model=LLAMA):
    shard = L.Shard.of(train)
    kind = K.decoder_kind_of(model, 0)
    ops = kind.ops(model, shard)
    ctx = block_context(system, train, CAL)
    input_bytes = _layer_input_bytes(model, shard)
    return ops, block_cost(ops, mode, ctx, input_bytes, block_memory(ops, mode, input_bytes, shard.act_bytes))


# ----------------------------------------------------------------------------- recompute by layer
def test_uniform_runs_keep_one_input_per_run_and_hold_a_run_while_recomputing() -> None:
    """Megatron `--recompute-method uniform --recompute-num-layers 4` on 32 layers: 8 checkpoints, each run of 4
    layers recomputed whole (all four layers' activations live at once); the recompute is the same as every layer
    checkpointed on its own."""
    per_layer = memory(**COMMON, recompute="full").peak.parts
    runs = memory(**COMMON, recompute="full", recompute_method="uniform", recompute_num_layers=4).peak.parts
    shard = L.Shard.of(_train(tp=1, seq=4096))
    layer_input = _layer_input_bytes(LLAMA, shard)
    assert per_layer["activations"] - runs["activations"] == pytest.approx((32 - 8) * layer_input)
    assert runs["recompute_working_set"] == pytest.approx(4 * per_layer["recompute_working_set"])
    t_all = paraplan.project(**COMMON, recompute="full")
    t_runs = paraplan.project(**COMMON, recompute="full", recompute_method="uniform", recompute_num_layers=4)
    # the same recompute; a stage's run heads and inner layers are two launch-queue runs, each starting from an
    # empty queue (`cost.block.repeated_s`): one layer's host run-ahead apart, under 0.1%
    assert t_runs.step_time_s == pytest.approx(t_all.step_time_s, rel=1e-3)


def test_layer_ids_recompute_exactly_those_layers() -> None:
    """Primus's recompute by layer index: k named layers cost what the block method's first k layers cost (a
    uniform model, pp 1), wherever they sit."""
    block = paraplan.project(**COMMON, recompute="full", recompute_num_layers=5)
    first = paraplan.project(**COMMON, recompute="full", recompute_layer_ids=(0, 1, 2, 3, 4))
    spread = paraplan.project(**COMMON, recompute="full", recompute_layer_ids=(3, 9, 17, 25, 31))
    for p in (first, spread):
        assert p.step_time_s == pytest.approx(block.step_time_s)
        assert p.memory.peak.total_bytes == pytest.approx(block.memory.peak.total_bytes)
    none = paraplan.project(**COMMON)
    full = paraplan.project(**COMMON, recompute="full")
    assert none.step_time_s < spread.step_time_s < full.step_time_s
    # the recompute added is 5/32 of full recompute's
    added = spread.step_time_s - none.step_time_s  # (two launch-queue runs instead of one: 1% apart, as above)
    assert added == pytest.approx(5 / 32 * (full.step_time_s - none.step_time_s), rel=1e-2)


def test_layer_modes_follow_the_knobs() -> None:
    assert layer_modes(TrainingSpec()) == ("none", None, None)
    mode, block, per_layer = layer_modes(
        TrainingSpec(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=3)
    )
    assert (mode, block) == ("full", None)
    assert [per_layer.mode_of(mode, i, i) for i in range(4)] == ["full", FULL_INNER, FULL_INNER, "full"]
    _, _, offload = layer_modes(TrainingSpec(cpu_offloading_num_layers=2))
    assert [offload.mode_of("none", i, i) for i in range(3)] == [OFFLOAD, OFFLOAD, "none"]


# ----------------------------------------------------------------------------- recompute by module
def test_recompute_modules_mlp_drops_the_mlp_inside_and_redoes_its_forward() -> None:
    train = _train(tp=1, seq=4096, recompute="selective", recompute_modules=("mlp",))
    ops, none = _dense_block(train, "none")
    _, mlp = _dense_block(train, "selective:mlp")
    members = [op for op in ops if op.name.startswith("mlp_") and op.name not in ("mlp_norm", "mlp_residual")]
    assert members[0].name == "mlp_up"
    assert none.saved_bytes - mlp.saved_bytes == pytest.approx(sum(op.saved_bytes for op in members[1:]))
    gemm_flops = sum(op.flops for op in members if op.kind is OpKind.GEMM)
    assert mlp.recompute_flops == pytest.approx(gemm_flops)
    assert gemm_flops == pytest.approx(2 * 4096 * LLAMA.hidden_size * LLAMA.ffn_hidden_size * 3)  # gate, up, down
    p_none = paraplan.project(**COMMON, recompute="selective")
    p_mlp = paraplan.project(**COMMON, recompute="selective", recompute_modules=["mlp"])
    assert p_mlp.step_time_s > p_none.step_time_s
    assert p_mlp.memory.peak.parts["activations"] < p_none.memory.peak.parts["activations"]


def test_recompute_modules_core_attn_alone_is_megatrons_selective() -> None:
    a = paraplan.project(**COMMON, recompute="selective", attention_backend="unfused")
    b = paraplan.project(**COMMON, recompute="selective", recompute_modules="core_attn", attention_backend="unfused")
    assert a.step_time_s == b.step_time_s and a.memory.peak.total_bytes == b.memory.peak.total_bytes


def test_layernorm_discards_the_norm_outputs() -> None:
    train = _train(tp=1, seq=4096, recompute="selective", recompute_modules=("layernorm",))
    ops, none = _dense_block(train, "none")
    _, norm = _dense_block(train, "selective:layernorm")
    norms = [op for op in ops if op.name in ("attn_norm", "mlp_norm")]
    assert none.saved_bytes - norm.saved_bytes == pytest.approx(sum(op.saved_bytes for op in norms))
    assert norm.recompute_flops == 0.0  # no matmul redone, only the norms' memory-bound kernels
    assert norm.recompute_s > 0


# ----------------------------------------------------------------------------- precision-aware optimizer time
def test_precision_aware_optimizer_step_moves_fewer_bytes() -> None:
    """Adam's bytes per parameter: 2 x grad + 2 x (main + m + v) + 2 (16-bit weight written); fp32 everything =
    34 (the calibrated constant stands for it), bf16 moments = 2 x 4 + 2 x (4 + 2 + 2) + 2 = 26."""
    params = 1e9
    plain = optimizer_step_s(params, TrainingSpec(), H100.gpu, CAL)
    assert plain == pytest.approx(optimizer_time_s(params, H100.gpu, CAL))
    aware = TrainingSpec(use_precision_aware_optimizer=True, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    assert optimizer_step_s(params, aware, H100.gpu, CAL) / plain == pytest.approx(26 / 34)
    grads = replace(aware, main_grads_dtype="bf16")
    assert optimizer_step_s(params, grads, H100.gpu, CAL) / plain == pytest.approx(22 / 34)
    base = _train(dist_opt=True)
    on = replace(base, use_precision_aware_optimizer=True, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    ratio = stage_costs(LLAMA, H100, on)[0].optimizer_s / stage_costs(LLAMA, H100, base)[0].optimizer_s
    assert ratio == pytest.approx(26 / 34)


# ----------------------------------------------------------------------------- optimizer CPU offload
def test_optimizer_offload_moves_states_to_the_host_and_pays_the_link_and_the_cpu() -> None:
    params, share = 1e9, 0.5
    train = TrainingSpec(optimizer_cpu_offload=True, optimizer_offload_fraction=share)
    link = H100.gpu.host_link_gbps * 1e9 * HOST_COPY_EFFICIENCY  # PCIe Gen5 x16: 64 GB/s per direction
    cpu = HOST_ADAM_BYTES_PER_PARAM / (H100.gpu.host_memory_gbps * 1e9 * CAL.memory_efficiency)
    expected = optimizer_time_s(params * (1 - share), H100.gpu, CAL) + share * params * (4 / link + cpu + 2 / link)
    assert optimizer_step_s(params, train, H100.gpu, CAL) == pytest.approx(expected)
    assert optimizer_step_s(params, train, H100.gpu, CAL) > optimizer_step_s(params, TrainingSpec(), H100.gpu, CAL)
    # NVLink-C2C (GH200) moves the same bytes 7x faster than PCIe Gen5
    assert optimizer_step_s(params, train, GH200.gpu, CAL) < optimizer_step_s(params, train, H100.gpu, CAL)
    plain = memory(**COMMON, dist_opt=True).peak.parts
    half = memory(**COMMON, dist_opt=True, optimizer_cpu_offload=True, optimizer_offload_fraction=0.5).peak.parts
    assert half["optimizer"] == pytest.approx(plain["optimizer"] / 2)
    assert half["gradients"] == plain["gradients"] and half["weights"] == plain["weights"]


def test_fsdp_cpu_offload_moves_the_shards_too() -> None:
    """torchtitan's `enable_cpu_offload` (FSDP2 CPUOffloadPolicy): the fp32 sharded params, grads and moments."""
    kwargs = dict(COMMON, fsdp=True, framework="torchtitan")
    plain = memory(**kwargs).peak.parts
    off = memory(**kwargs, optimizer_cpu_offload=True).peak.parts
    assert off["optimizer"] == 0.0
    assert plain["weights"] - off["weights"] == pytest.approx(plain["optimizer"] / 2)  # 4 of the 8 bytes
    assert plain["gradients"] - off["gradients"] == pytest.approx(plain["optimizer"] / 2)


# ----------------------------------------------------------------------------- activation CPU offload
def test_activation_offload_frees_the_layers_and_exposes_the_copies_the_compute_cannot_hide() -> None:
    seq = 8192
    train = _train(tp=1, seq=seq, mbs=1, gbs=8)
    ops, kept = _dense_block(train, "none")
    _, off = _dense_block(train, OFFLOAD)
    assert off.saved_bytes == 0.0
    copy_s = kept.saved_bytes / (H100.gpu.host_link_gbps * 1e9 * HOST_COPY_EFFICIENCY)
    assert off.comm_total_s["host"] == pytest.approx(2 * copy_s)
    assert off.forward_s == pytest.approx(kept.forward_s + max(0.0, copy_s - kept.forward_s))
    b_plus_w = kept.backward_input_s + kept.backward_weight_s
    assert off.backward_input_s == pytest.approx(kept.backward_input_s + max(0.0, copy_s - b_plus_w))
    assert copy_s > kept.forward_s  # PCIe Gen5 cannot hide an 8K-token Llama-8B layer's activations
    _, c2c = _dense_block(_train(GH200, tp=1, seq=seq, mbs=1, gbs=8), OFFLOAD, GH200)
    _, c2c_kept = _dense_block(_train(GH200, tp=1, seq=seq, mbs=1, gbs=8), "none", GH200)
    assert c2c.forward_s == pytest.approx(c2c_kept.forward_s)  # NVLink-C2C hides it

    kwargs = dict(COMMON, seq=seq)
    plain = memory(**kwargs).peak.parts
    four = memory(**kwargs, cpu_offloading_num_layers=4).peak.parts
    assert plain["activations"] - four["activations"] == pytest.approx(4 * kept.saved_bytes)
    assert four["recompute_working_set"] == pytest.approx(kept.saved_bytes)  # one layer reloaded at a time


# ----------------------------------------------------------------------------- MoE: drop-and-pad, no host sync
MIXTRAL = model_preset("mixtral-8x7b")


def _moe_ops(train: TrainingSpec):
    return L.moe_ops(MIXTRAL, L.Shard.of(train))


def test_drop_and_pad_routes_capacity_factor_times_the_tokens() -> None:
    dropless = TrainingSpec(expert_model_parallel_size=8, seq_length=4096)
    padded = replace(dropless, moe_pad_expert_input_to_capacity=True, moe_expert_capacity_factor=1.5)
    a = {op.name: op for op in _moe_ops(dropless)}
    b = {op.name: op for op in _moe_ops(padded)}
    assert b["ep_dispatch"].comm.bytes == pytest.approx(1.5 * a["ep_dispatch"].comm.bytes)
    assert b["expert_up"].flops == pytest.approx(1.5 * a["expert_up"].flops, rel=1e-3)


def test_without_the_host_sync_moe_layers_queue_ahead() -> None:
    """With the sync (dropless) each MoE op waits for the host: the phase takes the sum of max(GPU, host) per MoE
    op and cannot run ahead; drop-and-pad keeps the counts on the GPU, so the host queues ahead."""
    kwargs = dict(model="mixtral-8x7b", gpu="h100-sxm5-80gb", gpus=8, tp=1, ep=8, mbs=1, gbs=8, seq=4096)
    synced = paraplan.project(**kwargs, moe_expert_capacity_factor=1.0)
    free = paraplan.project(**kwargs, moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)
    assert free.step_time_s < synced.step_time_s
    t_sync = resolve_dp(TrainingSpec().with_values(ep=8, gbs=8, seq=4096, moe_expert_capacity_factor=1.0), H100)
    t_free = replace(t_sync, moe_pad_expert_input_to_capacity=True)
    ops = _moe_ops(t_sync)
    ctx_sync, ctx_free = block_context(H100, t_sync, CAL), block_context(H100, t_free, CAL)
    assert ctx_sync.moe_host_sync and not ctx_free.moe_host_sync
    cost_sync = block_cost(ops, "none", ctx_sync)
    cost_free = block_cost(ops, "none", ctx_free)
    assert cost_sync.forward_runahead_s == 0.0 and cost_free.forward_runahead_s > 0.0
    assert cost_free.forward_s <= cost_sync.forward_s


# ----------------------------------------------------------------------------- CUDA graphs
def test_cuda_graphs_turn_a_layers_launches_into_one() -> None:
    """A launch-bound layer (a small shape): eager, the host issues every op; under a graph the phase is one launch
    then the kernels back to back: forward = one host launch + the GPU times."""
    small = replace(LLAMA, num_layers=2, hidden_size=512, ffn_hidden_size=1536, num_attention_heads=8,
                    num_query_groups=8, vocab_size=32000)  # fmt: skip
    eager = _train(tp=1, seq=128, mbs=1, gbs=8)
    graphed = replace(eager, cuda_graph_scope="layer")
    ops, e = _dense_block(eager, "none", model=small)
    _, g = _dense_block(graphed, "none", model=small)
    gpu = sum(compute_time_s(op, H100.gpu, CAL) for op in ops if op.kind is not OpKind.COMM)
    assert g.forward_s == pytest.approx(CAL.host_launch_s + gpu)
    assert e.forward_s >= CAL.host_launch_s * sum(op.host_ops for op in ops) - 1e-12
    assert g.forward_s < e.forward_s
    assert g.host_bound_s < e.host_bound_s


def test_graphs_leave_a_synced_moe_eager_and_capture_it_without_the_sync() -> None:
    t = resolve_dp(TrainingSpec().with_values(ep=8, gbs=8, seq=512, moe_expert_capacity_factor=1.0), H100)
    ops = _moe_ops(t)
    eager = block_cost(ops, "none", block_context(H100, t, CAL))
    graph_sync = block_cost(ops, "none", block_context(H100, replace(t, cuda_graph_scope="layer"), CAL))
    graph_free = block_cost(
        ops, "none",
        block_context(H100, replace(t, cuda_graph_scope="layer", moe_pad_expert_input_to_capacity=True), CAL),
    )  # fmt: skip
    assert graph_free.forward_s < graph_sync.forward_s <= eager.forward_s


def test_full_iteration_graph_drops_the_per_microbatch_python() -> None:
    layer = paraplan.project(**COMMON, cuda_graph_scope="layer")
    full = paraplan.project(**COMMON, cuda_graph_scope="full_iteration")
    m = 8 // 8  # micro-batches per rank: gbs 8 over dp 8
    assert layer.step_time_s - full.step_time_s >= m * CAL.microbatch_overhead_s * 0.5


# ----------------------------------------------------------------------------- rules
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"recompute_method": "uniform"}, "recompute_method uniform needs recompute full"),
        ({"recompute": "full", "recompute_method": "bogus"}, "unknown recompute_method"),
        ({"recompute": "selective", "recompute_modules": ["attn"]}, "unknown recompute_modules attn"),
        ({"recompute_modules": ["mlp"]}, "needs recompute selective"),
        ({"recompute": "selective", "recompute_modules": ["moe"]}, "needs an MoE model"),
        ({"recompute": "full", "recompute_layer_ids": [0, 40]}, r"outside the model's layers 0\.\.31"),
        ({"recompute": "full", "recompute_layer_ids": [1, 1]}, "repeat a layer"),
        ({"recompute": "full", "recompute_layer_ids": [1], "recompute_num_layers": 2}, "exclusive"),
        ({"moe_pad_expert_input_to_capacity": True}, "needs moe_expert_capacity_factor"),
        ({"cpu_offloading_num_layers": 4, "pp": 2}, "needs pp 1"),
        ({"cpu_offloading_num_layers": 4, "recompute": "full"}, "does not work with recompute"),
        ({"cpu_offloading_num_layers": 32}, r"within 1\.\.31"),
        ({"cpu_offloading_num_layers": 4, "cuda_graph_scope": "layer"}, "CUDA graphs are not supported"),
        ({"cuda_graph_scope": "layer", "recompute": "full"}, "full_iteration"),
        ({"cuda_graph_scope": "all"}, "unknown cuda_graph_scope"),
        ({"optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.5}, r"within 0\.\.1"),
    ],
)
def test_bad_knobs_are_refused_with_the_rule(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        paraplan.project(**{**COMMON, **values})


def test_knobs_default_off() -> None:
    t = TrainingSpec()
    assert (t.cuda_graph_scope, t.cpu_offloading_num_layers, t.optimizer_cpu_offload) == ("none", 0, False)
    assert (t.moe_pad_expert_input_to_capacity, t.recompute_modules, t.recompute_layer_ids) == (False, None, None)
    assert t.moe_host_sync and t.moe_padding_factor == 1.0 and t.offloaded_optimizer_fraction == 0.0
    assert math.isclose(H100.gpu.host_link_gbps, 64.0) and math.isclose(GH200.gpu.host_link_gbps, 450.0)
