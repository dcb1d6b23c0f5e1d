"""torchtitan's compiled loss (0.1.0, June 2025 on: `build_cross_entropy_loss` compiles `cross_entropy_loss` with the
model): Inductor fuses the fp32 cast, log-softmax and nll, saves the 16-bit logits and writes a 16-bit gradient, 4
bytes a logit at the loss's peak, against eager torch's 4 saved + 8 (issue 33, held-out FSDP2 memory)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from paraplan.api import memory
from paraplan.formats import read_config
from paraplan.memory.loss import loss_extra_bytes_per_logit
from paraplan.specs.frameworks import defaults_on
from paraplan.specs.training import TrainingSpec
from paraplan.validate.measured import read_rows, release_date

VOCAB, SEQ = 128256, 4096
COMMON = dict(model="llama3.1-8b", gpu="h100-sxm5-80gb", gpus=8, fsdp=True, zero_stage=3, mbs=1, seq=SEQ, gbs=64)
DATA = Path(__file__).parents[1] / "formats" / "data" / "torchtitan"


def test_a_compiled_loss_saves_16_bit_logits_and_needs_2_bytes_more() -> None:
    eager = TrainingSpec(framework="torchtitan")
    assert loss_extra_bytes_per_logit(eager) == 8.0
    assert loss_extra_bytes_per_logit(eager.with_values(loss_compiled=True)) == 2.0
    # under TP the loss runs in loss_parallel() on DTensors: modelled eager
    tp = eager.with_values(loss_compiled=True, tensor_model_parallel_size=2)
    assert loss_extra_bytes_per_logit(tp) == 12.0
    a = memory(**COMMON, framework="torchtitan", recompute_granularity="full").peak.parts
    b = memory(**COMMON, framework="torchtitan", recompute_granularity="full", loss_compiled=True).peak.parts
    logits = SEQ * VOCAB
    assert a["activations"] - b["activations"] == pytest.approx(2 * logits)  # fp32 log-probabilities -> bf16 logits
    # the loss's transient (beyond the backward's working sets, `memory.model`) shrinks with it
    assert b["loss_working_set"] < a["loss_working_set"]
    peak_a = memory(**COMMON, framework="torchtitan", recompute_granularity="full").peak.total_bytes
    peak_b = memory(**COMMON, framework="torchtitan", recompute_granularity="full", loss_compiled=True).peak.total_bytes
    assert peak_a - peak_b >= 2 * logits


def test_torchtitan_configs_say_whether_the_loss_is_compiled(tmp_path: Path) -> None:
    text = (
        (DATA / "llama3_8b.toml").read_text().replace('[compile]\nenable = true\ncomponents = ["model", "loss"]\n', "")
    )
    assert "[compile]" not in text

    def read(extra: str):
        path = tmp_path / "c.toml"
        path.write_text(text + extra)
        return read_config(path, "torchtitan", num_gpus=64)[1]

    assert read('\n[compile]\nenable = true\ncomponents = ["model", "loss"]\n').loss_compiled
    assert not read('\n[compile]\nenable = true\ncomponents = ["model"]\n').loss_compiled
    assert not read("\n[compile]\nenable = false\n").loss_compiled
    assert read("\n[compile]\nenable = true\n").loss_compiled  # 0.2.0's default components: both


def test_the_december_2024_benchmarks_predate_the_compiled_loss(public_csv) -> None:
    """torchtitan's own benchmark rows (source torchtitan_benchmarks_202412) take the era before 0.1.0; a torchtitan
    run of today takes the compiled loss."""
    row = next(r for r in read_rows(public_csv) if r["source"] == "torchtitan_benchmarks_202412")
    assert release_date(row) == date(2024, 12, 1)
    assert not defaults_on("torchtitan", release_date(row)).settings["loss_compiled"]
    assert defaults_on("torchtitan", date(2025, 10, 18)).settings["loss_compiled"]
