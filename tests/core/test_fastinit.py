"""`paraplan.fastinit`: the faster `__init__` builds the same objects as the dataclass's own, with the same equality,
hash, repr, pickles and validation errors."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from paraplan.cost.block import BlockContext
from paraplan.cost.calibration import calibration_for
from paraplan.fastinit import fastinit
from paraplan.graph.layers import Shard
from paraplan.memory.model import RankMemory
from paraplan.sim.costs import ChunkCost
from paraplan.sim.pipeline import ChunkExtras
from paraplan.specs.presets import system_preset
from paraplan.specs.training import TrainingSpec, spec_with


def _pair(slots: bool, frozen: bool) -> tuple[type, type]:
    """The same dataclass twice: with the dataclass's `__init__`, and with fastinit's."""

    def make() -> type:
        @dataclass(frozen=frozen, slots=slots)
        class Point:
            x: int
            y: float = 2.5
            tags: tuple[str, ...] = field(default_factory=tuple)
            label: str = field(default="p", kw_only=True)
            cached: int = field(default=0, init=False, compare=False)
            history: list[int] = field(default_factory=list, init=False, compare=False)

            def __post_init__(self) -> None:
                if self.x < 0:
                    raise ValueError(f"x must be >= 0 (got {self.x})")
                object.__setattr__(self, "cached", self.x * 2)

        return Point  # a fresh class each call

    return make(), fastinit(make())


@pytest.mark.parametrize("slots", [True, False])
@pytest.mark.parametrize("frozen", [True, False])
def test_same_objects_as_the_dataclass_init(slots: bool, frozen: bool) -> None:
    plain, fast = _pair(slots, frozen)
    for args, kwargs in (((1,), {}), ((3, 0.5), {"label": "q"}), ((4,), {"tags": ("a",), "y": 1.0})):
        a, b = plain(*args, **kwargs), fast(*args, **kwargs)
        assert dataclasses.astuple(a) == dataclasses.astuple(b)
        assert repr(a).split("(", 1)[1] == repr(b).split("(", 1)[1]
        assert (a.cached, a.history) == (b.cached, b.history) and b.history is not fast(*args, **kwargs).history
        if frozen:
            assert hash(a) == hash(b)
            with pytest.raises(dataclasses.FrozenInstanceError):
                b.x = 9  # type: ignore[misc]
    assert fast(1) == fast(1) and fast(1) != fast(2)
    assert fast(1).history is not fast(1).history  # a fresh default per object, as default_factory gives


@pytest.mark.parametrize("slots", [True, False])
def test_same_errors(slots: bool) -> None:
    plain, fast = _pair(slots, True)
    for call in (lambda cls: cls(-1), lambda cls: cls(), lambda cls: cls(1, z=3), lambda cls: cls(1, 2, (), "l")):
        with pytest.raises((ValueError, TypeError)) as expected:
            call(plain)
        with pytest.raises(expected.type) as got:
            call(fast)
        assert str(got.value) == str(expected.value)


def test_refuses_what_it_cannot_build() -> None:
    @dataclass
    class WithInitVar:
        x: int
        scale: dataclasses.InitVar[int] = 1

    with pytest.raises(TypeError, match="InitVar"):
        fastinit(WithInitVar)
    with pytest.raises(TypeError, match="dataclass"):
        fastinit(int)


# the hot dataclasses that carry fastinit, with arguments for each: the same objects as their dataclass __init__
HOT = {
    TrainingSpec: lambda: dataclasses.astuple(TrainingSpec().with_values(tp=8, pp=4, vpp=5, gbs=1024, sp=True)),
    ChunkCost: lambda: (1.0, 2.0, 0.5, {"tp": 0.1}, {"tp": 0.05}, 1e9, 0.2, 0.1, 0.0, 0.0, 0.3, 0.0, 4, True),
    ChunkExtras: lambda: (0.1, 0.2),
    RankMemory: lambda: (3, {"weights": 1e9, "activations": 2e9}),
    Shard: lambda: (1, 8192, 8192, 4, True, 2, 1, 4, "bf16", True),
}


@pytest.mark.parametrize("cls", list(HOT), ids=lambda c: c.__name__)
def test_hot_dataclasses(cls: type) -> None:
    assert "__dataclass_init__" in cls.__dict__, f"{cls.__name__} does not carry fastinit"
    args = HOT[cls]()
    fast = cls(*args)
    plain = object.__new__(cls)
    cls.__dataclass_init__(plain, *args)
    assert fast == plain and repr(fast) == repr(plain)
    if not any(isinstance(getattr(fast, f.name), dict) for f in dataclasses.fields(cls)):
        assert hash(fast) == hash(plain)
    assert pickle.loads(pickle.dumps(fast)) == fast


def test_block_context_hash_and_other_scope() -> None:
    system = system_preset("h100-sxm5-80gb", 8)
    args = (system, calibration_for(system.gpu.name, "megatron-lm"), {}, False)
    fast = BlockContext(*args)
    plain = object.__new__(BlockContext)
    BlockContext.__dataclass_init__(plain, *args)  # type: ignore[attr-defined]
    assert fast == plain and hash(fast) == hash(plain) and fast.groups == plain.groups
    assert fast._other_scope == [] and fast._other_scope is not BlockContext(*args)._other_scope  # one list each


def test_block_context_with_cal_is_replace() -> None:
    system = system_preset("h100-sxm5-80gb", 8)
    ctx = BlockContext(system, calibration_for(system.gpu.name, "megatron-lm"), {}, True, None, False, "layer", False)
    other = calibration_for(system.gpu.name, "nemo")
    made, replaced = ctx.with_cal(other), dataclasses.replace(ctx, cal=other)
    assert made == replaced and hash(made) == hash(replaced) and repr(made) == repr(replaced)
    assert made.cal is other and made._other_scope == [] and made._other_scope is not ctx._other_scope


def test_spec_with_is_replace() -> None:
    spec = TrainingSpec().with_values(tp=4, pp=2, gbs=64)
    changes = {"micro_batch_size": 2, "recompute_granularity": "full", "zero_stage": 1}
    assert spec_with(spec, changes) == dataclasses.replace(spec, **changes)
