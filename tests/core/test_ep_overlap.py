"""EP all-to-all overlap (Megatron's `--overlap-moe-expert-parallel-comm`) through the whole projection: the
all-to-all hides behind another micro-batch's compute in the schedule's F&B pairs, once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paraplan.cost.calibration import calibration_for
from paraplan.errors import ConfigError
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.sim.breakdown import BreakdownPart as Part
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


def test_the_hidden_all_to_all_slows_the_compute_beside_it() -> None:
    """Each second of all-to-all hidden in a pair adds `Calibration.overlap_interference` seconds to the pair's
    compute (the collective's kernels take SMs and memory bandwidth), named in the breakdown, as for every other
    hidden collective; without interference the pairs would hide it for free."""
    off, on = _pair(tp=1, pp=1, ep=8, mbs=1)
    factor = calibration_for(SYSTEM.gpu.name).overlap_interference
    hidden = on.pipeline.comm_total_s["ep"] - on.pipeline.comm_exposed_s["ep"]
    added = on.breakdown[Part.COMM_INTERFERENCE] - off.breakdown[Part.COMM_INTERFERENCE]
    assert 0 < factor < 1 and hidden > 0
    assert added == pytest.approx(factor * hidden, rel=1e-6)
    assert sum(on.breakdown.values()) == pytest.approx(on.step_time_s, rel=1e-9)
    free_cal = replace(calibration_for(SYSTEM.gpu.name, on.train.framework), overlap_interference=0.0)
    free = project_specs(MODEL, SYSTEM, on.train, ProjectionOptions(calibration=free_cal))
    assert free.step_time_s < on.step_time_s
