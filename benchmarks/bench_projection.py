"""One projection of llama3.1-405b on 16,384 H100 (TP8 PP16 VPP8, gbs 2048, seq 8192): target < 50 ms.

Prints the cold time (empty caches: what the first call of a session costs) and the warm time (what the
tuner sees for repeated sub-problems), and their ratio to the target. Run: python benchmarks/bench_projection.py
"""

from __future__ import annotations

import statistics
import time

from paraplan.projection import _cached_block, model_flops_per_sequence, project_specs
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.training import TrainingSpec

TARGET_MS = 50.0


def main() -> None:
    model = model_preset("llama3.1-405b")
    system = system_preset("h100-sxm5-80gb", 16384)
    train = TrainingSpec().with_values(
        tp=8, pp=16, vpp=8, gbs=2048, seq=8192, mbs=1, sp=True, pipeline_schedule="interleaved",
        account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True,
        use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True,
    )  # fmt: skip
    cold = []
    for _ in range(5):
        _cached_block.cache_clear()
        model_flops_per_sequence.cache_clear()
        t0 = time.perf_counter()
        result = project_specs(model, system, train)
        cold.append((time.perf_counter() - t0) * 1e3)
    warm = []
    for _ in range(20):
        t0 = time.perf_counter()
        project_specs(model, system, train)
        warm.append((time.perf_counter() - t0) * 1e3)
    cold_ms, warm_ms = statistics.median(cold), statistics.median(warm)
    print(f"llama3.1-405b on 16384 x H100, TP8 PP16 VPP8, {result.train.num_microbatches} micro-batches: "
          f"step {result.step_time_s:.3f} s, MFU {result.mfu:.1%}")  # fmt: skip
    print(f"cold projection: {cold_ms:.2f} ms  (target {TARGET_MS:.0f} ms, ratio {cold_ms / TARGET_MS:.3f})")
    print(f"warm projection: {warm_ms:.2f} ms  (ratio to target {warm_ms / TARGET_MS:.3f})")


if __name__ == "__main__":
    main()
