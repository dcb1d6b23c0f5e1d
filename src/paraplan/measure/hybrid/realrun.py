"""A real multi-process training run of the reference layers on local CPU processes (gloo): the ground truth
the CPU validation compares the upscaled projection with.

Layouts: pipeline parallelism with the 1F1B schedule (activations and their gradients sent between
neighbour stages with isend/recv), data parallelism with the gradients accumulated over the micro-batches
in one contiguous buffer and all-reduced once per step (Megatron's DDP without overlap), or both. Ranks
follow Megatron's order (dp varies fastest, then pp). Every step: micro-batches, the gradient all-reduce,
AdamW, zeroing the gradients; the step time is wall time between two barriers.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from paraplan.specs.model import ModelSpec
from paraplan.specs.training import TrainingSpec


@dataclass(frozen=True, slots=True)
class RealRun:
    step_times_s: tuple[float, ...]
    parts_s: dict[str, float]  # per step on the slowest rank: compute, grad all-reduce, optimizer

    @property
    def median_s(self) -> float:
        return statistics.median(self.step_times_s)


class Trainer:
    """One rank of a pp x dp job (tp = cp = 1) of the reference layers, inside an initialised gloo group.
    Every rank of the world must build its Trainers in the same order (process groups are collective)."""

    def __init__(self, rank: int, model: ModelSpec, train: TrainingSpec, dtype: str = "fp32", seed: int = 0) -> None:
        import torch
        import torch.distributed as dist

        from paraplan.graph.layers import padded_vocab
        from paraplan.measure.device import torch_dtype
        from paraplan.measure.reference import build_stage, flat_grad_buffer

        self.torch, self.dist, self.dtype = torch, dist, torch_dtype(dtype)
        dp, pp = train.dp, train.pp
        self.rank, self.dp, self.pp = rank, dp, pp
        self.stage, replica = rank // dp, rank % dp
        groups = [dist.new_group([s * dp + d for d in range(dp)]) for s in range(pp)] if dp > 1 else []
        self.dp_group = groups[self.stage] if groups else None
        # replicas of a stage start from the same weights
        self.module = build_stage(model, train, self.stage, dtype, seed + self.stage)
        params = list(self.module.parameters())
        self.flat = flat_grad_buffer(params, self.dtype)
        self.optimizer = torch.optim.AdamW(params, lr=1e-4, foreach=True)
        self.m = train.num_microbatches
        data = torch.Generator().manual_seed(seed + 100 + replica)
        vocab = padded_vocab(model, train.tp) // train.tp
        self.ids = [torch.randint(0, vocab, (train.mbs, train.seq), generator=data) for _ in range(self.m)]
        self.act_shape = (train.mbs, train.seq, model.hidden_size)
        self.loss_scale = 1.0 / (self.m * dp)
        self.parts = {"compute_s": 0.0, "grad_reduce_s": 0.0, "optimizer_s": 0.0}

    def _one_f_one_b(self) -> None:
        torch, dist = self.torch, self.dist
        first, last = self.stage == 0, self.stage == self.pp - 1
        prev_rank, next_rank = self.rank - self.dp, self.rank + self.dp
        saved: deque[tuple[Any, Any]] = deque()
        sends: list[tuple[Any, Any]] = []

        def forward(i: int) -> None:
            h_in = None
            if not first:
                h_in = torch.empty(self.act_shape, dtype=self.dtype)
                dist.recv(h_in, prev_rank)
                h_in.requires_grad_()
            t0 = time.perf_counter()
            out = self.module(self.ids[i] if first else h_in, self.ids[i])
            if last:
                out = out * self.loss_scale
            self.parts["compute_s"] += time.perf_counter() - t0
            if not last:
                sent = out.detach()
                sends.append((dist.isend(sent, next_rank), sent))
            saved.append((h_in, out))

        def backward() -> None:
            h_in, out = saved.popleft()
            grad = None
            if not last:
                grad = torch.empty(self.act_shape, dtype=self.dtype)
                dist.recv(grad, next_rank)
            t0 = time.perf_counter()
            torch.autograd.backward(out, grad)
            self.parts["compute_s"] += time.perf_counter() - t0
            if not first:
                sends.append((dist.isend(h_in.grad, prev_rank), h_in.grad))

        warm = min(self.pp - self.stage - 1, self.m)
        for i in range(warm):
            forward(i)
        for i in range(self.m - warm):
            forward(i + warm)
            backward()
        for _ in range(warm):
            backward()
        for work, _tensor in sends:
            work.wait()

    def step(self) -> float:
        """One training step between two barriers; returns its wall time."""
        dist = self.dist
        dist.barrier()
        started = time.perf_counter()
        if self.pp > 1:
            self._one_f_one_b()
        else:
            for i in range(self.m):
                t0 = time.perf_counter()
                (self.module(self.ids[i], self.ids[i]) * self.loss_scale).backward()
                self.parts["compute_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        if self.dp_group is not None:
            dist.all_reduce(self.flat, group=self.dp_group)
        t1 = time.perf_counter()
        self.optimizer.step()
        self.flat.zero_()
        t2 = time.perf_counter()
        self.parts["grad_reduce_s"] += t1 - t0
        self.parts["optimizer_s"] += t2 - t1
        dist.barrier()
        return time.perf_counter() - started


def _worker(
    rank: int, world: int, model: ModelSpec, train: TrainingSpec, steps: int, warmup: int, dtype: str, seed: int
) -> dict[str, Any]:
    trainer = Trainer(rank, model, train, dtype, seed)
    for _ in range(warmup):
        trainer.step()
    trainer.parts = dict.fromkeys(trainer.parts, 0.0)
    times = [trainer.step() for _ in range(steps)]
    return {"step_times_s": times, "parts_s": {k: v / steps for k, v in trainer.parts.items()}}


def real_run(
    model: ModelSpec,
    train: TrainingSpec,
    *,
    steps: int = 5,
    warmup: int = 2,
    dtype: str = "fp32",
    threads: int = 1,
    seed: int = 0,
) -> RealRun:
    """Train `steps` steps of a pp x dp layout (tp = cp = ep = 1) on pp * dp local CPU processes (gloo)."""
    from paraplan.measure.processes import run_processes

    if train.tp != 1 or train.cp != 1 or train.ep != 1:
        raise ValueError("the real CPU run covers pp and dp layouts (tp = cp = ep = 1)")
    results = run_processes(_worker, train.pp * train.dp, (model, train, steps, warmup, dtype, seed), "cpu", threads)
    slowest = max(results, key=lambda r: sum(r["parts_s"].values()))
    return RealRun(tuple(results[0]["step_times_s"]), dict(slowest["parts_s"]))
