"""NeMo 2.0 recipes and Megatron-Bridge ConfigContainer YAML."""

from pathlib import Path

import pytest

from paraplan.errors import ConfigError
from paraplan.formats import detect_format, read_config

DATA = Path(__file__).parent / "data"


def test_bridge_config_container() -> None:
    model, train, hints = read_config(DATA / "nemo/llama3_70b_bridge.yaml", "nemo")
    assert model.num_layers == 80 and model.activation == "swiglu" and not model.tied_embeddings
    assert (train.tp, train.pp, train.vpp, train.cp) == (4, 4, 5, 2) and train.pipeline_schedule == "interleaved"
    assert train.tp_comm_overlap and train.use_distributed_optimizer and train.framework == "nemo-megatron"
    assert train.recompute_granularity == "none" and train.precision == "bf16"
    assert hints.num_gpus is None  # a Bridge recipe does not say how many GPUs


def test_nemo2_recipe() -> None:
    model, train, hints = read_config(DATA / "nemo/mixtral_8x7b_nemo2.yaml", "nemo")
    assert (hints.num_gpus, hints.gpus_per_node) == (64, 8)  # trainer.devices x trainer.num_nodes
    assert model.num_experts == 8 and model.vocab_size == 32000  # vocabulary from data.tokenizer
    assert (train.pp, train.vpp, train.ep, train.etp) == (4, 8, 8, 1)
    assert train.precision == "fp8_cs" and train.recompute_granularity == "full"


def test_mistakes_are_listed() -> None:
    with pytest.raises(ConfigError) as err:
        read_config(DATA / "nemo/bad_bridge.yaml", "nemo")
    text = "\n".join(err.value.problems)
    for fragment in (
        "unknown key 'tensor_model_paralel_size' (did you mean tensor_model_parallel_size?)",
        "optimizer.use_distributed_optimizer is True but ddp.use_distributed_optimizer is False",
        "model.seq_length is 8192 but dataset.sequence_length is 4096",
        "model.recompute_granularity selective does not take model.recompute_method",
        "precision 'bf16_with_fp7_mixed' is not one paraplan models",
    ):
        assert fragment in text, fragment


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("nemo/llama3_70b_bridge.yaml", "nemo"),
        ("nemo/mixtral_8x7b_nemo2.yaml", "nemo"),
        ("primus/exp_llama3.1_8b.yaml", "primus"),
        ("torchtitan/llama3_8b.toml", "torchtitan"),
        ("megatron/llama3_8b_pretrain.sh", "megatron"),
        ("megatron/deepseek_v3_args.txt", "megatron"),
        ("hf/qwen3-30b-a3b/config.json", "hf"),
    ],
)
def test_detect_format(name: str, fmt: str) -> None:
    assert detect_format(DATA / name) == fmt
