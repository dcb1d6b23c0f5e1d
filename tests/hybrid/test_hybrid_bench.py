"""The benchmark run on this CPU: timings, the B/W split, the optimizer step and the SQLite cache."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the 'measure' extra)")

from paraplan.graph.layers import Shard  # noqa: E402
from paraplan.measure.device import HybridUnavailable, detect  # noqa: E402
from paraplan.measure.hybrid.bench import BenchSettings  # noqa: E402
from paraplan.measure.hybrid.cache import MeasurementCache  # noqa: E402
from paraplan.measure.hybrid.job import measure  # noqa: E402
from paraplan.specs.model import ModelSpec  # noqa: E402
from paraplan.specs.training import TrainingSpec  # noqa: E402

TINY = ModelSpec(
    name="tiny", num_layers=2, hidden_size=128, ffn_hidden_size=352, num_attention_heads=4,
    num_query_groups=2, vocab_size=1000,
)  # fmt: skip


def test_measure_times_blocks_and_caches_them(tmp_path):
    devices = detect("cpu")
    shard = Shard.of(TrainingSpec(seq_length=64))
    settings = BenchSettings("cpu", "fp32", warmup=1, repeats=3, split_backward=True)
    cache = MeasurementCache(tmp_path / "h.sqlite")
    first = measure(TINY, shard, ("dense", "embedding", "head"), settings, devices, cache)
    dense = first.blocks["dense"]
    assert dense.forward_s > 0 and dense.backward_s > 0 and dense.forward.repeats == 3
    assert 0 < dense.backward_input.median_s
    assert first.blocks["embedding"].backward_input.median_s == 0.0  # token ids have no gradient
    assert first.optimizer.params > 0 and first.optimizer.seconds_per_param > 0
    assert not dense.cached and first.collectives == []
    again = measure(TINY, shard, ("dense", "embedding", "head"), settings, devices, cache)
    assert again.blocks["dense"].cached and again.optimizer.cached
    assert again.blocks["dense"].forward_s == dense.forward_s
    kinds = {row["kind"] for row in cache.rows()}
    assert kinds == {"dense", "embedding", "head", "optimizer"}


def test_cuda_request_without_a_gpu_is_a_clear_refusal():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(HybridUnavailable, match="no CUDA device"):
        detect("cuda")
