"""Which measured rows the calibration fits, and which it only reports on.

`paraplan calibrate` fits the step-time constants on step-time and throughput rows (`TIME_METRICS`) of every
source except the report-only ones below; `paraplan validate` scores every row, and keeps the report-only
sources and the memory rows (`MEMORY_METRIC`) out of the figure the calibration is judged by.
"""

from __future__ import annotations

TIME_METRICS = ("step_time_s", "tokens_per_sec_per_gpu")  # what the step-time constants are fitted on
MEMORY_METRIC = "memory_gib"  # peak memory per GPU: scored apart (`paraplan.validate.memory`), never fitted

# source -> why it is scored but not fitted (shared/data/measured/README.md)
REPORT_ONLY_SOURCES: dict[str, str] = {
    "MegatronBridge_perf_summary_26.02": "a later release of the Megatron-Bridge 25.11 recipes: held out forward "
    "in time (fitted on the releases before it, reported on it)",
}


def is_time_row(row: dict[str, str]) -> bool:
    return (row.get("metric") or "").strip() in TIME_METRICS


def is_fitted_source(source: str) -> bool:
    return source not in REPORT_ONLY_SOURCES


def fitted_time_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The rows a calibration may fit on (before its completeness filter): time rows of non-report-only sources."""
    return [row for row in rows if is_time_row(row) and is_fitted_source(row.get("source", ""))]


# `paraplan calibrate`'s generalization splits beside leave-one-source-out (`validate.calibrate.split_jobs`)
GENERALIZATION_SPLITS = ("gpu_generation", "framework", "forward")
