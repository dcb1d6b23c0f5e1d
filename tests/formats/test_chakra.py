"""Chakra execution traces: decode the files back and check nodes, dependencies, peers and sizes."""

import json
from collections import Counter
from pathlib import Path

import pytest

from paraplan.cost.block import weight_params
from paraplan.cost.calibration import calibration_for
from paraplan.cost.compute import compute_time_s
from paraplan.errors import ConfigError
from paraplan.formats.chakra import RankGrid, export_chakra, schedule_items
from paraplan.formats.chakra_pb import CollectiveCommType, NodeType, messages, read_trace
from paraplan.graph import layers as L
from paraplan.graph.backward import backward_ops
from paraplan.graph.ops import OpKind
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check

TINY = ModelSpec(
    name="tiny",
    num_layers=4,
    hidden_size=256,
    ffn_hidden_size=1024,
    num_attention_heads=4,
    num_query_groups=2,
    vocab_size=1000,
)
TINY_MOE = ModelSpec(
    name="tiny-moe",
    num_layers=4,
    hidden_size=256,
    ffn_hidden_size=1024,
    num_attention_heads=4,
    vocab_size=1000,
    num_experts=4,
    moe_ffn_hidden_size=512,
    moe_router_topk=2,
)
SYSTEM = system_preset("h100-sxm5-80gb", 8)


def _count(ops) -> int:
    """Nodes the graph gives for ops in forward and backward: collectives of one rank are skipped."""
    kept = [op for op in ops if op.kind is not OpKind.COMM or op.comm.group_size > 1]
    return len(kept) + sum(len(backward_ops(op)) for op in kept)


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    train = TrainingSpec().with_values(
        tp=2, pp=2, mbs=1, gbs=8, seq=512, sp=True, dist_opt=True, overlap_grad_reduce=True
    )
    train = check(TINY, SYSTEM, train)  # data parallel size 2 from the 8 GPUs
    folder = tmp_path_factory.mktemp("chakra")
    out = export_chakra(TINY, SYSTEM, train, folder, prefix="tiny")
    traces = [read_trace(path) for path in out.paths]
    return train, out, traces, json.loads(out.comm_groups_path.read_text())


def test_one_file_per_rank_with_metadata(dense) -> None:
    _, out, traces, _ = dense
    assert [p.name for p in out.paths] == [f"tiny.{r}.et" for r in range(8)]
    for rank, (meta, nodes) in enumerate(traces):
        assert meta.version == "0.0.4"
        assert {a.name: a.value for a in meta.attrs}["rank"] == rank
        assert len(nodes) == out.nodes_per_rank[rank]


def test_node_counts(dense) -> None:
    train, _, traces, _ = dense
    shard = L.Shard.of(train)
    m = train.num_microbatches  # 8 / (1 * dp 2) = 4
    layer = _count(L.decoder_layer_ops(TINY, shard, moe=False))
    first = _count(L.embedding_ops(TINY, shard)) + 2 * layer
    last = 2 * layer + _count(L.head_ops(TINY, shard, L.padded_vocab(TINY, 2)))
    tail = 3  # DP gradient reduce-scatter, optimizer step, parameter all-gather (distributed optimizer)
    for rank, (_, nodes) in enumerate(traces):
        per_mb = first if rank < 4 else last
        assert len(nodes) == m * (per_mb + 2) + tail  # + one receive and one send per micro-batch
        kinds = Counter(n.type for n in nodes)
        assert kinds[NodeType.COMM_SEND_NODE] == kinds[NodeType.COMM_RECV_NODE] == m


def test_dependencies_are_a_dag_on_each_rank(dense) -> None:
    for _, nodes in dense[2]:
        assert [n.id for n in nodes] == list(range(len(nodes)))
        for node in nodes:
            assert all(0 <= d < node.id for d in node.data_deps), node
            if node.id and node.type is not NodeType.COMM_RECV_NODE:
                assert node.data_deps, node  # everything but the first node and receives waits for something
        opt = next(n for n in nodes if n.name == "optimizer_step")
        grad = next(n for n in nodes if n.name.endswith("grad_reduce.dp"))
        assert grad.id in opt.data_deps  # the step waits for the overlapped gradient reduction


