"""The production knobs as optional tuner axes: held off by default (the default space, its keys and the golden
tuner runs do not move), searched when `--fix`ed, carried into the training spec and back."""

from __future__ import annotations

import pytest

from paraplan.errors import ConfigError
from paraplan.tune.candidate import KNOB_DEFAULTS, from_training, to_training
from paraplan.tune.space import SearchSpace, parse_constraints
from paraplan.tune.tuner import TuneOptions, tune


def test_default_space_has_no_knob_on(dense_problem, dense_limits) -> None:
    space = SearchSpace(dense_problem, dense_limits)
    structures = list(space.structures())
    assert space.knob_combinations() == [{}]
    assert all(c.knobs() == {} for c in structures)
    assert all("=" not in c.key() for c in structures[::40])
    assert space.count_structures() == len(structures)


def test_fixed_knob_values_multiply_the_space(dense_problem) -> None:
    base = SearchSpace(dense_problem, parse_constraints(["tp=2", "pp=1", "cp=1"], {}))
    both = SearchSpace(dense_problem, parse_constraints(["tp=2", "pp=1", "cp=1", "cuda_graphs=none,layer"], {}))
    n = len(list(base.structures()))
    structures = list(both.structures())
    assert len(structures) == 2 * n == both.count_structures()
    assert {c.knob("cuda_graphs") for c in structures} == {"none", "layer"}
    graphed = next(c for c in structures if c.knobs())
    assert to_training(dense_problem, graphed).cuda_graph_scope == "layer"
    assert "cuda_graphs=layer" in graphed.key() and "cuda_graphs=layer" in graphed.describe()
    for c in structures[::7]:
        assert from_training(dense_problem, to_training(dense_problem, c), c.num_gpus) == c


@pytest.mark.parametrize(
    ("fix", "field", "value"),
    [
        ("optimizer_offload=0.5", "optimizer_offload_fraction", 0.5),
        ("activation_offload=4", "cpu_offloading_num_layers", 4),
        ("optimizer_states=bf16", "exp_avg_sq_dtype", "bf16"),
        ("cuda_graphs=full_iteration", "cuda_graph_scope", "full_iteration"),
    ],
)
def test_each_knob_axis_reaches_the_training_spec(dense_problem, fix: str, field: str, value: object) -> None:
    space = SearchSpace(dense_problem, parse_constraints(["tp=2", "pp=1", "cp=1", "mbs=1", fix], {}))
    c = next(iter(space.structures()))
    assert getattr(to_training(dense_problem, c), field) == value


def test_moe_capacity_is_searched_on_moe_models_only(dense_problem, moe_problem) -> None:
    limits = parse_constraints(["tp=1", "pp=1", "cp=1", "mbs=1", "moe_capacity=0,1.25"], {})
    assert SearchSpace(dense_problem, limits).knob_values("moe_capacity") == [KNOB_DEFAULTS["moe_capacity"]]
    moe = list(SearchSpace(moe_problem, limits).structures())
    padded = next(c for c in moe if c.knob("moe_capacity") == 1.25)
    train = to_training(moe_problem, padded)
    assert train.moe_pad_expert_input_to_capacity and train.moe_expert_capacity_factor == 1.25


def test_bad_knob_values_are_refused() -> None:
    with pytest.raises(ConfigError) as err:
        parse_constraints(["cuda_graphs=all", "optimizer_offload=2", "activation_offload=-1", "optimizer_states=x"], {})
    assert len(err.value.problems) == 4


def test_the_tuner_ranks_bf16_moments_ahead(dense_problem) -> None:
    limits = parse_constraints(
        ["tp=2", "pp=1", "cp=1", "mbs=1", "sharding=dist_opt", "recompute=none", "optimizer_states=fp32,bf16"], {}
    )
    result = tune(dense_problem, limits, TuneOptions(method="exhaustive", top_k=50, seed_planner=False))
    by_states = {e.candidate.knob("optimizer_states"): e for e in result.evaluations if e.candidate.sp}
    assert set(by_states) == {"fp32", "bf16"}
    assert by_states["bf16"].step_time_s < by_states["fp32"].step_time_s
    assert by_states["bf16"].peak_gib < by_states["fp32"].peak_gib
