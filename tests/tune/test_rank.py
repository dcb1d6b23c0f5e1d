"""The tuner's ranking (`tune.tuner.rank`): the order keys of the candidates built for the leaders and their ties only,
the same list as sorting every fitting evaluation by the whole key."""

from __future__ import annotations

import random

import pytest

from paraplan.tune.candidate import Candidate
from paraplan.tune.evaluate import Evaluation
from paraplan.tune.tuner import rank, score


def _full_sort(evaluations: list[Evaluation], top_k: int) -> list[Evaluation]:
    fitting = [e for e in evaluations if e.fits]
    return sorted(fitting, key=lambda e: (-score(e), e.peak_gib, e.candidate.sort_key()))[:top_k]


def _evaluations(rng: random.Random, count: int, nan: bool) -> list[Evaluation]:
    out = []
    for i in range(count):
        candidate = Candidate.of(
            64, precision="bf16", tp=rng.choice([1, 2, 4, 8]), cp=1, pp=rng.choice([1, 2, 4]), vpp=1, schedule="1f1b",
            ep=1, etp=1, mbs=rng.choice([1, 2]), sp=False, sharding=rng.choice(["ddp", "dist_opt"]), recompute="none",
            recompute_layers=None, overlap_grad_reduce=False, overlap_param_gather=False, tp_comm_overlap=False,
            ep_overlap=False,
        )  # fmt: skip
        speed = float(rng.choice([100, 200, 300, 300, 400]))  # many ties in throughput and in memory
        if nan and i % 7 == 3:
            speed = float("nan")
        out.append(Evaluation(candidate, 1.0, speed, 0.4, float(rng.choice([10, 20, 20, 30])), rng.random() < 0.8))
    return out


@pytest.mark.parametrize("nan", [False, True])
def test_rank_is_the_full_sort(nan: bool) -> None:
    rng = random.Random(7 + nan)
    for _ in range(30):
        evaluations = _evaluations(rng, rng.randint(0, 60), nan)
        for top_k in (1, 3, 5, 10, 100):
            got, want = rank(evaluations, top_k), _full_sort(evaluations, top_k)
            assert [id(e) for e in got] == [id(e) for e in want]
