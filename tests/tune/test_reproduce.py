"""The tuner's Megatron-LM arguments are the Megatron writer's (`formats/`), and read back to the plan."""

import random
from dataclasses import replace

import pytest

from paraplan.formats.megatron import read_megatron
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.validate import check
from paraplan.tune.candidate import TuneProblem, to_training
from paraplan.tune.legality import candidate_problems
from paraplan.tune.reproduce import megatron_args
from paraplan.tune.space import SearchSpace

RUNS = {"llama3.1-8b x16": ("llama3.1-8b", 16, 64), "mixtral-8x7b x32": ("mixtral-8x7b", 32, 128)}


@pytest.mark.parametrize("run", list(RUNS))
def test_reproduced_arguments_read_back_to_the_same_training_spec(run: str) -> None:
    model_name, gpus, gbs = RUNS[run]
    problem = TuneProblem(model_preset(model_name), (system_preset("h100-sxm5-80gb", gpus),), gbs, 4096)
    space = SearchSpace(problem)
    structures = list(space.structures())
    checked = noted = 0
    for base in random.Random(0).sample(structures, 120):
        for c in space.recompute_chain(base):
            train = to_training(problem, c)
            if candidate_problems(problem, c, train):
                continue
            system = problem.system(c.num_gpus)
            train = check(problem.model, system, train)
            text = megatron_args(problem, train)
            args, _, note = text.partition("  # ")
            back = check(problem.model, system, read_megatron(args, num_gpus=c.num_gpus, model=problem.model).train)
            if note:  # a schedule Megatron-LM does not have: the arguments run its 1F1B, and say so
                noted += 1
                assert train.pipeline_schedule != back.pipeline_schedule
                back = replace(back, pipeline_schedule=train.pipeline_schedule)
            if "EP overlap" in note:  # DualPipe(V)'s own pairs; Megatron's 1F1B has none and refuses the flag
                assert train.moe_ep_overlap and not back.moe_ep_overlap
                back = replace(back, moe_ep_overlap=True)
            assert back == train, text
            checked += 1
    assert checked > 200 and 0 < noted < checked


def test_megatron_arguments_omit_the_model() -> None:
    problem = TuneProblem(model_preset("mixtral-8x7b"), (system_preset("h100-sxm5-80gb", 32),), 128, 4096)
    c = next(c for c in SearchSpace(problem).structures() if c.ep > 1 and c.tp > 1)
    text = megatron_args(problem, check(problem.model, problem.system(32), to_training(problem, c)))
    assert "--expert-model-parallel-size" in text and "--moe-token-dispatcher-type" in text
    assert "--num-layers" not in text and "--hidden-size" not in text and "--num-experts" not in text