def test_sends_and_receives_pair_up(dense) -> None:
    sends, recvs = Counter(), Counter()
    for _, nodes in dense[2]:
        for n in nodes:
            if n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                key = (n.attr("comm_src"), n.attr("comm_dst"), n.attr("comm_tag"), n.attr("comm_size"))
                (sends if n.type is NodeType.COMM_SEND_NODE else recvs)[key] += 1
    assert sends == recvs and set(sends.values()) == {1}
    assert {src // 4 != dst // 4 for src, dst, _, _ in sends} == {True}  # between pipeline stages
    assert {size for *_, size in sends} == {2 * 512 * 256 // 2}  # bf16 activations, sequence-parallel shard


def test_collective_sizes_types_and_groups(dense) -> None:
    train, _, traces, groups = dense
    _, nodes = traces[0]
    by_name = {n.name: n for n in nodes}
    ag = by_name["F.mb0.s0.layer0.tp_ag_attn"]
    rs = by_name["F.mb0.s0.layer0.tp_rs_mlp"]
    assert ag.attr("comm_type") == CollectiveCommType.ALL_GATHER and ag.attr("comm_size") == 2 * 512 * 256
    assert rs.attr("comm_type") == CollectiveCommType.REDUCE_SCATTER and rs.attr("comm_size") == 2 * 512 * 256
    assert groups[ag.attr("pg_name")] == [0, 1]  # the TP pair
    grad = next(n for n in nodes if n.name.endswith("grad_reduce.dp"))
    assert groups[grad.attr("pg_name")] == [0, 2]  # DP ranks 0 and 2 (tp fastest, then dp)
    assert grad.attr("comm_type") == CollectiveCommType.REDUCE_SCATTER  # distributed optimizer
    shard = L.Shard.of(train)
    stage_ops = L.embedding_ops(TINY, shard) + 2 * L.decoder_layer_ops(TINY, shard, moe=False)
    assert grad.attr("comm_size") == 4 * sum(weight_params(op) for op in stage_ops)  # fp32 gradients


def test_durations_come_from_the_cost_model(dense) -> None:
    train, _, traces, _ = dense
    qkv = next(op for op in L.decoder_layer_ops(TINY, L.Shard.of(train), moe=False) if op.name == "qkv")
    node = next(n for n in traces[0][1] if n.name == "F.mb0.s0.layer0.qkv")
    expected = compute_time_s(qkv, SYSTEM.gpu, calibration_for(SYSTEM.gpu.name, train.framework))
    assert node.duration_micros == max(1, round(expected * 1e6))
    assert node.attr("num_ops") == round(qkv.flops) and node.attr("is_cpu_op") is False


def test_moe_context_parallel_interleaved(tmp_path: Path) -> None:
    train = TrainingSpec().with_values(
        pp=2, vpp=2, pipeline_schedule="interleaved", cp=2, ep=2, mbs=1, gbs=4, seq=256, recompute="full"
    )
    out = export_chakra(TINY_MOE, SYSTEM, train, tmp_path)
    groups = json.loads(out.comm_groups_path.read_text())
    _, nodes = read_trace(out.paths[0])
    a2a = [n for n in nodes if n.name.endswith("ep_dispatch")]
    assert a2a and {n.attr("comm_type") for n in a2a} == {CollectiveCommType.ALL_TO_ALL}
    grid = RankGrid(tp=1, cp=2, dp=2, pp=2, ep=2, etp=1)
    assert groups[a2a[0].attr("pg_name")] == list(grid.members(0, "ep")) == [0, 1]
    cp = next(n for n in nodes if n.name.endswith("cp_kv_exchange"))
    assert groups[cp.attr("pg_name")] == [0, 1] and cp.attr("comm_type") == CollectiveCommType.ALL_GATHER
    assert any(n.name.startswith("R.") for n in nodes)  # full recompute before each backward
    # m = 2 micro-batches; rank 0 holds virtual stages 0 and 2: activations 0->1 and 2->3, gradients 2->1
    assert sum(n.type is NodeType.COMM_SEND_NODE for n in nodes) == 3 * 2


def test_schedule_orders() -> None:
    for pp, m, chunks in ((4, 8, 1), (2, 4, 2), (4, 8, 3)):
        for rank in range(pp):
            items = schedule_items("1f1b", pp, rank, m, chunks)
            assert Counter(items) == Counter((k, mb, c) for k in "FB" for mb in range(m) for c in range(chunks))
            for mb in range(m):
                for c in range(chunks):
                    assert items.index(("F", mb, c)) < items.index(("B", mb, c))
        warmup = schedule_items("1f1b", 4, 0, 8, 1)[:4]
        assert warmup == [("F", 0, 0), ("F", 1, 0), ("F", 2, 0), ("F", 3, 0)]


def test_v_schedules_are_refused(tmp_path: Path) -> None:
    train = TrainingSpec().with_values(pp=2, gbs=32, pipeline_schedule="zb-v")
    with pytest.raises(ConfigError, match="not zb-v"):
        export_chakra(TINY, SYSTEM, train, tmp_path)


def test_protobuf_parses_the_files(dense) -> None:
    pytest.importorskip("google.protobuf", reason="protobuf is not installed (Chakra protobuf traces)")
    from paraplan.formats.chakra_pb import message_classes

    classes = message_classes()
    _, out, traces, _ = dense
    stream = messages(out.paths[5].read_bytes())
    meta = classes["GlobalMetadata"]()
    meta.ParseFromString(next(stream))
    assert meta.version == "0.0.4"
    parsed = []
    for blob in stream:
        node = classes["Node"]()
        node.ParseFromString(blob)
        parsed.append(node)
    ours = traces[5][1]
    assert [(n.id, n.name, int(n.type), list(n.data_deps)) for n in parsed] == [
        (n.id, n.name, int(n.type), n.data_deps) for n in ours
    ]
    send = next(n for n in parsed if n.type == NodeType.COMM_SEND_NODE)
    attrs = {a.name: a for a in send.attr}
    assert attrs["comm_src"].int32_val == 5 and attrs["comm_size"].int64_val == 2 * 512 * 256 // 2
    assert attrs["is_cpu_op"].WhichOneof("value") == "bool_val"  # a false bool is still written


def test_only_the_busiest_stage_runs_at_the_slowest_chips_pace(tmp_path: Path) -> None:
    """As the projection has it: the busiest pipeline stage (here the last, with the LM head) holds the job's slowest
    chip; the other stages' kernels take their typical time."""
    from paraplan.cost.calibration import at_scale

    model = ModelSpec(
        name="mid", num_layers=4, hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32,
        num_query_groups=8, vocab_size=128000,
    )  # fmt: skip
    system = system_preset("h100-sxm5-80gb", 1024)
    train = check(model, system, TrainingSpec().with_values(tp=8, pp=2, mbs=1, gbs=128, seq=4096))
    cal = calibration_for(system.gpu.name, train.framework).with_values(gpu_speed_cv=0.05)
    last = 1023  # pipeline rank 1
    out = export_chakra(model, system, train, tmp_path, prefix="mid", calibration=cal, ranks=(0, last))
    first_rank, last_rank = (read_trace(path) for path in out.paths)
    qkv = {
        name: next(n.duration_micros for n in nodes if n.name == name)
        for name, nodes in (("F.mb0.s0.layer0.qkv", first_rank[1]), ("F.mb0.s1.layer2.qkv", last_rank[1]))
    }
    slow = at_scale(cal, 1024).compute_slowdown
    assert slow > 1.1
    assert qkv["F.mb0.s1.layer2.qkv"] / qkv["F.mb0.s0.layer0.qkv"] == pytest.approx(slow, rel=0.02)
