"""Hybrid projection figures on a real device: the measured layer times of llama3.1-8b and mixtral-8x7b and
the projections they give for 8 and 64 GPUs, written as JSON with the device, software versions and date.

    python benchmarks/bench_hybrid.py --device cuda --out hybrid-h200.json      # on an H200 (or any GPU)
    python benchmarks/bench_hybrid.py --device cpu --tiny --out /tmp/dry.json  # the same path on a CPU

On CUDA the targets are H200 clusters (`--gpu` to change); `--tiny` shrinks the models so a laptop CPU can
run the whole path (projected onto CPU processes). Measurements are cached (`--cache`), so a second run
only projects.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from paraplan.measure.hybrid.api import HybridOptions, hybrid_project
from paraplan.specs.model import ModelSpec
from paraplan.specs.presets import model_preset, system_preset
from paraplan.specs.system import SystemSpec
from paraplan.specs.training import TrainingSpec

# Megatron-style layouts people run these models with (bf16, distributed optimizer, overlapped DP).
BASE = TrainingSpec(use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True)
TARGETS: dict[str, dict[int, dict[str, Any]]] = {
    "llama3.1-8b": {
        8: dict(tp=1, pp=1, mbs=1, gbs=128, seq=8192),
        64: dict(tp=2, pp=2, mbs=1, gbs=512, seq=8192, sp=True),
    },
    "mixtral-8x7b": {
        8: dict(tp=1, pp=1, ep=8, mbs=1, gbs=64, seq=4096),
        64: dict(tp=2, pp=4, ep=8, mbs=1, gbs=256, seq=4096, sp=True),
    },
}
TINY = dict(hidden_size=256, ffn_hidden_size=704, moe_ffn_hidden_size=704, num_attention_heads=8, vocab_size=4096)
TINY_SEQ = 256


def _model(name: str, tiny: bool) -> ModelSpec:
    model = model_preset(name)
    return model.with_overrides(**TINY) if tiny else model


def _system(gpu: str, gpus: int, device: str, cache: str | None) -> SystemSpec:
    if device == "cpu":
        from paraplan.measure.hybrid.local import local_cpu_system

        return local_cpu_system(gpus, cache_path=cache)
    return system_preset(gpu, gpus)


def run(device: str, gpu: str, tiny: bool, cache: str | None) -> dict[str, Any]:
    results, devices = [], None
    for name, layouts in TARGETS.items():
        model = _model(name, tiny)
        for gpus, layout in layouts.items():
            values = dict(layout, seq=TINY_SEQ) if tiny else layout
            train = BASE.with_values(**values)
            started = time.perf_counter()
            result = hybrid_project(
                model, _system(gpu, gpus, device, cache), train, HybridOptions(device, cache_path=cache)
            )
            devices = result.devices
            p = result.projection
            results.append(
                {
                    "model": name,
                    "gpus": gpus,
                    "layout": values,
                    "step_time_s": p.step_time_s,
                    "tokens_per_sec_per_gpu": p.tokens_per_sec_per_gpu,
                    "mfu": p.mfu,
                    "measured_fraction": p.pipeline.measured_fraction,
                    "breakdown_s": dict(p.breakdown),
                    "sources": {part: s.origin for part, s in result.sources.items()},
                    "blocks": {kind: m.to_dict() for kind, m in result.blocks.items()},
                    "optimizer": result.optimizer.to_dict(),
                    "plan": result.plan.explain(),
                    "notes": list(result.notes),
                    "wall_s": time.perf_counter() - started,
                }
            )
            print(f"{name:14s} {gpus:3d} x {p.system.gpu.name}: step {p.step_time_s * 1e3:9.1f} ms, MFU {p.mfu:6.1%}")
    return {"device": devices.to_dict() if devices else {}, "tiny": tiny, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--gpu", default="h200-sxm-141gb", help="target GPU preset on CUDA")
    parser.add_argument("--tiny", action="store_true", help="small models (a CPU dry run)")
    parser.add_argument("--cache", default=None, help="SQLite cache (default ~/.cache/paraplan/hybrid.sqlite)")
    parser.add_argument("--out", default=None, help="write the JSON here")
    args = parser.parse_args()
    report = run(args.device, args.gpu, args.tiny or args.device == "cpu", args.cache)
    text = json.dumps(report, indent=1, default=float)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
