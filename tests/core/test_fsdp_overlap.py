"""FSDP/ZeRO-3 overlap at the edges of a step: torch FSDP prefetches unit by unit (one unit per wrapped layer),
DeepSpeed ZeRO-3 (2021) gathers on demand and its communication adds to the compute."""

import pytest
from gpt_model import gpt

import paraplan
from paraplan.specs.presets import system_preset
from paraplan.specs.training import TrainingSpec


def _project(framework: str, hidden: int, layers: int, gpus: int, mbs: int, gbs: int) -> object:
    system = system_preset("a100-sxm4-80gb", gpus)
    train = TrainingSpec(precision="bf16", framework=framework, zero_stage=3).with_values(
        dp=gpus, mbs=mbs, gbs=gbs, seq=2048, recompute="full"
    )
    return paraplan.project(gpt(hidden, layers, vocab=50368), system, train=train)


def test_torch_fsdp_exposes_one_unit_at_each_edge() -> None:
    """One micro-batch on two nodes (MPT-3b's shape): only the first layer's gather and the last layer's
    reduce-scatter stay in front of and behind the compute, not the whole model's."""
    layers = 32
    proj = _project("llm-foundry", 2560, layers, 16, 5, 80)
    comm = proj.pipeline.comm_total_s["fsdp"]  # gather (F), gather (B), reduce-scatter per micro-batch
    exposed = proj.breakdown["fsdp_exposed"]
    assert 0 < exposed < 1.5 * comm / layers
    assert exposed < 0.02 * proj.step_time_s


def test_deepspeed_zero3_communication_adds_to_compute() -> None:
    proj = _project("deepspeed", 12288, 8, 384, 1, 384)
    comm = proj.pipeline.comm_total_s["fsdp"]
    assert proj.breakdown["fsdp_exposed"] == pytest.approx(comm, rel=1e-6)
    prefetched = _project("llm-foundry", 12288, 8, 384, 1, 384)
    assert prefetched.breakdown["fsdp_exposed"] < 0.5 * prefetched.pipeline.comm_total_s["fsdp"]
