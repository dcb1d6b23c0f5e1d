"""Streams of inference prefill requests: a seeded Poisson stream, or a real trace.

Traces: the Azure LLM inference traces (November 2023; Patel et al., ISCA 2024 "Splitwise"), one request
per row, `TIMESTAMP,ContextTokens,GeneratedTokens`, CRLF line ends. They live in the shared data folder,
found through $PARAPLAN_SHARED (default `<repo>/../shared`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from pathlib import Path

import numpy as np

from paraplan.errors import ConfigError
from paraplan.geo.config import StreamConfig

TRACE_FILES = {"conv": "AzureLLMInferenceTrace_conv.csv", "code": "AzureLLMInferenceTrace_code.csv"}


@dataclass(frozen=True)
class PrefillRequests:
    """Requests in arrival order: arrival time (s from the start of the stream) and prompt length."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    duration_s: float
    source: str

    @property
    def count(self) -> int:
        return int(self.arrival_s.size)

    @property
    def rate_per_s(self) -> float:
        return self.count / self.duration_s if self.duration_s > 0 else 0.0


def shared_dir() -> Path:
    """$PARAPLAN_SHARED, else the `shared` folder beside the repository."""
    env = os.environ.get("PARAPLAN_SHARED")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared"


def lognormal_prompts(rng: np.random.Generator, n: int, mean: float, median: float, low: int, high: int) -> np.ndarray:
    """Prompt lengths from a lognormal with the given mean and median (mean = median * exp(sigma^2 / 2)),
    clipped to [low, high]."""
    sigma = math.sqrt(2 * math.log(mean / median)) if mean > median else 0.0
    tokens = median * np.exp(sigma * rng.standard_normal(n))
    return np.clip(np.rint(tokens), low, high).astype(np.int64)


def poisson_stream(
    rate_per_s: float,
    duration_s: float,
    *,
    mean_tokens: float = 1155.0,
    median_tokens: float = 1020.0,
    min_tokens: int = 16,
    max_tokens: int = 8192,
    seed: int = 0,
) -> PrefillRequests:
    """Poisson arrivals (exponential gaps) over `duration_s`; deterministic for a given seed."""
    rng = np.random.default_rng(seed)
    expected = rate_per_s * duration_s
    n_draw = int(expected + 10 * math.sqrt(expected) + 16)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_per_s, n_draw))
    while arrivals[-1] < duration_s:  # extremely unlikely: draw more
        arrivals = np.concatenate([arrivals, arrivals[-1] + np.cumsum(rng.exponential(1.0 / rate_per_s, n_draw))])
    arrivals = arrivals[arrivals < duration_s]
    prompts = lognormal_prompts(rng, arrivals.size, mean_tokens, median_tokens, min_tokens, max_tokens)
    return PrefillRequests(arrivals, prompts, duration_s, f"poisson {rate_per_s:g}/s seed {seed}")


def _seconds(stamp: str) -> float:
    """`YYYY-MM-DD hh:mm:ss.fffffff` -> seconds since 2000-01-01 (days matter when a trace crosses midnight)."""
    day, clock = stamp.split(" ")
    h, m, s = clock.split(":")
    days = (date.fromisoformat(day) - date(2000, 1, 1)).days
    return days * 86400.0 + int(h) * 3600.0 + int(m) * 60.0 + float(s)


@lru_cache(maxsize=8)
def read_trace(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(arrival seconds from the first request, prompt tokens) of an Azure-format trace CSV."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"trace file not found: {path} (set PARAPLAN_SHARED to the shared data folder)") from None
    lines = text.splitlines()  # handles CRLF and a missing final newline
    header = [h.strip() for h in lines[0].split(",")] if lines else []
    if header[:2] != ["TIMESTAMP", "ContextTokens"]:
        raise ConfigError(f"{path}: expected columns TIMESTAMP,ContextTokens,... (got {','.join(header)})")
    stamps, prompts = [], []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split(",")
        try:
            stamps.append(_seconds(parts[0].strip()))
            prompts.append(int(parts[1]))
        except (ValueError, IndexError):
            raise ConfigError(f"{path}: line {n} is not 'timestamp,tokens,...' (got {line!r})") from None
    t = np.asarray(stamps)
    order = np.argsort(t, kind="stable")
    return t[order] - t[order][0], np.asarray(prompts, dtype=np.int64)[order]


def trace_path(trace: str) -> Path:
    if trace in TRACE_FILES:
        return shared_dir() / "data" / "inference-traces" / TRACE_FILES[trace]
    return Path(trace)


def trace_stream(
    trace: str,
    duration_s: float,
    *,
    start_s: float = 0.0,
    rate_scale: float = 1.0,
    rate_per_s: float | None = None,
    max_tokens: int | None = None,
) -> PrefillRequests:
    """Requests of a trace from `start_s` on, the time axis compressed by `rate_scale` (or so that the
    mean rate is `rate_per_s`), cut to `duration_s` of compressed time."""
    arrivals, prompts = read_trace(trace_path(trace))
    window = arrivals >= start_s
    arrivals, prompts = arrivals[window] - start_s, prompts[window]
    if arrivals.size == 0:
        span = float(read_trace(trace_path(trace))[0][-1])
        raise ConfigError(f"bubbletea.stream: no requests after start_s={start_s} (trace {trace} spans {span:.0f} s)")
    if rate_per_s is not None:
        native = arrivals.size / max(arrivals[-1], 1e-9)
        rate_scale = rate_per_s / native
    arrivals = arrivals / rate_scale
    keep = arrivals < duration_s
    prompts = prompts[keep]
    if max_tokens is not None:
        prompts = np.minimum(prompts, max_tokens)
    return PrefillRequests(arrivals[keep], prompts, duration_s, f"trace {trace} x{rate_scale:.3g}")


def stream_from_config(cfg: StreamConfig) -> PrefillRequests:
    if cfg.kind == "poisson":
        if cfg.rate_per_s is None:
            raise ConfigError("bubbletea.stream: field 'rate_per_s' is required for a poisson stream")
        if cfg.prompt_tokens_mean < cfg.prompt_tokens_median:
            raise ConfigError(
                f"bubbletea.stream: prompt_tokens_mean {cfg.prompt_tokens_mean} must be >= prompt_tokens_median "
                f"{cfg.prompt_tokens_median} (lognormal lengths)"
            )
        return poisson_stream(
            cfg.rate_per_s,
            cfg.duration_s,
            mean_tokens=cfg.prompt_tokens_mean,
            median_tokens=cfg.prompt_tokens_median,
            min_tokens=cfg.prompt_tokens_min,
            max_tokens=cfg.prompt_tokens_max or 8192,
            seed=cfg.seed,
        )
    return trace_stream(
        cfg.trace,
        cfg.duration_s,
        start_s=cfg.start_s,
        rate_scale=cfg.rate_scale,
        rate_per_s=cfg.rate_per_s,
        max_tokens=cfg.prompt_tokens_max,
    )
