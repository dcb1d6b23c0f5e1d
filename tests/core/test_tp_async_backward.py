"""The backward's tensor-parallel collectives that run beside GEMMs (`TrainingSpec.tp_async_backward`,
`paraplan.cost.block._async_tp_pool`, `paraplan.graph.backward`)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.cost.block import BlockContext, block_cost
from paraplan.cost.calibration import calibration_for
from paraplan.graph import layers as L
from paraplan.graph.backward import TP_REGATHER, backward_ops
from paraplan.graph.ops import CommKind, OpKind
from paraplan.projection import group_placements
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.validate.measured import read_rows, run_from_row

GPT_22B = ModelSpec(
    name="gpt-22b", num_layers=48, hidden_size=6144, ffn_hidden_size=24576, num_attention_heads=64,
    vocab_size=51200, activation="gelu", norm="layernorm", position="learned", attention_bias=True, dropout=True,
)  # fmt: skip


def _train(sp: bool, asynchronous: bool = True, mbs: int = 4, seq: int = 2048) -> TrainingSpec:
    return TrainingSpec().with_values(
        tp=8, dp=1, mbs=mbs, gbs=mbs, seq=seq, sp=sp, tp_async_backward=asynchronous, attention_backend="flash"
    )


def _layer_cost(train: TrainingSpec, model: ModelSpec = GPT_22B, nic_gpus_per_node: int = 8):
    system = system_preset("a100-sxm4-80gb", 8).with_overrides(gpus_per_node=nic_gpus_per_node)
    ctx = BlockContext(
        system, calibration_for(system.gpu.name), group_placements(train, system), False,
        tp_async_backward=train.tp_async_backward,
    )  # fmt: skip
    return block_cost(L.decoder_layer_ops(model, L.Shard.of(train), moe=False), "none", ctx)


def _backward_comms(train: TrainingSpec) -> list:
    forward = L.decoder_layer_ops(GPT_22B, L.Shard.of(train), moe=False)
    return [b for op in forward for b in backward_ops(op) if b.kind is OpKind.COMM]


def test_sequence_parallel_backward_gathers_the_linear_input_again() -> None:
    """Under SP a column-parallel linear keeps only its input's sequence shard: its backward reduce-scatters the
    input gradient and gathers the input again for the weight gradient; the row-parallel output's reduce-scatter
    comes back as an all-gather. Per layer (attention and MLP): 2 + 2 gathers, 2 reduce-scatters."""
    kinds = [(op.comm.kind, TP_REGATHER <= op.tags) for op in _backward_comms(_train(sp=True))]
    assert kinds.count((CommKind.ALL_GATHER, True)) == 2
    assert kinds.count((CommKind.ALL_GATHER, False)) == 2
    assert kinds.count((CommKind.REDUCE_SCATTER, False)) == 2
    assert len(kinds) == 6
    # without SP: one all-reduce per region, and nothing to gather again
    assert [op.comm.kind for op in _backward_comms(_train(sp=False))] == [CommKind.ALL_REDUCE] * 2


def test_input_gradient_all_reduce_hides_behind_the_weight_gradient() -> None:
    """GPT 22B at tp 8 (Korthikanti et al. 2022): the weight-gradient GEMMs of a layer take far longer than its two
    100 MB all-reduces over NVLink, so the asynchronous backward exposes none of them; the synchronous one (2020-21
    Megatron-LM) waits for both."""
    waiting = _layer_cost(_train(sp=False, asynchronous=False))
    beside = _layer_cost(_train(sp=False))
    all_reduces = beside.comm_total_s["tp"] / 2  # forward and backward move the same bytes
    assert beside.backward_weight_s > all_reduces
    assert waiting.backward_input_s - beside.backward_input_s == pytest.approx(all_reduces, rel=1e-9)
    assert beside.forward_s == waiting.forward_s  # the forward's all-reduces stay in the stream
    assert beside.comm_total_s == waiting.comm_total_s


def test_sequence_parallel_exposes_only_the_output_gradient_gather() -> None:
    cost = _layer_cost(_train(sp=True))
    comms = _backward_comms(_train(sp=True))
    gathers = [op for op in comms if op.comm.kind is CommKind.ALL_GATHER and not TP_REGATHER <= op.tags]
    sync = _layer_cost(_train(sp=True, asynchronous=False))
    assert cost.backward_comm_exposed_s < sync.backward_comm_exposed_s
    # what stays exposed is the two output-gradient gathers: half the gathers, a third of the backward's bytes
    share = sum(op.comm.bytes for op in gathers) / sum(op.comm.bytes for op in comms)
    assert share == pytest.approx(1 / 3)
    assert cost.backward_comm_exposed_s == pytest.approx(sync.backward_comm_exposed_s * share, rel=0.05)


def test_exposed_where_the_collective_outlasts_the_gemms() -> None:
    """A small layer with TP across nodes (one GPU per node): the all-reduces outlast the weight-gradient GEMMs and
    the host's launches, and the excess shows; running them beside still saves what those take."""
    small = replace(GPT_22B, hidden_size=512, ffn_hidden_size=2048, num_attention_heads=8)
    train = _train(sp=False, mbs=1, seq=512)
    beside = _layer_cost(train, small, nic_gpus_per_node=1)
    waiting = _layer_cost(replace(train, tp_async_backward=False), small, nic_gpus_per_node=1)
    backward_all_reduces = waiting.comm_total_s["tp"] / 2
    assert backward_all_reduces > beside.backward_weight_s + beside.host_bound_s
    assert beside.backward_comm_exposed_s > 0
    hidden = waiting.backward_input_s - beside.backward_input_s
    assert 0 < hidden < backward_all_reduces


def test_megatron_lm_rows_before_2022_wait_for_the_collective(public_csv) -> None:
    """The source's date (a commit's ISO date, else its arXiv identifier's month) decides: the 2020 README and the
    SC21 paper (arXiv 2104) predate Megatron-LM's asynchronous backward all-reduce, Korthikanti et al. (2205) use it,
    and other frameworks keep the default."""
    first = {}
    for row in read_rows(public_csv):
        first.setdefault(row["source"], row)
    expected = {
        "MegatronLM_README_2020": False,
        "Narayanan2021_SC21_Table1": False,
        "Narayanan2021_SC21_Table2": False,
        "Korthikanti2022_Table5": True,
        "vTrain_MICRO24_multi": True,
        "NeMo_perf_summary_24.07": True,
    }
    for source, value in expected.items():
        run = run_from_row(first[source])
        assert run.train.tp_async_backward is value, source
        assert any(a.key == "tp_async_backward" for a in run.defaults_used) is (not value), source


def test_cli_switch() -> None:
    """`paraplan project --no-tp-async-backward` projects the synchronous collectives (slower at tp 8) and says so."""
    args = ["project", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "64", "--tp", "8", "--pp", "8",
            "--gbs", "64", "--seq", "2048", "--recompute", "full", "--json"]  # fmt: skip
    runner = CliRunner()
    on, off = (json.loads(runner.invoke(app, args + extra).output) for extra in ([], ["--no-tp-async-backward"]))
    assert on["config"]["tp_async_backward"] is True and off["config"]["tp_async_backward"] is False
    assert off["step_time_s"] > on["step_time_s"]
