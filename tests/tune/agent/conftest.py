from pathlib import Path

import pytest

from paraplan.api import agent_from_recipe
from paraplan.tune.agent import AgentOptions, AgentResult

DATA = Path(__file__).resolve().parents[2] / "formats" / "data"

RECIPES = [
    # (file, GPU preset, GPU count where the file does not state it): the counts tests/formats/test_round_trip.py uses
    ("megatron/deepseek_v3_args.txt", "h100-sxm5-80gb", 1024),
    ("torchtitan/deepseek_v3_671b.toml", "h100-sxm5-80gb", 512),
    ("nemo/mixtral_8x7b_nemo2.yaml", "h100-sxm5-80gb", None),
    ("primus/exp_mixtral_8x7b_zb.yaml", "mi300x", 64),
    ("nemo/llama3_70b_bridge.yaml", "h100-sxm5-80gb", 64),
    ("torchtitan/llama3_70b_interleaved.toml", "h100-sxm5-80gb", None),
    ("megatron/gpt3_175b_interleaved.txt", "a100-sxm4-80gb", None),
]


@pytest.fixture(scope="session")
def recipe_runs() -> dict[str, AgentResult]:
    """The rules agent from every shipped published recipe (the default budget of 60 proposals each; a few seconds).
    The README's agent table is these runs."""
    return {name: agent_from_recipe(DATA / name, gpu, gpus, AgentOptions(budget=60)) for name, gpu, gpus in RECIPES}


@pytest.fixture()
def mixtral_recipe() -> Path:
    return DATA / "nemo" / "mixtral_8x7b_nemo2.yaml"


@pytest.fixture(scope="session")
def recipes() -> list[tuple[str, str, int | None]]:
    return RECIPES


@pytest.fixture(scope="session")
def formats_data() -> Path:
    return DATA
