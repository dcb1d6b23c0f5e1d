"""The production knobs round-trip through every format that has them: Megatron arguments, Primus YAML (with its
recompute by layer index), NeMo / Megatron-Bridge YAML and torchtitan TOML (its CPU offload); the formats that lack
one say so (strict writing refuses)."""

from __future__ import annotations

import pytest

from paraplan.errors import ConfigError
from paraplan.formats import emit, read_config
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import check, resolve_dp

SYSTEM = system_preset("h100-sxm5-80gb", 16)
KNOB_FIELDS = (
    "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules", "recompute_layer_ids",
    "moe_pad_expert_input_to_capacity", "moe_expert_capacity_factor", "cuda_graph_scope", "cpu_offloading_num_layers",
    "optimizer_cpu_offload", "optimizer_offload_fraction", "use_precision_aware_optimizer", "exp_avg_dtype",
    "exp_avg_sq_dtype", "ddp_bucket_size",
)  # fmt: skip

CASES = {
    "uniform runs": ("llama3.1-8b", dict(tp=2, recompute="full", recompute_method="uniform", recompute_num_layers=4)),
    "block": ("llama3.1-8b", dict(tp=2, pp=2, recompute="full", recompute_num_layers=3)),
    "modules, drop-and-pad, graphs": (
        "mixtral-8x7b",
        dict(
            tp=2,
            ep=4,
            sp=True,
            recompute="selective",
            recompute_modules=("moe_act", "layernorm"),
            moe_pad_expert_input_to_capacity=True,
            moe_expert_capacity_factor=1.25,
            cuda_graph_scope="layer",
        ),
    ),  # fmt: skip
    "offloads": (
        "llama3.1-8b",
        dict(
            tp=2, dist_opt=True, cpu_offloading_num_layers=8, optimizer_cpu_offload=True, optimizer_offload_fraction=0.5
        ),
    ),
    "ddp bucket size": ("llama3.1-8b", dict(tp=2, dist_opt=True, overlap_grad_reduce=True, ddp_bucket_size=20_000_000)),
    "full-iteration graph, bf16 moments": (
        "llama3.1-8b",
        dict(
            tp=2,
            dist_opt=True,
            cuda_graph_scope="full_iteration",
            use_precision_aware_optimizer=True,
            exp_avg_dtype="bf16",
            exp_avg_sq_dtype="bf16",
        ),
    ),  # fmt: skip
}


def _spec(model: str, values: dict) -> TrainingSpec:
    train = resolve_dp(TrainingSpec().with_values(gbs=64, seq=4096, **values), SYSTEM)
    return check(model_preset(model), SYSTEM, train)


def _knobs(train: TrainingSpec) -> dict:
    return {name: getattr(train, name) for name in KNOB_FIELDS}


@pytest.mark.parametrize("fmt", ["megatron", "primus", "nemo"])
@pytest.mark.parametrize("case", list(CASES))
def test_knobs_round_trip(fmt: str, case: str) -> None:
    model_name, values = CASES[case]
    model = model_preset(model_name)
    train = _spec(model_name, values)
    text = emit(fmt, model, SYSTEM, train, strict=True)
    back = resolve_dp(read_config(text, fmt, num_gpus=16, env={}).train, SYSTEM)
    assert _knobs(back) == _knobs(train)


def test_primus_recompute_layer_ids_round_trip_and_the_others_refuse_them() -> None:
    model = model_preset("llama3.1-8b")
    train = _spec("llama3.1-8b", dict(tp=2, pp=2, recompute="full", recompute_layer_ids=(0, 5, 17)))
    text = emit("primus", model, SYSTEM, train, strict=True)
    assert "recompute_layer_ids" in text and "recompute_method" not in text
    back = read_config(text, "primus", num_gpus=16, env={}).train
    assert back.recompute_layer_ids == (0, 5, 17) and back.recompute_num_layers is None
    for fmt in ("megatron", "nemo", "torchtitan"):
        with pytest.raises(ConfigError, match="layer ids"):
            emit(fmt, model, SYSTEM, train, strict=True)


def test_primus_rejects_bad_layer_ids(tmp_path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "work_group: amd\nuser_name: root\nexp_name: x\nworkspace: ./output\nmodules:\n  pre_trainer:\n"
        "    framework: megatron\n    config: pre_trainer.yaml\n    model: llama3.1_8B.yaml\n    overrides:\n"
        "      recompute_granularity: full\n      recompute_layer_ids: [a, 2]\n"
    )
    with pytest.raises(ConfigError, match="recompute_layer_ids must be a list of layer indices"):
        read_config(exp, "primus", num_gpus=8, env={})


