"""Pick the compute-op timer for a projection: a fitted profile where it covers the op, else analytic.

`--profile PATH` uses that profile; `--profile auto` the one shipped for the GPU preset; with neither,
the GPUs in `PROFILE_BY_DEFAULT` use their shipped profile (where it was measured to beat the analytic
model on the public data) and every other GPU the analytic model.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

from paraplan.errors import ConfigError
from paraplan.graph.ops import Op

OpTimer = Callable[[Op], tuple[float, str] | None]

PROFILE_BY_DEFAULT: frozenset[str] = frozenset()
"""GPU presets whose shipped profile is the default: none, as measured on the public A100 rows (the
calibrated analytic model was the better of the two; see the README's accuracy section)."""


@cache
def _load(path: str):
    from paraplan.cost.profile import Profile, ProfileError

    if not Path(path).is_file():
        raise ConfigError(f"profile not found: {path}")
    try:
        return Profile.load(path)
    except (ProfileError, ValueError) as exc:
        raise ConfigError(f"{path}: not a paraplan profile ({exc})") from None


@cache
def _timer(profile) -> OpTimer:
    def timer(op: Op) -> tuple[float, str] | None:
        seconds = profile.op_time_s(op)
        if seconds is None:
            return None
        return seconds, f"profile:{profile.covers(op)}"

    return timer


def timer_for(profile: str | None, gpu: str, analytic: bool = False) -> OpTimer | None:
    """The timer to pass as `ProjectionOptions.timer`, or None for analytic costs only."""
    from paraplan.cost.profile import shipped_profile

    if profile in (None, "") and (analytic or gpu not in PROFILE_BY_DEFAULT):
        return None
    if profile in (None, "", "auto"):
        shipped = shipped_profile(gpu)
        if shipped is None:
            if profile == "auto":
                raise ConfigError(f"no profile is shipped for {gpu}; give --profile PATH (paraplan fit)")
            return None
        return _timer(shipped)
    return _timer(_load(profile))
