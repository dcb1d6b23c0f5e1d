"""The fitted profile a projection uses: a frozen value that names a profile and times the ops it covers.

`--profile PATH` uses that profile; `--profile auto` the one shipped for the GPU preset; with neither,
the GPUs in `PROFILE_BY_DEFAULT` use their shipped profile (where it was measured to beat the analytic
model on the public data) and every other GPU the analytic model.

A `ProfileRef` is what `ProjectionOptions.profile` carries: where the profile lives and the SHA-256 of its
bytes. It is equal to (and hashes as) any other reference to the same file with the same content, so the
projection's caches key on it by value; it pickles as those two strings, and a process that unpickles it
(a tuner worker) loads the profile again once, checking the digest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from paraplan.errors import ConfigError
from paraplan.graph.ops import Op, OpKind

if TYPE_CHECKING:
    from paraplan.cost.block import OpTimer
    from paraplan.cost.comm import GroupPlacement, Modelled
    from paraplan.cost.profile import Profile
    from paraplan.graph.ops import CommShape
    from paraplan.specs.system import SystemSpec

PROFILE_BY_DEFAULT: frozenset[str] = frozenset()
"""GPU presets whose shipped profile is the default: none, as measured on the public A100 rows (the
calibrated analytic model was the better of the two; see the README's accuracy section)."""

SHIPPED_PREFIX = "shipped:"
"""`ProfileRef.location` of a profile shipped as package data (`cost/profiles/<file>`)."""


@dataclass(frozen=True, slots=True)
class ProfileRef:
    """A fitted profile by reference: its location (an absolute path, or `shipped:<file>`) and the SHA-256 of
    its bytes. Called with an op, it answers (seconds, "profile:<regressor>") where the profile covers the op,
    None where the analytic model applies (`cost.block.OpTimer`); `collective` does the same for collectives."""

    location: str
    digest: str

    @property
    def profile(self) -> Profile:
        """The loaded profile (once per process and reference)."""
        return _load(self.location, self.digest)

    @property
    def option(self) -> str:
        """The `--profile` value that names it again: "auto" for a shipped profile, else the path."""
        return "auto" if self.location.startswith(SHIPPED_PREFIX) else self.location

    def __call__(self, op: Op) -> tuple[float, str] | None:
        profile = self.profile
        seconds = profile.op_time_s(op)
        if seconds is None:
            return None
        return seconds, f"profile:{profile.covers(op)}"

    def collective(self, comm: CommShape, group: GroupPlacement, system: SystemSpec) -> tuple[float, str] | Modelled:
        """(seconds, regressor) of a collective the profile measured on this system, or why it is modelled
        (`cost.collectives.measured_collective`)."""
        from paraplan.cost.collectives import measured_collective

        return measured_collective(self.profile, comm, group, system)


@dataclass(frozen=True, slots=True)
class ScaledTimes:
    """Another op timer's times, compute-bound ops' multiplied by `compute_factor` and memory-bound (elementwise)
    ones' by `memory_factor` (a profile taken on one process, used where several share the machine)."""

    base: OpTimer
    compute_factor: float = 1.0
    memory_factor: float = 1.0

    def __call__(self, op: Op) -> tuple[float, str] | None:
        timed = self.base(op)
        if timed is None:
            return None
        factor = self.memory_factor if op.kind is OpKind.ELEMENTWISE else self.compute_factor
        return timed[0] * factor, timed[1]

    def collective(self, comm: CommShape, group: GroupPlacement, system: SystemSpec) -> tuple[float, str] | Modelled:
        """The base's collectives as they are: the factors are the compute's share of a crowded machine."""
        from paraplan.cost.comm import Modelled

        lookup = getattr(self.base, "collective", None)
        return Modelled.NO_SAMPLES if lookup is None else lookup(comm, group, system)


def _bytes_of(location: str) -> bytes:
    if location.startswith(SHIPPED_PREFIX):
        resource = resources.files("paraplan.cost").joinpath("profiles", location.removeprefix(SHIPPED_PREFIX))
        return resource.read_bytes()
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read profile {location}: {exc.strerror or exc}") from None


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@cache
def _load(location: str, digest: str) -> Profile:
    from paraplan.cost.profile import Profile, ProfileError, load_shipped

    data = _bytes_of(location)
    if _digest(data) != digest:
        raise ConfigError(f"profile {location} changed since it was chosen (SHA-256 {digest[:12]}...): choose it again")
    try:
        if location.startswith(SHIPPED_PREFIX):  # the package's own copy, loaded once for every user
            shipped = load_shipped(location.removeprefix(SHIPPED_PREFIX))
            if shipped is not None:
                return shipped
        return Profile.from_dict(json.loads(data))
    except (ProfileError, ValueError) as exc:
        raise ConfigError(f"{location}: not a paraplan profile ({exc})") from None


@cache
def _path_ref(path: str, mtime_ns: int, size: int) -> ProfileRef:
    """The reference of a profile file in this state (read and parsed once: a bad file is an error now)."""
    ref = ProfileRef(path, _digest(_bytes_of(path)))
    ref.profile  # noqa: B018 - parse now: a malformed file is one clear error, before any projection
    return ref


@cache
def shipped_ref(gpu: str) -> ProfileRef | None:
    """The reference of the profile shipped for a GPU preset, or None."""
    from paraplan.cost.profile import SHIPPED_PROFILES

    file_name = SHIPPED_PROFILES.get(gpu.lower())
    if file_name is None:
        return None
    location = SHIPPED_PREFIX + file_name
    try:
        data = _bytes_of(location)
    except FileNotFoundError:
        return None
    return ProfileRef(location, _digest(data))


def path_ref(path: str | Path) -> ProfileRef:
    """The reference of a profile file (`paraplan fit`'s output), its content checked now."""
    file = Path(path).resolve()
    if not file.is_file():
        raise ConfigError(f"profile not found: {path}")
    stat = file.stat()
    return _path_ref(str(file), stat.st_mtime_ns, stat.st_size)


def profile_for(profile: str | None, gpu: str, analytic: bool = False) -> ProfileRef | None:
    """What to pass as `ProjectionOptions.profile` for `--profile PROFILE|auto` and `--analytic` on a GPU preset:
    None for analytic costs only."""
    if profile in (None, "") and (analytic or gpu not in PROFILE_BY_DEFAULT):
        return None
    if profile in (None, "", "auto"):
        shipped = shipped_ref(gpu)
        if shipped is None and profile == "auto":
            raise ConfigError(f"no profile is shipped for {gpu}; give --profile PATH (paraplan fit)")
        return shipped
    return path_ref(profile)
