"""A memo keyed by a function's read-set: the values it reads of its arguments, declared once (issue 35).

A pure function of big specs (TrainingSpec has 54 fields) often reads a handful of them: a memo keyed by the whole
spec misses wherever a field it never reads differs (the tuner's structures differ in their schedule, micro-batch
size and recompute, which `projection._dp_times` never reads), and hashing the spec costs more than the lookup
saves. `ReadSet` declares, per parameter, what the function reads: attributes by name (fields or properties) and
derived values (a label and a function of the argument); parameters named `held` are keyed by identity (the memo
holds them, so their ids stay theirs: systems, calibrations, profiles), every other parameter by its value.

A declared read-set that misses a read would serve a stale result: tests/core/test_readset.py varies every field of
the inputs and checks that equal keys give equal results, and that each declared read is needed (dropping it
makes two inputs of different results share a key).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import is_
from typing import Any

Read = str | tuple[str, Callable[[Any], Any]]
"""An attribute's name, or (label, function of the argument) for a derived value."""


def read_label(read: Read) -> str:
    return read if isinstance(read, str) else read[0]


@dataclass(frozen=True)
class ReadSet:
    """What a function reads of its parameters (`params`, in call order): `reads` per parameter read through,
    `held` parameters by identity, the others by value."""

    params: tuple[str, ...]
    reads: Mapping[str, tuple[Read, ...]] = field(default_factory=dict)
    held: tuple[str, ...] = ()
    split: Callable[..., tuple[tuple[Any, ...], tuple[int, ...], tuple[Any, ...]]] = field(
        init=False, repr=False, compare=False
    )
    """(key, the held arguments' ids, the held arguments) of one call's arguments (all of `params`, positionally): one
    generated function, the attributes read inline (a memo asks it on every call)."""

    def __post_init__(self) -> None:
        declared = [*self.reads, *self.held]
        unknown = set(declared) - set(self.params)
        if unknown or len(set(declared)) < len(declared) or not all(p.isidentifier() for p in self.params):
            raise ValueError(f"read-set of {self.params}: unknown or doubly declared parameters {sorted(unknown)}")
        names: dict[str, Any] = {}
        key = []
        for param in self.params:
            if param in self.reads:
                for i, read in enumerate(self.reads[param]):
                    if isinstance(read, str):
                        key.append(f"{param}.{read}")
                    else:
                        names[f"_{param}_{i}"] = read[1]
                        key.append(f"_{param}_{i}({param})")
            elif param not in self.held:
                key.append(param)
        held = "".join(f"{p}, " for p in self.held)
        ids = "".join(f"id({p}), " for p in self.held)
        returned = f"({''.join(f'{k}, ' for k in key)}), ({ids}), ({held})"
        source = f"def split({', '.join(self.params)}):\n    return {returned}\n"
        exec(source, names)  # noqa: S102 - built above from the declared identifiers
        object.__setattr__(self, "split", names["split"])

    def key(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """The memo's key of one call's arguments (the held ones apart: `held_objects`)."""
        return self.split(*args)[0]

    def held_objects(self, args: Sequence[Any]) -> tuple[Any, ...]:
        return self.split(*args)[2]

    def without(self, param: str, label: str) -> ReadSet:
        """This read-set less one declared read (`label` of `param`'s reads; a parameter keyed by value or identity:
        `label` == `param`, dropped from the key): what the tests show would go stale."""
        if param in self.reads and label != param:
            kept = tuple(r for r in self.reads[param] if read_label(r) != label)
            if len(kept) == len(self.reads[param]):
                raise KeyError(f"{param} has no declared read {label!r}")
            return ReadSet(self.params, {**self.reads, param: kept}, self.held)
        return ReadSet(self.params, {**self.reads, param: ()}, tuple(h for h in self.held if h != param))

    def labels(self) -> list[tuple[str, str]]:
        """Every declared read as (parameter, label): the reads of the parameters read through, the others whole."""
        out = []
        for param in self.params:
            out += [(param, read_label(r)) for r in self.reads[param]] if param in self.reads else [(param, param)]
        return out


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
        key, outer, objects = self.reads.split(*args)
        entry = self.by_held.get(outer)
        if entry is None or not all(map(is_, entry[0], objects)):
            if len(self.by_held) >= self.max_held:
                self.by_held.clear()
            entry = self.by_held[outer] = (objects, {})
        memo = entry[1]
        found = memo.get(key)
        if found is None:
            self.misses += 1
            if len(memo) >= self.max_entries:
                memo.clear()
            found = memo[key] = self.function(*args)
        return found
