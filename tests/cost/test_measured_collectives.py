"""Collectives from a fitted profile: measured where the samples were taken, modelled elsewhere (`cost.collectives`).

A synthetic NCCL sample set times every collective at twice the analytic model of the a100-sxm4-80gb preset (an
8-GPU node), and is fitted through `paraplan fit`'s own path (`measure.fit.fit_profile`). Projections with it must
take their TP and DP communication from its regressors, and fall back to the model where the rule says so.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.cost.block import BlockContext, block_cost
from paraplan.cost.calibration import at_scale, calibration_for
from paraplan.cost.collectives import timed_collective
from paraplan.cost.comm import GroupPlacement, Modelled, collective_time_s, place_group
from paraplan.cost.profiled import ProfileRef, path_ref, shipped_ref
from paraplan.graph import kinds as K
from paraplan.graph import layers as L
from paraplan.graph.backward import backward_ops
from paraplan.graph.ops import CommAxis, CommKind, OpKind
from paraplan.projection import ProjectionOptions, group_placements, project_specs, stage_costs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

GPU = "a100-sxm4-80gb"
DEVICE = "NVIDIAA100-SXM4-80GB"  # as torch names it, in the sample file names
SLOWER = 2.0  # the samples' time over the analytic model's
SIZES_BYTES = [2 ** (22 + i / 4) for i in range(41)]  # 4 MiB .. 4 GiB
# (sample op, collective, nodes, GPUs per node); the largest node of the set (8) is the measured system's node
TOPOLOGIES = [
    ("allreduce", CommKind.ALL_REDUCE, 1, 2),
    ("allreduce", CommKind.ALL_REDUCE, 1, 4),
    ("allreduce", CommKind.ALL_REDUCE, 1, 8),
    ("allgather", CommKind.ALL_GATHER, 1, 4),
    ("p2p", CommKind.SEND_RECV, 1, 2),
]
MODEL = model_preset("llama3.1-8b").with_overrides(
    name="small", num_layers=4, hidden_size=2048, ffn_hidden_size=5632, num_attention_heads=16, vocab_size=32000
)


def _sample_time_us(kind: CommKind, shape_bytes: float, nodes: int, gpn: int) -> float:
    system = system_preset(GPU, 8)
    cal = calibration_for(GPU, "megatron-lm")
    size = nodes * gpn
    group = GroupPlacement(2, 2, 1) if kind is CommKind.SEND_RECV else GroupPlacement(size, gpn, nodes)
    full = shape_bytes * size if kind is CommKind.ALL_GATHER else shape_bytes  # all-gather samples: the shard
    return SLOWER * collective_time_s(kind, full, group, system, cal) * 1e6


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sklearn")
    from paraplan.measure.fit import fit_profile

    root = tmp_path_factory.mktemp("samples")
    (root / "nccl").mkdir()
    for op, kind, nodes, gpn in TOPOLOGIES:
        rows = ["shape,nodes,GPUsPerNode,dur(us)"]
        for i, nbytes in enumerate(SIZES_BYTES):
            jitter = 1 + 0.01 * math.sin(7 * i)  # repeats are never exact
            t_us = _sample_time_us(kind, nbytes, nodes, gpn) * jitter
            rows.append(f"{nbytes / 2:.1f},{nodes}.0,{gpn}.0,{t_us:.3f}")
        (root / "nccl" / f"{DEVICE}_{op}_fp16_{nodes}_{gpn}.csv").write_text("\n".join(rows) + "\n")
    result = fit_profile(root, source="synthetic: 2x the analytic model")
    assert {r.name for r in result.regressors if r.shipped} >= {"all_reduce.1x2", "all_reduce.1x4", "send_recv.1x2"}
    path = root / "profile.json"
    result.profile.save(path)
    return path


@pytest.fixture(scope="module")
def ref(profile_path: Path) -> ProfileRef:
    return path_ref(profile_path)


def _train(**values: object) -> TrainingSpec:
    base = dict(tensor_model_parallel_size=2, data_parallel_size=4, global_batch_size=16, seq_length=2048)
    return TrainingSpec().with_values(**{**base, **values})


def _sources(projection) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for c in projection.collectives:
        out.setdefault((c.axis, c.collective), set()).add(f"{'measured' if c.measured else 'modelled'}:{c.detail}")
    return out


def test_tp_and_dp_communication_come_from_the_regressors(ref: ProfileRef) -> None:
    system, train = system_preset(GPU, 8), _train()
    analytic = project_specs(MODEL, system, train)
    measured = project_specs(MODEL, system, train, ProjectionOptions(profile=ref))
    assert analytic.collectives is None  # no profile: nothing to tell apart
    sources = _sources(measured)
    assert "measured:all_reduce.1x2" in sources["tp", "all_reduce"]
    assert sources["dp", "all_reduce"] == {"measured:all_reduce.1x4"}
    tp_ratio = measured.pipeline.comm_total_s["tp"] / analytic.pipeline.comm_total_s["tp"]
    dp_ratio = measured.pipeline.comm_total_s["dp"] / analytic.pipeline.comm_total_s["dp"]
    assert tp_ratio == pytest.approx(SLOWER, rel=0.08)  # the fit of samples at twice the model
    assert dp_ratio == pytest.approx(SLOWER, rel=0.08)
    assert measured.step_time_s > analytic.step_time_s
    # the parts of each axis add up to its communication total
    for axis in ("tp", "dp"):
        parts = sum(c.time_s for c in measured.collectives if c.axis == axis)
        assert parts == pytest.approx(measured.pipeline.comm_total_s[axis], rel=1e-9)


def test_dp_gradient_all_reduce_equals_the_regressor(ref: ProfileRef) -> None:
    system, train = system_preset(GPU, 8), _train()
    (stage,) = stage_costs(MODEL, system, train, options=ProjectionOptions(profile=ref))
    nbytes = stage.dense_params * train.grad_reduce_bytes
    regressor = ref.profile.regressors["all_reduce.1x4"]
    assert stage.dp_grad_reduce_s == pytest.approx(regressor.time_us((nbytes,)) * 1e-6, rel=1e-12)


def test_tp_collectives_of_a_layer_equal_the_regressor(ref: ProfileRef) -> None:
    """A dense layer's TP all-reduces (forward and backward), each the regressor's time at its own bytes."""
    system, train = system_preset(GPU, 8), _train()
    cal = at_scale(calibration_for(GPU, train.framework), system.num_gpus)
    shard = L.Shard.of(train.with_values(data_parallel_size=4))
    groups = group_placements(train, system)
    ctx = BlockContext(system, cal, groups, False, ref)
    forward = K.layer_kind("dense").ops(MODEL, shard)
    ops = [*forward, *(b for op in forward for b in backward_ops(op))]
    comms = [op.comm for op in ops if op.kind is OpKind.COMM and op.comm.axis is CommAxis.TP]
    assert comms and all(c.kind is CommKind.ALL_REDUCE for c in comms)
    regressor = ref.profile.regressors["all_reduce.1x2"]
    expected = sum(regressor.time_us((c.bytes,)) * 1e-6 for c in comms)
    cost = block_cost(forward, "none", ctx)
    assert cost.comm_total_s["tp"] == pytest.approx(expected, rel=1e-12)
    assert {key[2] for key in cost.comm_sources} == {"measured:all_reduce.1x2"}


def test_outside_the_sampled_sizes_the_model_applies(ref: ProfileRef) -> None:
    system = system_preset(GPU, 8)
    cal = calibration_for(GPU, "megatron-lm")
    group = place_group(2, 1, 8)
    tiny, huge = SIZES_BYTES[0] / 4, SIZES_BYTES[-1] * 4  # beyond [min / 2, 2 x max]
    for nbytes in (tiny, huge):
        seconds, source = timed_collective(CommKind.ALL_REDUCE, nbytes, group, system, cal, axis=CommAxis.TP, timer=ref)
        assert source == "modelled:out of range"
        assert seconds == collective_time_s(CommKind.ALL_REDUCE, nbytes, group, system, cal)
    inside, source = timed_collective(CommKind.ALL_REDUCE, 1e8, group, system, cal, axis=CommAxis.TP, timer=ref)
    assert source == "measured:all_reduce.1x2"
    assert inside == pytest.approx(ref.profile.regressors["all_reduce.1x2"].time_us((1e8,)) * 1e-6)
    # a short sequence: every TP message is below the samples, so TP communication is the model's
    train = _train(seq_length=256)
    short = project_specs(MODEL, system, train, ProjectionOptions(profile=ref))
    assert _sources(short)["tp", "all_reduce"] == {"modelled:out of range"}
    analytic = project_specs(MODEL, system, train)
    assert short.pipeline.comm_total_s["tp"] == pytest.approx(analytic.pipeline.comm_total_s["tp"], rel=1e-12)


@pytest.mark.parametrize(
    ("kind", "group", "reason"),
    [
        (CommKind.ALL_TO_ALL, place_group(4, 1, 8), Modelled.NO_SAMPLES),
        (CommKind.ALL_REDUCE, place_group(16, 1, 8), Modelled.OTHER_TIER),  # 2 nodes x 8: not measured
        (CommKind.ALL_REDUCE, place_group(8, 2, 8), Modelled.OTHER_TIER),  # 4 in each of 2 domains
        (CommKind.SEND_RECV, place_group(2, 8, 8), Modelled.OTHER_TIER),  # across nodes: only 1x2 measured
    ],
)
def test_collectives_the_samples_do_not_cover_are_modelled(
    ref: ProfileRef, kind: CommKind, group: GroupPlacement, reason: Modelled
) -> None:
    system = system_preset(GPU, 64)
    cal = calibration_for(GPU, "megatron-lm")
    seconds, source = timed_collective(kind, 1e8, group, system, cal, axis=CommAxis.DP, timer=ref)
    assert source == f"modelled:{reason}"
    assert seconds == collective_time_s(kind, 1e8, group, system, cal)


def test_another_gpu_or_node_uses_the_model(ref: ProfileRef) -> None:
    """The A100 samples do not time an H100's links, nor those of a 4-GPU A100 node (the samples' node has 8)."""
    train = _train()
    for system, reason in (
        (system_preset("h100-sxm5-80gb", 8), "other GPU"),
        (system_preset(GPU, 8).with_overrides(gpus_per_node=4), "other system"),
    ):
        with_profile = project_specs(MODEL, system, train, ProjectionOptions(profile=ref))
        analytic = project_specs(MODEL, system, train)
        assert {c.detail for c in with_profile.collectives} == {reason}
        assert not any(c.measured for c in with_profile.collectives)
        # the profile has no compute regressors: the whole projection is the analytic one
        assert with_profile.step_time_s == analytic.step_time_s
        assert with_profile.pipeline.comm_total_s == analytic.pipeline.comm_total_s


def test_distributed_optimizer_and_pipeline_collectives_are_measured(ref: ProfileRef) -> None:
    """Reduce-scatter (costed by the all-gather regressor where it has none), the parameter all-gather and the
    pipeline's send/recv go through the same choice."""
    system = system_preset(GPU, 8)
    train = _train(data_parallel_size=2, pipeline_model_parallel_size=2, use_distributed_optimizer=True)
    projection = project_specs(MODEL, system, train, ProjectionOptions(profile=ref))
    sources = _sources(projection)
    assert sources["pp", "send_recv"] == {"measured:send_recv.1x2"}
    # dp=2 with stride tp=2: a group of 2 inside the node; the all-gather samples are of 4 GPUs only
    assert sources["dp", "reduce_scatter"] == {"modelled:other tier"}
    train4 = _train(data_parallel_size=4, use_distributed_optimizer=True)
    sources4 = _sources(project_specs(MODEL, system, train4, ProjectionOptions(profile=ref)))
    assert sources4["dp", "reduce_scatter"] == {"measured:all_gather.1x4"}
    assert sources4["dp", "all_gather"] == {"measured:all_gather.1x4"}


