"""`fastinit`: a cheaper `__init__` for the hot frozen dataclasses (issue 35).

A frozen dataclass's generated `__init__` sets each field through `object.__setattr__(self, name, value)`: a
lookup of the attribute by name per field (TrainingSpec has 54; the tuner builds about six per projected
candidate). `fastinit` replaces it with one of the same signature, defaults and `__post_init__` call that sets the
fields in one go: each slot through its descriptor's `__set__`, bound once at decoration (slotted classes), or the
instance's `__dict__` updated once (the others). Validation is unchanged: `__post_init__` runs as before, and a
missing or unknown argument is the same TypeError. Equality, hashing, repr and pickling are the dataclass's own
(tests/core/test_fastinit.py against the dataclass's `__init__`, kept as `__dataclass_init__`).

Use it above `@dataclass`: `@fastinit` then `@dataclass(frozen=True, slots=True)`.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

_FACTORY = object()
"""The default of an argument whose field has a default_factory (as dataclasses' own `_HAS_DEFAULT_FACTORY`)."""


def fastinit(cls: T) -> T:
    """Give the dataclass `cls` the faster `__init__` (see the module docstring); returns `cls`."""
    if not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        raise TypeError(f"fastinit needs a dataclass (got {cls!r})")
    all_fields = dataclasses.fields(cls)
    if "__init__" not in cls.__dict__ or not cls.__dataclass_params__.init:  # type: ignore[attr-defined]
        raise TypeError(f"fastinit: {cls.__qualname__} has no dataclass-generated __init__")
    arguments = list(inspect.signature(cls.__init__).parameters)[1:]
    if arguments != [f.name for f in all_fields if f.init]:  # an InitVar is an argument but no field
        raise TypeError(f"fastinit: {cls.__qualname__}'s __init__ takes {arguments}: InitVars are not supported")
    slotted = "__slots__" in cls.__dict__
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    positional, keyword, body = [], [], []
    for i, f in enumerate(all_fields):
        default = None  # the name of the field's default value, or of its factory's call
        if f.default is not dataclasses.MISSING:
            names[f"_default_{i}"] = f.default
            default = f"_default_{i}"
        elif f.default_factory is not dataclasses.MISSING:
            names[f"_factory_{i}"] = f.default_factory
            default = f"_factory_{i}()"
        if f.init:
            factory = f.default is dataclasses.MISSING and default is not None
            param = f.name if default is None else f"{f.name}={'_FACTORY' if factory else default}"
            value = f"{default} if {f.name} is _FACTORY else {f.name}" if factory else f.name
            (keyword if f.kw_only else positional).append(param)
        elif default is not None:
            value = default
        else:
            continue  # init=False without a default: left unset, as the dataclass does
        if slotted:
            names[f"_set_{i}"] = cls.__dict__[f.name].__set__
            body.append(f"    _set_{i}(self, {value})")
        else:
            body.append(f"        {f.name!r}: {value},")
    if not slotted:
        body = ["    self.__dict__.update({", *body, "    })"]
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({params}) -> None:\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(source, names)  # noqa: S102 - the source is built above from the dataclass's own field names
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    cls.__dataclass_init__ = cls.__init__  # type: ignore[attr-defined]  # the dataclass's own (the tests compare)
    cls.__init__ = init  # type: ignore[misc]
    return cls
