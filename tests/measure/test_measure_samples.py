"""Reading samples: file names, tables, GPU selection, and the mapping to regressor features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from paraplan.cost.profile import elementwise_traffic_bytes
from paraplan.measure.datasets import (
    FEATURES,
    layer_params_per_rank,
    mapping_for,
    padded_vocab,
    work,
)
from paraplan.measure.samples import (
    SampleError,
    SampleFile,
    SampleTable,
    find_sample_files,
    parse_sample_name,
    read_sample_table,
    sample_file_name,
    select_gpu,
    write_sample_table,
)


def table(op: str, columns: tuple[str, ...], rows: list[tuple[float, ...]], precision: str = "fp16") -> SampleTable:
    file = SampleFile(Path(f"x/operator/GPU_{op}_{precision}.csv"), "operator", "GPU", op, precision)
    return SampleTable(file, columns, np.asarray(rows, dtype=float))


def test_parse_sample_names() -> None:
    op = parse_sample_name(Path("Perlmutter/operator/NVIDIAA100-SXM4-80GB_linear_final_fp16.csv"))
    assert op is not None and (op.gpu, op.op, op.precision, op.nodes) == (
        "NVIDIAA100-SXM4-80GB",
        "linear_final",
        "fp16",
        None,
    )
    nccl = parse_sample_name(Path("Vista/nccl/NVIDIAGH200120GB_allreduce_large_fp16_8_1.csv"))
    assert nccl is not None and (nccl.op, nccl.nodes, nccl.gpus_per_node) == ("allreduce_large", 8, 1)
    ce = parse_sample_name(Path("a/operator/G_parallel_cross_entropy_128_fp16.csv"))
    assert ce is not None and ce.op == "parallel_cross_entropy_128"
    assert parse_sample_name(Path("Perlmutter/operator/NVIDIAA100-SXM4-80GB.csv")) is None  # model summary
    assert parse_sample_name(Path("somewhere/else/G_gemm_fp16.csv")) is None  # not under operator/ or nccl/
    assert sample_file_name("CPU-X", "allreduce", "fp32", 1, 2) == "CPU-X_allreduce_fp32_1_2.csv"
    with pytest.raises(ValueError):
        sample_file_name("bad_name", "gemm", "fp32")


def test_read_write_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "operator" / "G_gemm_fp32.csv"
    write_sample_table(path, ("m", "n", "k", "F_dur(us)", "B_dur(us)"), [(64, 32, 16, 1.5, 3.25)])
    file = parse_sample_name(path)
    assert file is not None
    loaded = read_sample_table(file)
    assert loaded.columns == ("m", "n", "k", "F_dur(us)", "B_dur(us)")
    assert loaded.column("B_dur(us)").tolist() == [3.25]
    assert loaded.column("mp", default=1.0).tolist() == [1.0]
    with pytest.raises(SampleError, match="missing column"):
        loaded.column("mp")
    path.write_text("m,n,k\n1,2\n")
    with pytest.raises(SampleError, match="2 fields"):
        read_sample_table(file)
    path.write_text("m,n,k\n1,2,abc\n")
    with pytest.raises(SampleError, match="non-numeric"):
        read_sample_table(file)
    path.write_text("")
    with pytest.raises(SampleError, match="empty"):
        read_sample_table(file)


def test_find_and_select(tmp_path: Path) -> None:
    with pytest.raises(SampleError, match="not found"):
        find_sample_files(tmp_path / "missing")
    for gpu in ("NVIDIAA100-SXM4-80GB", "NVIDIAGH200120GB"):
        write_sample_table(tmp_path / "s" / "operator" / f"{gpu}_gemm_fp16.csv", ("m",), [(1,)])
    files = find_sample_files(tmp_path)
    with pytest.raises(SampleError, match="several GPUs"):
        select_gpu(files, None)
    name, chosen = select_gpu(files, "a100")
    assert name == "NVIDIAA100-SXM4-80GB" and len(chosen) == 1
    with pytest.raises(SampleError, match="no GPU matching"):
        select_gpu(files, "B200")
    with pytest.raises(SampleError, match="no sample files"):
        select_gpu([], None)


def test_linear_files_become_gemm_shapes() -> None:
    columns = ("mp", "b", "l", "dim", "F_dur(us)", "B_dur(us)")
    rows = [(2, 4, 1024, 4096, 1.0, 2.0)]
    m, dim, mp = 4 * 1024, 4096, 2
    expected = {
        "linear1": (m, 3 * dim / mp, dim),
        "linear2": (m, dim, dim / mp),
        "linear3": (m, 4 * dim / mp, dim),
        "linear4": (m, dim, 4 * dim / mp),
        "linear_final": (m, 50432 / mp, dim),  # 50257 padded to a multiple of 128 x 2
    }
    for op, shape in expected.items():
        mapping = mapping_for("operator", op)
        assert not isinstance(mapping, str) and mapping.kind == "gemm"
        assert mapping.features(table(op, columns, rows), "fwd").tolist() == [list(shape)]
    assert padded_vocab(np.array([1, 2, 4, 8])).tolist() == [50304, 50432, 50688, 51200]


def test_other_features() -> None:
    attention = mapping_for("operator", "flash_atten")
    assert not isinstance(attention, str)
    t = table("flash_atten", ("mp", "b", "h", "l", "dim", "F_dur(us)", "B_dur(us)"), [(2, 4, 32, 2048, 4096, 1, 2)])
    # the public samples are timed over the full square: the causal work of twice the sequences
    assert attention.features(t, "fwd").tolist() == [[2 * 4 * 16, 2048, 128]]
    causal = ("mp", "b", "h", "l", "dim", "causal", "F_dur(us)", "B_dur(us)")
    t = table("flash_atten", causal, [(2, 4, 32, 2048, 4096, 1, 1, 2), (2, 4, 32, 2048, 4096, 0, 1, 2)])
    assert attention.features(t, "fwd").tolist() == [[4 * 16, 2048, 128], [2 * 4 * 16, 2048, 128]]
    assert len(FEATURES["attention"]) == 3 and work("attention", np.array([[64.0, 2048, 128]]))[0] == 64 * 2048**2 * 128
    norm = mapping_for("operator", "layernorm")
    assert not isinstance(norm, str)
    t = table("layernorm", ("b", "l", "dim", "F_dur(us)", "B_dur(us)"), [(2, 1024, 4096, 1, 2)])
    elements = 2 * 1024 * 4096
    assert norm.features(t, "fwd")[0, 0] == elementwise_traffic_bytes("layernorm", True, elements, 2) == 4 * elements
    assert norm.features(t, "bwd")[0, 0] == 6 * elements
    ce = mapping_for("operator", "parallel_cross_entropy_128")
    assert not isinstance(ce, str) and ce.base == "cross_entropy"
    t = table("x", ("mp", "b", "l", "vocab", "F_dur(us)", "B_dur(us)"), [(1, 2, 512, 4096, 1, 2)], precision="fp32")
    assert ce.features(t, "fwd")[0, 0] == 2 * 512 * 4096 * (4 + 8)  # fp32 logits read, fp32 pass written and read
    assert isinstance(mapping_for("operator", "baddbmm"), str)
    assert isinstance(mapping_for("operator", "mystery"), str)
    comm = mapping_for("nccl", "allgather_large")
    assert not isinstance(comm, str) and comm.base == "all_gather"


def test_optimizer_parameters_per_stage() -> None:
    """The A100 `optimizer_fp16.csv` lists 27,335,680 parameters for 2 layers of hidden 256: two 50304 x 256
    embeddings (untied), the layers and the final LayerNorm; the stage formulas add up to it."""
    first = mapping_for("operator", "firstStage_optimizer")
    last = mapping_for("operator", "lastStage_optimizer")
    assert not isinstance(first, str) and not isinstance(last, str)
    t = table("x", ("mp", "dim", "encoders", "dur(us)"), [(1, 256, 1, 1.0)])
    total = first.features(t, "step")[0, 0] + last.features(t, "step")[0, 0]
    assert total == 27_335_680
    assert layer_params_per_rank(np.array(4096.0), np.array(1.0)) == 12 * 4096**2 + 13 * 4096