def test_shipped_profiles_apply_where_they_were_measured() -> None:
    """GH200 samples (TACC Vista, one GPU per node) apply to the gh200 preset; the A100 ones (Perlmutter, four
    GPUs per node) not to the 8-GPU DGX A100 preset."""
    model = model_preset("llama3.1-8b")
    train = TrainingSpec().with_values(
        tensor_model_parallel_size=2, data_parallel_size=4, global_batch_size=16, seq_length=4096
    )
    gh200 = project_specs(model, system_preset("gh200", 8), train, ProjectionOptions(profile=shipped_ref("gh200")))
    assert "measured:all_reduce.2x1" in _sources(gh200)["tp", "all_reduce"]
    a100 = project_specs(model, system_preset(GPU, 8), train, ProjectionOptions(profile=shipped_ref(GPU)))
    assert {c.detail for c in a100.collectives} == {"other system"}


def test_cli_shows_measured_and_modelled_collectives(profile_path: Path) -> None:
    args = ["project", "--model", "llama3.1-8b", "--gpu", GPU, "--gpus", "8", "--tp", "2", "--gbs", "16"]
    args += ["--seq", "2048", "--profile", str(profile_path)]
    runner = CliRunner()
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "collectives: measured or modelled" in text.output
    assert "all_reduce.1x2" in text.output
    assert "out of range" in text.output  # the 8B model's gradients (16 GB) are beyond the 4 GiB samples
    out = runner.invoke(app, [*args, "--json"])
    data = json.loads(out.output)
    rows = data["cost_sources"]["collectives"]
    assert {"axis": "tp", "collective": "all_reduce", "source": "measured", "detail": "all_reduce.1x2"}.items() <= (
        next(r for r in rows if r["source"] == "measured")
    ).items()
    plain = json.loads(runner.invoke(app, [*args[:-2], "--json"]).output)
    assert "collectives" not in plain["cost_sources"]
