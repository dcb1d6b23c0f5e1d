"""The in-scope collectives among the local devices: all-reduce, all-gather, reduce-scatter, all-to-all and
send/recv over a sweep of message sizes, timed on N local processes (gloo on CPU, NCCL on CUDA).

Byte conventions are the communication model's (`paraplan.cost.comm.collective_time_s`): the full buffer
for all-reduce, the gathered output for all-gather, the input for reduce-scatter, what one rank sends for
all-to-all, the message for send/recv (timed as half a ping-pong between ranks 0 and 1). Kinds the
backend lacks (gloo has no reduce-scatter) are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from paraplan.graph.ops import CommKind
from paraplan.measure.hybrid.timing import Stats
from paraplan.measure.processes import ping_pong

CPU_SIZES_BYTES = tuple(2**p for p in range(14, 26, 2))  # 16 KiB .. 16 MiB
GPU_SIZES_BYTES = tuple(2**p for p in range(16, 31, 2))  # 64 KiB .. 1 GiB
KINDS = (CommKind.ALL_REDUCE, CommKind.ALL_GATHER, CommKind.REDUCE_SCATTER, CommKind.ALL_TO_ALL, CommKind.SEND_RECV)


@dataclass(frozen=True, slots=True)
class CollectiveSample:
    kind: CommKind
    world: int
    nbytes: float
    time: Stats

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "world": self.world, "nbytes": self.nbytes, "time": self.time.to_dict()}


def time_collectives(
    rank: int, world: int, device: str, sizes: Sequence[int], warmup: int, repeats: int
) -> dict[str, list[list[float]]]:
    """Run inside an initialised process group on every rank; rank 0's rows: [bytes, seconds...] per kind."""
    import time

    import torch
    import torch.distributed as dist

    dev = torch.device(f"cuda:{rank}" if device == "cuda" else "cpu")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    elem = torch.tensor([], dtype=dtype).element_size()

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def timed(fn: Callable[[], Any]) -> list[float]:
        out = []
        for i in range(warmup + repeats):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            if i >= warmup:
                out.append(time.perf_counter() - t0)
        return out

    # torch >= 2.13 names them *_single; older releases *_into_tensor / *_tensor
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    results: dict[str, list[list[float]]] = {}
    for nbytes in sizes:
        n = max(world, nbytes // elem // world * world)
        buf = torch.ones(n, dtype=dtype, device=dev)
        shard = torch.empty(n // world, dtype=dtype, device=dev)
        ops: dict[CommKind, Callable[[], Any]] = {
            CommKind.ALL_REDUCE: lambda b=buf: dist.all_reduce(b),
            CommKind.ALL_GATHER: lambda b=buf, s=shard: all_gather(b, s),
            CommKind.REDUCE_SCATTER: lambda b=buf, s=shard: reduce_scatter(s, b),
            CommKind.ALL_TO_ALL: lambda b=buf: dist.all_to_all_single(torch.empty_like(b), b),
            CommKind.SEND_RECV: lambda b=buf: ping_pong(b, rank),
        }
        for kind, fn in ops.items():
            try:
                samples = timed(fn)
            except (RuntimeError, ValueError, NotImplementedError):
                continue  # this backend lacks the collective
            if kind is CommKind.SEND_RECV:
                samples = [t / 2 for t in samples]
            results.setdefault(kind.value, []).append([n * elem, *samples])
    return results


def collectives_from_rows(rows: dict[str, list[list[float]]], world: int) -> list[CollectiveSample]:
    return [
        CollectiveSample(CommKind(kind), world, float(row[0]), Stats.of(row[1:]))
        for kind, kind_rows in rows.items()
        for row in kind_rows
    ]
