"""EP all-to-all overlap (Megatron's `--overlap-moe-expert-parallel-comm`) through the whole projection: the
all-to-all hides behind another micro-batch's compute in the schedule's F&B pairs, once."""

from __future__ import annotations

import pytest

from paraplan.errors import ConfigError
from paraplan.projection import project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

MODEL, SYSTEM = model_preset("mixtral-8x7b"), system_preset("h100-sxm5-80gb", 16)


def _pair(**layout: object) -> tuple:
    train = TrainingSpec(seq_length=4096, global_batch_size=64, precision="bf16").with_values(**layout)
    off = project_specs(MODEL, SYSTEM, train)
    on = project_specs(MODEL, SYSTEM, train.with_values(moe_ep_overlap=True))
    return off, on


def test_pp1_pairs_consecutive_micro_batches() -> None:
    """pp = 1 (megatron-core 0.15.0 `combined_1f1b_schedule_for_no_pipelining`): the first forward and the last
    backward run alone, the rest in pairs; nothing hides more than the other micro-batches' compute, and the step
    is never slower."""
    off, on = _pair(tp=1, pp=1, ep=8, mbs=1)
    ep_off, ep_on = off.pipeline.comm_exposed_s["ep"], on.pipeline.comm_exposed_s["ep"]
    assert ep_off == pytest.approx(off.pipeline.comm_total_s["ep"]) and ep_off > 0  # without overlap: in full
    assert 0 < ep_on < ep_off
    assert on.step_time_s <= off.step_time_s
    assert ep_off - ep_on <= off.step_time_s - ep_off  # hidden behind compute only


def test_pp_without_virtual_stages_is_refused() -> None:
    """megatron-core 0.15.0 refuses the overlap with pp > 1 and no VPP (transformer_config.py): 1F1B has no
    pairs to run it in, so paraplan refuses it too, naming the rule."""
    train = TrainingSpec(seq_length=4096, global_batch_size=64, precision="bf16").with_values(tp=1, pp=2, ep=8, mbs=1)
    with pytest.raises(ConfigError, match="needs the interleaved schedule"):
        project_specs(MODEL, SYSTEM, train.with_values(moe_ep_overlap=True))
