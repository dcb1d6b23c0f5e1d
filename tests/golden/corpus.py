"""A fixed corpus of projections, tuner runs and geo runs, run through the CLI's `--json` output.

`python tests/golden/corpus.py --write` stores the outputs in tests/golden/expected/; the test
(tests/golden/test_golden.py) runs the corpus again and compares. A change that moves a number on purpose
regenerates the files in the same commit and names the change in its message.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
EXPECTED = HERE / "expected"
GEO_TINY = HERE.parent / "geo" / "tiny.yaml"

_P = ["project", "--json"]
PROJECTIONS: dict[str, list[str]] = {
    "readme_70b": _P
    + "--model llama3.1-70b --gpu h100-sxm5-80gb --gpus 64 --tp 4 --pp 4 --vpp 5 --cp 2 --gbs 128 --seq 8192 --sp --distributed-optimizer --overlap-grad-reduce --overlap-param-gather".split(),
    "gpt3_a100_1f1b": _P
    + "--model gpt3-175b --gpu a100-sxm4-80gb --gpus 1024 --tp 8 --pp 8 --gbs 1536 --seq 2048 --recompute full".split(),
    "8b_fsdp": _P + "--model llama3.1-8b --gpu h100-sxm5-80gb --gpus 64 --gbs 256 --seq 4096 --fsdp".split(),
    "8b_gpipe": _P
    + "--model llama3.1-8b --gpu h100-sxm5-80gb --gpus 16 --tp 2 --pp 4 --gbs 64 --seq 4096 --schedule gpipe".split(),
    "8b_zbh1": _P
    + "--model llama3.1-8b --gpu h100-sxm5-80gb --gpus 16 --tp 2 --pp 4 --gbs 64 --seq 4096 --schedule zb-h1".split(),
    "8b_zbv": _P
    + "--model llama3.1-8b --gpu h100-sxm5-80gb --gpus 16 --tp 2 --pp 4 --gbs 64 --seq 4096 --schedule zb-v".split(),
    "8b_dualpipev": _P
    + "--model llama3.1-8b --gpu h100-sxm5-80gb --gpus 16 --tp 2 --pp 4 --gbs 64 --seq 4096 --schedule dualpipev".split(),
    "mixtral_ep": _P
    + "--model mixtral-8x7b --gpu h100-sxm5-80gb --gpus 64 --tp 2 --ep 8 --sp --gbs 256 --seq 4096 --recompute selective".split(),
    "qwen3_moe_flex": _P
    + "--model qwen3-30b-a3b --gpu h100-sxm5-80gb --gpus 16 --ep 8 --gbs 128 --seq 4096 --moe-dispatcher flex".split(),
    "dsv3_layout": _P
    + "--model deepseek-v3 --gpu b200 --gpus 256 --pp 16 --ep 8 --gbs 2048 --seq 4096 --precision mxfp8 --pipeline-layout 4,4,4,4,4,4,4,4,4,4,4,4,4,4,4,1".split(),
    "405b_interleaved": _P
    + "--model llama3.1-405b --gpu h100-sxm5-80gb --gpus 2048 --tp 8 --pp 16 --vpp 8 --gbs 2048 --seq 8192 --sp --distributed-optimizer --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split".split(),
    "8b_a100_profile": _P
    + "--model llama3.1-8b --gpu a100-sxm4-80gb --gpus 8 --tp 2 --gbs 64 --seq 2048 --profile auto".split(),
    # the shipped GH200 profile's collectives apply to the gh200 preset (1 GPU per node, as on TACC Vista)
    "8b_gh200_profile": _P
    + "--model llama3.1-8b --gpu gh200 --gpus 8 --tp 2 --gbs 64 --seq 4096 --profile auto".split(),
}
TUNES: dict[str, list[str]] = {
    "tune_8b": "tune --json --model llama3.1-8b --gpu h100-sxm5-80gb --gpus 16 --gbs 64 --seq 4096 --top 5".split(),
    # a multi-axis MoE search (tp, pp, vpp, cp, ep, mbs, schedule, sharding) kept small for the default test
    # run: 16 GPUs, mbs <= 2, no full recompute (~3,800 projections; the 32-GPU space was ~28,000, 80-130 s)
    "tune_mixtral": "tune --json --model mixtral-8x7b --gpu h100-sxm5-80gb --gpus 16 --gbs 64 --seq 4096 --top 5 --max-mbs 2 --fix recompute=none,selective".split(),
}
GEOS: dict[str, list[str]] = {
    "geo_tiny": ["geo", "--json", "--config", str(GEO_TINY)],
}
CORPUS = {**PROJECTIONS, **TUNES, **GEOS}

# Keys whose values depend on the machine or the clock, not on the model.
VOLATILE = {"candidates_per_s", "elapsed_s", "wall_s", "projections_per_s", "seconds", "elapsed", "time_s_wall"}


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.10g}")
    return value


def run_case(args: list[str]) -> object:
    from typer.testing import CliRunner

    from paraplan.cli.main import app

    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {result.exit_code}\n{result.output}")
    out = result.stdout
    return _strip(json.loads(out[out.index("{") :]))


def main() -> None:
    EXPECTED.mkdir(exist_ok=True)
    names = sys.argv[2:] or list(CORPUS)
    for name in names:
        (EXPECTED / f"{name}.json").write_text(json.dumps(run_case(CORPUS[name]), indent=1, sort_keys=True) + "\n")
        print("wrote", name)


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: corpus.py --write [NAME ...]")
    main()
