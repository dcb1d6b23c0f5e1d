"""Geo's stages are the projection's stage costs (`projection.stage_costs`), not a copy of them."""

from dataclasses import replace

import pytest

from paraplan.geo.stages import TrainSetup, pipeline_stages, stage_cost, stage_sync
from paraplan.graph import layers as L
from paraplan.graph.partition import VirtualStage
from paraplan.projection import stage_costs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

H100 = system_preset("h100-sxm5-80gb", 16)


def _setup(model: str = "llama3.1-8b", **values) -> TrainSetup:
    train = TrainingSpec().with_values(seq=2048, mbs=1, gbs=32, **values)
    return TrainSetup(model_preset(model), train)


@pytest.mark.parametrize("slowest", [True, False])
def test_a_geo_stage_is_the_projection_stage(slowest: bool) -> None:
    setup = _setup()
    geo = stage_cost(setup, H100, "a", 2, 8, 9, embedding=False, head=True, slowest=slowest)
    (core,) = stage_costs(
        setup.model, H100, setup.spec(2, 1, 1), (VirtualStage(0, 8, 9, False, True),), slowest=slowest
    )
    assert (geo.forward_s, geo.backward_input_s, geo.backward_weight_s) == (
        core.forward_s,
        core.backward_input_s,
        core.backward_weight_s,
    )
    assert geo.params_per_gpu == core.dense_params + core.expert_params


def test_the_first_stage_holds_the_embedding_table() -> None:
    setup = _setup()
    model = setup.model
    first = stage_cost(setup, H100, "a", 2, 0, 8, embedding=True, head=False)
    middle = stage_cost(setup, H100, "a", 2, 8, 8, embedding=False, head=False)
    table = L.padded_vocab(model, 2) // 2 * model.hidden_size
    assert first.params_per_gpu - middle.params_per_gpu == pytest.approx(table, rel=1e-3)


def test_the_last_stage_holds_the_mtp_modules() -> None:
    model = model_preset("deepseek-v3")
    assert model.mtp_num_layers
    with_mtp = TrainSetup(model, TrainingSpec().with_values(seq=4096, mbs=1, gbs=64))
    without = replace(with_mtp, model=replace(model, mtp_num_layers=0))
    system = system_preset("h200-sxm-141gb", 8)
    n = model.num_layers
    last = stage_cost(with_mtp, system, "a", 8, n - 2, 2, embedding=False, head=True)
    plain = stage_cost(without, system, "a", 8, n - 2, 2, embedding=False, head=True)
    assert last.forward_s > plain.forward_s
    assert last.params_per_gpu > plain.params_per_gpu


def test_boundary_bytes_follow_the_activation_width() -> None:
    bf16 = stage_cost(_setup(), H100, "a", 2, 0, 4, embedding=True, head=False)
    fp32 = stage_cost(_setup(precision="fp32"), H100, "a", 2, 0, 4, embedding=True, head=False)
    assert fp32.boundary_bytes == 2 * bf16.boundary_bytes


def test_balanced_layout_covers_every_layer() -> None:
    setup = _setup()
    stages = pipeline_stages(setup, [("a", H100)] * 2 + [("b", H100)] * 2, 2)
    assert stages is not None
    assert sum(s.num_layers for s in stages) == setup.model.num_layers
    assert [s.first_layer for s in stages] == [0, *(sum(s.num_layers for s in stages[:i]) for i in range(1, 4))]


@pytest.mark.parametrize("distributed_optimizer", [True, False])
def test_data_parallel_sync_is_the_projection_stage(distributed_optimizer: bool) -> None:
    setup = _setup(use_distributed_optimizer=distributed_optimizer)
    stages = pipeline_stages(setup, [("a", H100)] * 2, 2)
    assert stages is not None
    reduce_s, gather_s, optimizer_s = stage_sync(setup, H100, 2, stages, 0, 4)
    (core,) = stage_costs(
        setup.model, H100, setup.spec(2, 1, 4), (VirtualStage(0, 0, stages[0].num_layers, True, False),)
    )
    assert (reduce_s, gather_s, optimizer_s) == (core.dp_grad_reduce_s, core.dp_param_gather_s, core.optimizer_s)
    assert reduce_s > 0 and optimizer_s > 0 and (gather_s > 0) == distributed_optimizer
