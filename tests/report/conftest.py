"""Shared inputs of the report tests: small, fast results of each kind (no measured data needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paraplan.api import resolve_model, resolve_system
from paraplan.projection import ProjectionOptions, project_specs
from paraplan.result import Projection
from paraplan.specs.training import TrainingSpec
from paraplan.validate.report import RowResult, ValidationReport

TINY_GEO = Path(__file__).resolve().parents[1] / "geo" / "tiny.yaml"


def small_projection() -> Projection:
    """Llama 3.1 8B on 16 H100, tp 2, pp 4, 8 micro-batches of 1F1B: a step with a visible bubble."""
    train = TrainingSpec().with_values(tp=2, pp=4, gbs=16, mbs=1, seq=2048, sequence_parallel=True)
    system = resolve_system("h100-sxm5-80gb", 16)
    return project_specs(resolve_model("llama3.1-8b"), system, train, ProjectionOptions(record_events=True))


@pytest.fixture(scope="session")
def projection() -> Projection:
    return small_projection()


def synthetic_validation() -> ValidationReport:
    """Three sources, two metrics, known errors."""
    rows = []
    for i in range(12):
        source = ("paper-a", "paper-b", "bench-c")[i % 3]
        metric = "tokens_per_sec_per_gpu" if source == "bench-c" else "step_time_s"
        measured = (1.0 + i) if metric == "step_time_s" else 1000.0 * (1 + i)
        error = (0.05, -0.10, 0.20)[i % 3]
        predicted = measured * (1 + error)
        rows.append(
            RowResult(f"r{i}", source, metric, measured, predicted, ("m", "g", 8), measured, predicted * (i % 2 + 1))
        )
    return ValidationReport(rows, [("r99", "missing mbs")])


@pytest.fixture(scope="session")
def validation() -> ValidationReport:
    return synthetic_validation()


def synthetic_tune_rows() -> tuple[list[dict[str, str]], list[dict]]:
    """CSV-like rows (strings, as csv.DictReader gives them) of 60 candidates, and the JSON top 3."""
    rows = []
    for i in range(60):
        tp, pp, mbs = (1, 2, 4, 8)[i % 4], (1, 2, 4)[i % 3], (1, 2, 4, 8, 16)[i % 5]
        peak = 10 + 1.7 * i % 90
        rows.append(
            {
                "num_gpus": "64", "precision": "bf16", "tp": str(tp), "cp": "1", "pp": str(pp), "vpp": "1",
                "schedule": "1f1b", "ep": "1", "etp": str(tp), "mbs": str(mbs), "sp": str(tp > 1),
                "sharding": "dist_opt", "recompute": "none", "recompute_layers": "", "overlap_grad_reduce": "True",
                "overlap_param_gather": "True", "tp_comm_overlap": "False", "ep_overlap": "False",
                "dp": str(64 // (tp * pp)), "step_time_s": str(1 + (i * 37 % 50) / 10),
                "tokens_per_sec_per_gpu": str(4000 / (1 + (i * 37 % 50) / 10)), "mfu": str(0.5 / (1 + i % 7)),
                "peak_gib": str(peak), "fits": str(peak <= 77.6), "source": "exhaustive",
            }
        )  # fmt: skip
    fitting = sorted((r for r in rows if r["fits"] == "True"), key=lambda r: -float(r["tokens_per_sec_per_gpu"]))
    top = []
    for r in fitting[:3]:
        entry: dict = {k: v for k, v in r.items() if k not in ("peak_gib", "fits", "source")}
        entry["memory"] = {"peak_gib": float(r["peak_gib"]), "fits": True}
        entry["command"] = f"paraplan project --model llama3.1-8b --gpus 64 --tp {r['tp']} --pp {r['pp']}"
        top.append(entry)
    return rows, top


@pytest.fixture(scope="session")
def tune_rows() -> tuple[list[dict[str, str]], list[dict]]:
    return synthetic_tune_rows()


@pytest.fixture(scope="session")
def geo_report():
    from paraplan.geo import load_geo_config, plan_geo

    return plan_geo(load_geo_config(TINY_GEO))
