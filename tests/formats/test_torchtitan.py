"""torchtitan job TOML: flavors, data-parallel degrees, pipeline splits, float8."""

from pathlib import Path

import pytest

from paraplan.errors import ConfigError
from paraplan.formats import read_config
from paraplan.formats.torchtitan import dump_toml, torchtitan_split

DATA = Path(__file__).parent / "data" / "torchtitan"


def test_fsdp_async_tp_float8() -> None:
    model, train, hints = read_config(DATA / "llama3_8b.toml", "torchtitan", num_gpus=64)
    assert model.num_layers == 32 and model.vocab_size == 128256
    assert train.fsdp and train.dp == 32 and train.tp == 2 and train.sequence_parallel and train.tp_comm_overlap
    assert train.gbs == 64 and train.mbs == 2  # local batch 2 x 32 FSDP ranks
    assert train.precision == "fp8_cs" and train.recompute_granularity == "selective"


def test_the_gpu_count_is_needed_when_the_shard_degree_is_minus_one() -> None:
    with pytest.raises(ConfigError, match="cannot derive the global batch"):
        read_config(DATA / "llama3_8b.toml", "torchtitan")


def test_interleaved_stages_follow_torchtitans_split() -> None:
    _, train, hints = read_config(DATA / "llama3_70b_interleaved.toml", "torchtitan")
    assert hints.num_gpus == 256  # 8 x 8 x 4 stated by the degrees
    assert train.vpp == 2 and train.pipeline_schedule == "interleaved"
    assert train.pipeline_layout == (10, 11, 10, 10, 10, 10, 10, 9)
    assert train.recompute_granularity == "full" and train.num_microbatches == 8


def test_zbv_expert_parallel_rowwise_float8() -> None:
    model, train, _ = read_config(DATA / "deepseek_v3_671b.toml", "torchtitan", num_gpus=512)
    assert model.is_mla and model.mtp_num_layers == 0  # torchtitan trains DeepSeek-V3 without MTP
    assert train.pipeline_schedule == "zb-v" and len(train.pipeline_layout) == 16
    assert train.ep == 64 and train.etp == 1 and train.precision == "fp8_blockwise"


def test_split_matches_torchtitan() -> None:
    assert torchtitan_split(32, 2, 1, 1) == [16, 16]
    assert torchtitan_split(61, 16, 1, 1) == [3, *[4] * 14, 2]
    assert torchtitan_split(8, 1, 1, 1) == [8]


def test_mistakes_are_listed() -> None:
    with pytest.raises(ConfigError) as err:
        read_config(DATA / "bad.toml", "torchtitan", num_gpus=16)
    text = "\n".join(err.value.problems)
    for fragment in (
        "unknown key training.tensor_parallel_degree (torchtitan moved it to parallelism)",
        "unknown section 'optimiser' (did you mean optimizer?)",
        "local_batch_size 2 must be a multiple of pipeline_parallel_microbatch_size 3",
        "float8 settings are given but model.converters does not enable float8",
        "does not give every one of 2 ranks the same number of stages",
        "selective_ac_option is set but mode is full",
    ):
        assert fragment in text, fragment


def test_toml_writer_reads_back() -> None:
    import tomllib

    doc = {"a": {"s": 'x"y', "n": 3, "f": 1.5, "b": True, "l": ["p", "q"]}, "quantize.linear.float8": {"r": "rowwise"}}
    back = tomllib.loads(dump_toml(doc))
    assert back["a"] == doc["a"] and back["quantize"]["linear"]["float8"] == {"r": "rowwise"}


def test_disable_loss_parallel_is_noted_not_modelled(tmp_path: Path) -> None:
    """The memory model takes torchtitan's TP loss as loss_parallel (memory.loss); a config that turns it off is
    told so."""
    text = (DATA / "llama3_8b.toml").read_text()
    off = tmp_path / "off.toml"
    off.write_text(text.replace("[parallelism]", "[parallelism]\ndisable_loss_parallel = true", 1))
    _, _, hints = read_config(off, "torchtitan", num_gpus=64)
    assert any("disable_loss_parallel" in note for note in hints.notes)
    _, _, default = read_config(DATA / "llama3_8b.toml", "torchtitan", num_gpus=64)
    assert not any("disable_loss_parallel" in note for note in default.notes)
