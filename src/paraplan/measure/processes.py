"""Run a function on N local processes joined in one torch.distributed group (gloo on CPU, NCCL on CUDA).

The one process harness of the torch measurements: the hybrid benchmark and its real runs
(`paraplan.measure.hybrid`), the reference training run (`paraplan.measure.e2e`) and the collective
microbenchmarks (`paraplan.measure.bench`). Each process sets its torch thread count first (CPU: pinned to its
own cores unless told otherwise, so processes do not fight over the cores), joins the group over TCP on
localhost, runs `fn(rank, world, *args)` and writes what it returns (JSON) to a temporary folder; the caller
gets the list of results, one per rank.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

PIN_ENV = "PARAPLAN_HYBRID_PIN"
GROUP_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ping_pong(buffer: Any, rank: int) -> None:
    """`buffer` from rank 0 to rank 1 and back (the other ranks do nothing): one way is half of it."""
    import torch.distributed as dist

    if rank == 0:
        dist.send(buffer, 1)
        dist.recv(buffer, 1)
    elif rank == 1:
        dist.recv(buffer, 0)
        dist.send(buffer, 0)


def pin_to_cores(rank: int, threads: int) -> None:
    """CPU "device" `rank` owns cores [rank * threads, (rank + 1) * threads) when the machine has them, so the
    processes of one job never share a core, as GPUs never share SMs: a pipeline stage waiting in a bubble
    leaves its core idle instead of lending it to the other stage. PARAPLAN_HYBRID_PIN=0 turns it off."""
    if os.environ.get(PIN_ENV, "1") == "0":
        return
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    mine = cores[rank * threads : (rank + 1) * threads]
    if len(mine) == threads:
        os.sched_setaffinity(0, mine)


def _entry(
    rank: int,
    fn: Callable[..., Any],
    world: int,
    port: int,
    out_dir: str,
    device: str,
    threads: int | None,
    pin_cores: bool,
    args: tuple[Any, ...],
) -> None:
    import torch
    import torch.distributed as dist

    if threads is not None:
        torch.set_num_threads(threads)
    if device == "cuda":
        torch.cuda.set_device(rank)
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if pin_cores:
            pin_to_cores(rank, threads or 1)
    dist.init_process_group(
        "nccl" if device == "cuda" else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S),
    )
    try:
        result = fn(rank, world, *args)
        Path(out_dir, f"{rank}.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


# torch._dynamo: the first optimizer built in a process imports it (seconds)
PRELOAD = [
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "paraplan.measure.layers",
    "paraplan.measure.hybrid.bench",
    "paraplan.measure.hybrid.realrun",
]


def run_processes(
    fn: Callable[..., Any],
    world: int,
    args: tuple[Any, ...] = (),
    device: str = "cpu",
    threads: int | None = 1,
    *,
    pin_cores: bool = True,
) -> list[Any]:
    """`fn(rank, world, *args)` on `world` processes; its JSON-serialisable results, one per rank. `fn` must be
    a module-level function. `threads`: torch threads per process (None: torch's default). CPU processes fork
    from a fork server that imported torch once (a fresh import per process takes seconds on a busy machine);
    CUDA needs fresh processes (spawn)."""
    import torch.multiprocessing as mp

    method = "spawn" if device == "cuda" else "forkserver"
    if method == "forkserver":
        mp.get_context("forkserver").set_forkserver_preload(PRELOAD)
    with tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(
            _entry,
            args=(fn, world, free_port(), out_dir, device, threads, pin_cores, args),
            nprocs=world,
            join=True,
            start_method=method,
        )
        return [json.loads(Path(out_dir, f"{rank}.json").read_text()) for rank in range(world)]