MEGATRON_BASE = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --swiglu --normalization RMSNorm --position-embedding-type rope "
    "--untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 16 --bf16 "
)


def _megatron(flags: str):
    return read_config(MEGATRON_BASE + flags, "megatron", num_gpus=8, env={})


def test_megatron_flags_as_megatron_core_spells_them() -> None:
    uniform_one = _megatron("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
    assert uniform_one.train.recompute_num_layers is None  # every layer its own checkpoint: paraplan's default
    runs = _megatron("--recompute-granularity full --recompute-method uniform --recompute-num-layers 2").train
    assert (runs.recompute_method, runs.recompute_num_layers) == ("uniform", 2)
    modules = _megatron("--recompute-granularity selective --recompute-modules core_attn mlp").train
    assert modules.recompute_modules == ("core_attn", "mlp")
    te_graph = _megatron("--cuda-graph-impl transformer_engine --cuda-graph-scope attn")
    assert te_graph.train.cuda_graph_scope == "layer"
    assert any("attn" in note and "whole layer" in note for note in te_graph.hints.notes)
    assert _megatron("--enable-cuda-graph").train.cuda_graph_scope == "layer"
    full = _megatron("--cuda-graph-impl local --cuda-graph-scope full_iteration").train
    assert full.cuda_graph_scope == "full_iteration"
    off = _megatron("--cpu-offloading --cpu-offloading-num-layers 6 --optimizer-cpu-offload").train
    assert (off.cpu_offloading_num_layers, off.optimizer_cpu_offload, off.optimizer_offload_fraction) == (6, True, 1.0)


def test_ddp_bucket_size_in_each_format_s_own_words() -> None:
    """`--ddp-bucket-size` (Megatron / Primus destination `ddp_bucket_size`), `ddp.bucket_size` in Megatron-Bridge
    (DistributedDataParallelConfig.bucket_size); torchtitan has no such bucket and strict writing refuses it."""
    assert _megatron("--overlap-grad-reduce --ddp-bucket-size 25000000").train.ddp_bucket_size == 25_000_000
    assert _megatron("--overlap-grad-reduce").train.ddp_bucket_size is None
    assert _megatron("--overlap-grad-reduce").train.ddp_impl == "megatron-core"
    assert _megatron("--DDP-impl torch --overlap-grad-reduce").train.ddp_impl == "torch"  # Megatron-LM before 2023
    model = model_preset("llama3.1-8b")
    train = _spec("llama3.1-8b", dict(tp=2, overlap_grad_reduce=True, ddp_bucket_size=20_000_000))
    assert "--ddp-bucket-size 20000000" in emit("megatron", model, SYSTEM, train, strict=True)
    nemo = emit("nemo", model, SYSTEM, train, strict=True)
    assert "bucket_size: 20000000" in nemo and "ddp_bucket_size" not in nemo
    assert "ddp_bucket_size: 20000000" in emit("primus", model, SYSTEM, train, strict=True)
    with pytest.raises(ConfigError, match="DDP bucket size"):
        emit("torchtitan", model, SYSTEM, train, strict=True)
    with pytest.raises(ConfigError, match="ddp_bucket_size must be a positive"):
        _spec("llama3.1-8b", dict(tp=2, ddp_bucket_size=0))
    with pytest.raises(ConfigError, match="ddp_bucket_size applies to Megatron's DDP"):
        _spec("llama3.1-8b", dict(tp=2, fsdp=True, ddp_bucket_size=20_000_000))


def test_torchtitan_cpu_offload_round_trip() -> None:
    model = model_preset("llama3.1-8b")
    train = _spec(
        "llama3.1-8b", dict(tp=2, sp=True, fsdp=True, overlap_grad_reduce=True, optimizer_cpu_offload=True,
                            framework="torchtitan"),
    )  # fmt: skip
    text = emit("torchtitan", model, SYSTEM, train, strict=True)
    assert "enable_cpu_offload = true" in text
    assert read_config(text, "torchtitan", num_gpus=16, env={}).train.optimizer_cpu_offload
    graphs = _spec("llama3.1-8b", dict(tp=2, sp=True, fsdp=True, cuda_graph_scope="layer", framework="torchtitan"))
    with pytest.raises(ConfigError, match="CUDA graphs"):
        emit("torchtitan", model, SYSTEM, graphs, strict=True)
