"""The pieces of the CPU end-to-end check that need no long run (`paraplan.measure.e2e`, bench shape choice)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paraplan.cost.comm import collective_time_s, place_group
from paraplan.graph.ops import CommKind
from paraplan.measure import e2e
from paraplan.measure.bench import _spread
from paraplan.measure.samples import write_sample_table
from paraplan.specs.validate import check


def _figures() -> e2e.CpuFigures:
    return e2e.CpuFigures("fp32", 1, 150e9, 25e9, 1e-6, 15e-6, 16.0)


def test_allreduce_line_ignores_the_unstable_small_messages(tmp_path: Path) -> None:
    """Small gloo messages on a shared machine take 10x longer some runs; the bandwidth line must not follow."""
    latency, bandwidth = 200e-6, 1.5e9
    sizes = [2**p for p in range(11, 24, 2)]
    rows = [(n, 1, 2, (latency + 4 * n / bandwidth) * 1e6 * (10.0 if 4 * n < 2**20 else 1.0)) for n in sizes]
    write_sample_table(
        tmp_path / "nccl" / "CPU-x_allreduce_fp32_1_2.csv", ("shape", "nodes", "GPUsPerNode", "dur(us)"), rows
    )
    assert e2e.fit_allreduce(tmp_path).bytes_per_s == pytest.approx(bandwidth, rel=1e-3)


def test_allreduce_line_maps_onto_the_ring_model(tmp_path: Path) -> None:
    latency, bandwidth = 200e-6, 1.5e9
    sizes = [2**p for p in range(11, 24, 2)]  # elements (fp32)
    rows = [(n, 1, 2, (latency + 4 * n / bandwidth) * 1e6) for n in sizes]
    write_sample_table(
        tmp_path / "nccl" / "CPU-x_allreduce_fp32_1_2.csv", ("shape", "nodes", "GPUsPerNode", "dur(us)"), rows
    )
    link = e2e.fit_allreduce(tmp_path)
    assert link.bytes_per_s == pytest.approx(bandwidth, rel=1e-3)
    assert link.latency_s == pytest.approx(latency, rel=1e-3)
    assert link.max_error < 1e-3 and link.samples == sum(4 * n >= e2e.BANDWIDTH_REGIME_BYTES for n in sizes)
    system = e2e.cpu_system(_figures(), link, world=2)
    calibration = e2e.cpu_calibration(_figures(), 1e-9, e2e.FrameworkOverhead(1e-3, 2e-4), bookkeeping_s=5e-4)
    group = place_group(2, 1, system.gpus_per_node)
    nbytes = 27e6
    assert collective_time_s(CommKind.ALL_REDUCE, nbytes, group, system, calibration) == pytest.approx(
        latency + nbytes / bandwidth, rel=1e-6
    )
    assert system.gpu.peak_flops("fp32") == pytest.approx(150e9)
    assert system.gpu.hbm_bytes_per_s == pytest.approx(25e9)
    assert calibration.optimizer_bytes_per_param == pytest.approx(25.0)  # 1 ns per parameter at 25 GB/s
    assert calibration.step_overhead_s == pytest.approx(7e-4) and calibration.microbatch_overhead_s == 1e-3


def test_reference_run_is_a_valid_paraplan_run() -> None:
    config, run = e2e.TinyLlama(), e2e.RunConfig()
    model = config.model_spec()
    assert model.head_dim == config.head_dim and model.kv_groups == config.kv_heads and model.gated_mlp
    for world in (1, 2):
        train = check(
            model, e2e.cpu_system(_figures(), e2e.LinkFit(1e9, 1e-4, 2, 0.0, 1e6), world), run.training_spec(world)
        )
        assert train.dp == world and train.num_microbatches == 1 and train.precision == "fp32"


def test_spread_spans_the_sizes() -> None:
    shapes = [(b, s, d) for b in (1, 2) for s in (64, 128, 256) for d in (64, 128, 256, 512)]
    chosen = _spread(shapes, 10)
    assert len(chosen) == 10 and len(set(chosen)) == 10
    sizes = sorted(b * s * d for b, s, d in shapes)
    assert min(b * s * d for b, s, d in chosen) == sizes[0] and max(b * s * d for b, s, d in chosen) == sizes[-1]


@pytest.mark.parametrize("tied", [False, True])
def test_reference_model_trains(tied: bool) -> None:
    pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")
    config = e2e.TinyLlama(vocab=128, hidden=32, layers=2, heads=4, kv_heads=2, ffn=48, tied=tied)
    run = e2e.RunConfig(batch=2, seq=16, steps=3, warmup=1)
    result = e2e.run_single(config, run)
    assert len(result.steps_s) == 3 and len(result.cpu_s) == 3
    embedding, layer = 128 * 32, 32 * (4 + 2 * 2) * 8 + 32 * 32 + 32 * 2 * 48 + 48 * 32 + 2 * 32
    assert result.params == (1 if tied else 2) * embedding + 2 * layer + 32
    assert all(loss == loss and loss > 0 for loss in result.losses)  # finite
    assert result.losses[-1] < result.losses[0] + 0.5  # AdamW at lr 1e-3 does not blow up


def test_shared_cpu_scales_profile_times_by_kind() -> None:
    from paraplan.graph.ops import GemmShape, Op, OpKind, Phase

    solo, shared = _figures(), e2e.CpuFigures("fp32", 1, 100e9, 20e9, 1e-6, 15e-6, 16.0)
    factors = e2e.shared_cpu(solo, shared)
    assert factors.compute_factor == pytest.approx(1.5) and factors.memory_factor == pytest.approx(1.25)
    assert e2e.shared_cpu(shared, solo).compute_factor == 1.0  # never faster than alone
    timer = factors.scaled(lambda op: (1e-3, "profile:x"))
    gemm = Op("qkv", OpKind.GEMM, Phase.FORWARD, gemm=GemmShape(8, 8, 8))
    norm = Op("attn_norm", OpKind.ELEMENTWISE, Phase.FORWARD, bytes_moved=1e6)
    assert timer(gemm) == (pytest.approx(1.5e-3), "profile:x")
    assert timer(norm) == (pytest.approx(1.25e-3), "profile:x")
    assert factors.scaled(None) is None
