"""A memo keyed by a function's read-set: the values it reads of its arguments, declared once (issue 35).

A pure function of big specs (TrainingSpec has 54 fields) often reads a handful of them: a memo keyed by the whole
spec misses wherever a field it never reads differs (the tuner's structures differ in their schedule, micro-batch
size and recompute, which `projection._dp_times` never reads), and hashing the spec costs more than the lookup
saves. `ReadSet` declares, per parameter, what the function reads: attributes by name (fields or properties) and
derived values (a label and a function of the argument); parameters named `held` are keyed by identity (the memo
holds them, so their ids stay theirs: systems, calibrations, profiles: a few per run), those named `pinned` by
identity too, each entry holding its own (many per run: a stage's cached sums), every other parameter by its value.

A declared read-set that misses a read would serve a stale result: tests/core/test_readset.py varies every field of
the inputs and checks that equal keys give equal results, and that each declared read is needed (dropping it
makes two inputs of different results share a key).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

Read = str | tuple[str, Callable[[Any], Any]]
"""An attribute's name, or (label, function of the argument) for a derived value."""


def read_label(read: Read) -> str:
    return read if isinstance(read, str) else read[0]


@dataclass(frozen=True)
class ReadSet:
    """What a function reads of its parameters (`params`, in call order): `reads` per parameter read through,
    `held` and `pinned` parameters by identity, the others by value."""

    params: tuple[str, ...]
    reads: Mapping[str, tuple[Read, ...]] = field(default_factory=dict)
    held: tuple[str, ...] = ()
    pinned: tuple[str, ...] = ()
    _getters: tuple[Callable[[Any], Any], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        declared = [*self.reads, *self.held, *self.pinned]
        unknown = set(declared) - set(self.params)
        if unknown or len(set(declared)) < len(declared):
            raise ValueError(f"read-set of {self.params}: unknown or doubly declared parameters {sorted(unknown)}")
        getters = []
        for name in self.params:
            if name in self.held:
                getters.append(_nothing)  # keyed by identity, outside the key (`ReadSetMemo.by_held`)
            elif name in self.pinned:
                getters.append(id)  # held by the entry (`ReadSetMemo`)
            elif name in self.reads:
                getters.append(_reader(self.reads[name]))
            else:
                getters.append(_identity)
        object.__setattr__(self, "_getters", tuple(getters))

    def key(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """The memo's key of one call's arguments (all of `params`, positionally)."""
        return tuple([get(arg) for get, arg in zip(self._getters, args, strict=True)])

    def held_objects(self, args: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(arg for name, arg in zip(self.params, args, strict=True) if name in self.held)

    def pinned_objects(self, args: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(arg for name, arg in zip(self.params, args, strict=True) if name in self.pinned)

    def without(self, param: str, label: str) -> ReadSet:
        """This read-set less one declared read (`label` of `param`'s reads; a parameter keyed by value or identity:
        `label` == `param`, dropped from the key): what the tests show would go stale."""
        if param in self.reads and label != param:
            kept = tuple(r for r in self.reads[param] if read_label(r) != label)
            if len(kept) == len(self.reads[param]):
                raise KeyError(f"{param} has no declared read {label!r}")
            return ReadSet(self.params, {**self.reads, param: kept}, self.held, self.pinned)
        held, pinned = (tuple(p for p in names if p != param) for names in (self.held, self.pinned))
        return ReadSet(self.params, {**self.reads, param: ()}, held, pinned)

    def labels(self) -> list[tuple[str, str]]:
        """Every declared read as (parameter, label): the reads of the parameters read through, the others whole."""
        out = []
        for param in self.params:
            out += [(param, read_label(r)) for r in self.reads[param]] if param in self.reads else [(param, param)]
        return out


def _identity(value: Any) -> Any:
    return value


def _nothing(value: Any) -> None:
    return None


def _reader(reads: tuple[Read, ...]) -> Callable[[Any], Any]:
    """One function reading every declared value of an argument, in order (attribute names by one attrgetter)."""
    names = [r for r in reads if isinstance(r, str)]
    derived = [r[1] for r in reads if not isinstance(r, str)]
    if not derived:
        if not names:
            return lambda _: ()
        get = attrgetter(*names)
        return get if len(names) > 1 else lambda value: (get(value),)
    attrs = attrgetter(*names) if len(names) > 1 else (lambda value: (getattr(value, names[0]),)) if names else None

    def read(value: Any) -> tuple[Any, ...]:
        got = tuple(f(value) for f in derived)
        return got if attrs is None else (*attrs(value), *got)

    return read


class ReadSetMemo:
    """`function`'s results by `reads.key` of its arguments, for objects held by identity up to `max_held` at once
    and `max_entries` keys per such set (each cleared whole when full); `cache_clear` as an lru_cache's."""

    def __init__(
        self, function: Callable[..., Any], reads: ReadSet, *, max_held: int = 64, max_entries: int = 1 << 16
    ) -> None:
        functools.update_wrapper(self, function)  # its module and name (benchmarks clear the memos by module)
        self.function, self.reads = function, reads
        self.max_held, self.max_entries = max_held, max_entries
        self.by_held: dict[tuple[int, ...], tuple[tuple[Any, ...], dict[tuple[Any, ...], Any]]] = {}
        self.misses = 0

    def cache_clear(self) -> None:
        self.by_held.clear()

    def __call__(self, *args: Any) -> Any:
        key = self.reads.key(args)
        objects = self.reads.held_objects(args)
        outer = tuple(map(id, objects))
        entry = self.by_held.get(outer)
        if entry is None or any(a is not b for a, b in zip(entry[0], objects, strict=True)):
            if len(self.by_held) >= self.max_held:
                self.by_held.clear()
            entry = self.by_held[outer] = (objects, {})
        memo = entry[1]
        found = memo.get(key)
        if found is None:
            self.misses += 1
            if len(memo) >= self.max_entries:
                memo.clear()
            found = memo[key] = (self.function(*args), self.reads.pinned_objects(args))
        return found[0]
