"""The task graph of one schedule, as flat arrays (built with numpy once per shape, cached).

A task is what the compute stream of a rank runs in one go: one action, or an overlapped F&B pair. Tasks
are numbered 1..n rank by rank in execution order, so rank r owns the ids lo[r]..hi[r]-1 and the task
before i on its rank is i-1. Durations are looked up per call through `cost_key`; everything else depends
only on (schedule, pp, chunks, micro-batches, pairing) and is shared by all calls with that shape.

Time slots: the engines keep one flat list of times. Slot 0 holds 0.0 (no dependency); slots 1..n hold the
end of task i; then one slot per point-to-point send (arrival time at the consumer); then one release slot
per (rank, chunk) holding the earliest start of that chunk's first forward (parameter all-gather).
Only cross-rank inputs are dependencies: a same-rank input is always earlier in the rank's order (checked
here), so it has ended before the task starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from paraplan.sim import loops_jit, plan_jit
from paraplan.sim.priority import priority_order
from paraplan.sim.program import BW, KIND_NAMES, Action, B, F, W
from paraplan.sim.schedules import action_arrays
from paraplan.specs.schedule import schedule as schedule_named

N_KINDS = 4  # F, B, W, BW


@dataclass(frozen=True, eq=False)
class Plan:
    schedule: str
    pp: int
    n_chunks: int
    num_microbatches: int
    paired: bool
    n_tasks: int
    lo: tuple[int, ...]  # first task id of each rank
    hi: tuple[int, ...]  # one past the last task id of each rank
    task_rank: np.ndarray  # [1 + n]
    first_action: np.ndarray  # [1 + n + 1]: actions of task i are first_action[i]..first_action[i+1]-1
    action_kind: np.ndarray  # per action, all ranks concatenated in execution order
    action_chunk: np.ndarray
    action_mb: np.ndarray
    dep_slots: np.ndarray  # [1 + n, max_deps] time slots a task waits for (0 = none)
    send_slots: np.ndarray  # [1 + n, 2] send slots a task fills when it ends, in FIFO order (0 = none)
    send_producer: np.ndarray  # per send slot (offset by send_base): producing task
    send_base: int
    release_base: int
    n_slots: int
    cost_key: np.ndarray  # [1 + n] index into the duration table
    pair_keys: tuple[tuple[int, int, int, int], ...]  # (rank, F chunk, B kind, B chunk) per pair key
    key_counts: np.ndarray  # [pp, n_keys]: tasks of each cost key per rank
    first_forward: tuple[tuple[int, ...], ...]  # [rank][chunk] -> task of the chunk's first forward (0 = none)
    last_weight: tuple[tuple[int, ...], ...]  # [rank][chunk] -> task of the chunk's last weight gradient
    inflight_vectors: tuple[np.ndarray, ...]  # per rank: candidate peak live (chunk, micro-batch) counts
    peak_inflight_chunks: tuple[int, ...]  # per rank: the most live (chunk, micro-batch)s at once
    microbatches_per_chunk: tuple[tuple[int, ...], ...]  # [rank][chunk]
    sends_per_rank: tuple[int, ...]
    memo: dict = field(default_factory=dict, compare=False, repr=False)
    """Filled by the engine: the topological order found by the first run (`paraplan.sim.order.order_of`) and
    the loops' rows, reused by later runs."""

    @property
    def n_keys(self) -> int:
        return self.pp * self.n_chunks * N_KINDS + len(self.pair_keys)

    @property
    def max_deps(self) -> int:
        return self.dep_slots.shape[1]

    def base_key(self, rank: int, chunk: int, kind: int) -> int:
        return (rank * self.n_chunks + chunk) * N_KINDS + kind

    def actions(self, task: int) -> tuple[Action, ...]:
        a, b = int(self.first_action[task]), int(self.first_action[task + 1])
        return tuple((int(self.action_kind[k]), int(self.action_chunk[k]), int(self.action_mb[k])) for k in range(a, b))

    def task_name(self, task: int) -> str:
        return " + ".join(f"{KIND_NAMES[k]} c{c} mb{mb}" for k, c, mb in self.actions(task))

    @cached_property
    def rows(self) -> tuple[list, ...]:
        """Per task lists for the pure-Python loops: (dep slots..., send slot 0, send slot 1)."""
        deps = tuple(self.dep_slots[:, j].tolist() for j in range(self.max_deps))
        return (*deps, self.send_slots[:, 0].tolist(), self.send_slots[:, 1].tolist())

    def deps(self, task: int) -> list[int]:
        """The time slots `task` waits for besides the previous task on its rank."""
        return [col[task] for col in self.rows[:-2] if col[task]]

    @cached_property
    def last_tasks(self) -> np.ndarray | None:
        """Each rank's last task (int64, rank order), set up once per plan for the engines; None where a rank has
        no task."""
        if any(h <= lo for lo, h in zip(self.lo, self.hi, strict=True)):
            return None
        return np.array(self.hi, dtype=np.int64) - 1

    @cached_property
    def first_forwards(self) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        """Per rank: (task, chunk, cost key) of each chunk's first forward, in task order."""
        return self._in_task_order(self.first_forward)

    @cached_property
    def last_weights(self) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        """Per rank: (task, chunk, cost key) of each chunk's last weight gradient, in task order."""
        return self._in_task_order(self.last_weight)

    @cached_property
    def memory_moments(self) -> tuple[np.ndarray, ...]:
        """Per rank: the candidate moments of its memory peak, one row each, columns in `MOMENT_GROUPS` groups of
        one per local chunk: the live (chunk, micro-batch) activations, whether the chunk's parameters are
        gathered (from its first forward until its last weight gradient), whether its unsharded gradient
        accumulator exists (from its first weight gradient until its last), and its forwards done so far (the
        outputs a last stage keeps). The moments: right after each forward and after each chunk's first weight
        gradient (its accumulator just created); any non-negative weighting peaks at one of them. What torch
        FSDP2 under torch.distributed.pipelining does (`memory.model.keeps_stage_unsharded`): no gradient sync
        and no reshard after backward but on the last micro-batch, when `backward_maybe_with_nosync` runs the
        FSDP post-backward (reduce-scatter, free the unsharded gradient, reshard the parameters)."""
        out = []
        for r in range(self.pp):
            a, b = int(self.first_action[self.lo[r]]), int(self.first_action[self.hi[r]])
            out.append(_rank_moments(self.action_kind[a:b], self.action_chunk[a:b], self.n_chunks))
        return tuple(out)

    def _in_task_order(self, table: tuple[tuple[int, ...], ...]) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        tasks = [task for row in table for task in row]
        keys = dict(zip(tasks, self.cost_key[tasks].tolist(), strict=True))  # one key a (rank, chunk), not all
        return tuple(tuple(sorted((task, c, keys[task]) for c, task in enumerate(row) if task)) for row in table)


def _neighbour_tables(schedule: str, pp: int, vpp: int, n_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """[rank, chunk] -> rank*n_chunks+chunk of the stage before / after it on its path (-1 at the ends)."""
    up = [-1] * (pp * n_chunks)  # lists, then arrays: numpy's item assignment costs more than the lists' here
    down = [-1] * (pp * n_chunks)
    for path in schedule_named(schedule).stage_paths(pp, vpp):
        flat = [rank * n_chunks + chunk for rank, chunk in path]
        for before, after in zip(flat, flat[1:], strict=False):
            up[after] = before
            down[before] = after
    return np.array(up, dtype=np.int64).reshape(pp, n_chunks), np.array(down, dtype=np.int64).reshape(pp, n_chunks)


def _live_after_forwards(
    kind: np.ndarray, chunk: np.ndarray, offset: np.ndarray, lengths: np.ndarray, n_chunks: int
) -> list[np.ndarray]:
    """Per rank: the distinct live (chunk, micro-batch) count vectors right after each F, and the empty one.

    Each action moves one chunk's count by one, so the vectors pack into integers (mixed radix: a digit per
    chunk, its base one more than the chunk's most live micro-batches; as few int64 words as hold them) and
    cumulative sums give them all. A rank's activations are all freed by its end, so every rank (and every
    rank's chunk) starts from zero."""
    pp = len(lengths)
    step = np.where(kind == F, 1, np.where((kind == W) | (kind == BW), -1, 0))
    segment = chunk * pp + np.repeat(np.arange(pp), lengths)  # (chunk, rank), small: a radix sort
    by_chunk = np.argsort(segment.astype(np.uint16) if pp * n_chunks < 2**16 else segment, kind="stable")
    chunk_starts = np.searchsorted(chunk[by_chunk], np.arange(n_chunks))
    bases = (np.maximum.reduceat(np.cumsum(step[by_chunk]), chunk_starts) + 1).tolist()
    word_of, weight, words, product = [], [], 0, 2**63
    for base in bases:
        if product * base > 2**62:  # start a new word
            words, product = words + 1, 1
        word_of.append(words - 1)
        weight.append(product)
        product *= base
    word_of_a, weight_a = np.array(word_of), np.array(weight, dtype=np.int64)
    contribution = step * weight_a[chunk]
    packed = np.stack([np.cumsum(np.where(word_of_a[chunk] == w, contribution, 0)) for w in range(words)], axis=1)
    is_f = step == 1
    out = []
    for a, b in zip(offset.tolist(), (offset + lengths).tolist(), strict=True):
        rows = np.vstack((packed[a:b][is_f[a:b]], np.zeros((1, words), dtype=np.int64)))
        rows = np.unique(rows[:, 0])[:, None] if words == 1 else np.unique(rows, axis=0)
        out.append((rows[:, word_of_a] // weight_a) % np.array(bases))
    return out


def _peak_candidates(v: np.ndarray) -> np.ndarray:
    """The distinct rows `v`, without those another row dominates componentwise when that check is cheap:
    any weighted peak (activation bytes per chunk) is the max of a dot product over them."""
    v = v.astype(np.float64)
    if len(v) <= 128:
        ge = (v[:, None, :] >= v[None, :, :]).all(axis=2)  # ge[i, j]: row i >= row j everywhere
        v = v[ge.sum(axis=0) == 1]  # dominated by itself only
    return v


MOMENT_GROUPS = 4
"""Column groups of `Plan.memory_moments`: live activations, gathered parameters, gradient accumulators, forwards
done, one column per local chunk each."""


def _rank_moments(kind: np.ndarray, chunk: np.ndarray, n_chunks: int) -> np.ndarray:
    """One rank's candidate peak moments (`Plan.memory_moments`), from its actions in execution order."""
    one_hot = np.zeros((len(kind), n_chunks), dtype=np.int64)
    one_hot[np.arange(len(kind)), chunk] = 1
    is_f = kind == F
    weight_grad = (kind == W) | (kind == BW)  # the actions that produce parameter gradients
    forwards = np.cumsum(one_hot * is_f[:, None], axis=0)
    grads = np.cumsum(one_hot * weight_grad[:, None], axis=0)
    live = forwards - grads  # a micro-batch's activations live from its F until its W (or BW) ends
    total_grads = grads[-1] if len(kind) else np.zeros(n_chunks, dtype=np.int64)
    done = grads >= total_grads  # the chunk's last gradient has run: reduce-scattered, resharded
    gathered = (forwards > 0) & ~done
    accumulating = (grads > 0) & ~done
    first_grad = weight_grad & (grads[np.arange(len(kind)), chunk] == 1)
    rows = np.hstack((live, gathered, accumulating, forwards))[is_f | first_grad]
    rows = np.unique(np.vstack((rows, np.zeros((1, MOMENT_GROUPS * n_chunks), dtype=np.int64))), axis=0)
    return _peak_candidates(rows)


def _group_columns(owner: np.ndarray, values: np.ndarray, n_rows: int) -> np.ndarray:
    """Scatter `values` into a [n_rows, width] matrix, row `owner`, in the given order (0 = empty)."""
    if len(owner) == 0:
        return np.zeros((n_rows, 0), dtype=np.int64)
    if (owner[1:] < owner[:-1]).any():
        order = np.argsort(owner, kind="stable")
        owner, values = owner[order], values[order]
    run_start = np.ones(len(owner), dtype=bool)
    run_start[1:] = owner[1:] != owner[:-1]
    if run_start.all():  # one value a row (the common case)
        column = np.zeros(len(owner), dtype=np.int64)
    else:
        column = np.arange(len(owner)) - np.maximum.accumulate(np.where(run_start, np.arange(len(owner)), 0))
    width = int(column.max()) + 1
    out = np.zeros(n_rows * width, dtype=np.int64)
    out[owner * width + column] = values
    return out.reshape(n_rows, width)


def _pairs_runnable(
    starts: np.ndarray, cons: np.ndarray, prod: np.ndarray, kind: np.ndarray, rank: np.ndarray, offset: np.ndarray
) -> bool:
    """Whether every pair can stay (the tasks with all of them have a topological order): the common case,
    found with numpy before playing the orders."""
    second = np.zeros(len(kind), dtype=bool)
    second[starts + 1] = True
    task_of = np.cumsum(~second)
    heads = np.flatnonzero(~second)
    task_rank = np.concatenate(([0], rank[heads]))
    forward = np.concatenate(([False], kind[heads] == F))
    lo = tuple(task_of[offset].tolist())
    return priority_order(task_rank, lo, forward, task_of[cons], task_of[prod]) is not None


def _acyclic_pairs(
    starts: np.ndarray, cons: np.ndarray, prod: np.ndarray, offset: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """The pair starts that keep the static orders runnable. Plays the orders with pairs (an action runs
    once its cross-rank inputs ran; a pair needs both its actions' inputs); when every rank is stuck, the
    pairs at the heads of the stuck ranks are split, and the play goes on."""
    n_actions = int(lengths.sum())
    order = np.argsort(cons, kind="stable")
    prod_sorted = prod[order].tolist()
    bounds = np.searchsorted(cons[order], np.arange(n_actions + 1)).tolist()
    is_start = bytearray(n_actions + 1)
    for k in starts.tolist():
        is_start[k] = 1
    done = bytearray(n_actions)
    pp = len(lengths)
    cur = offset.tolist()
    end = (offset + lengths).tolist()
    left = n_actions

    def ready(k: int) -> bool:
        return all(done[p] for p in prod_sorted[bounds[k] : bounds[k + 1]])

    sweep = 0
    while left:
        moved = 0
        for r in range(pp) if sweep % 2 == 0 else reversed(range(pp)):
            k = cur[r]
            while k < end[r]:
                width = 2 if is_start[k] else 1
                if not all(ready(j) for j in range(k, k + width)):
                    break
                for j in range(k, k + width):
                    done[j] = 1
                k += width
            moved += k - cur[r]
            cur[r] = k
        if not moved:
            heads = [cur[r] for r in range(pp) if cur[r] < end[r] and is_start[cur[r]]]
            if not heads:
                raise ValueError("the static orders deadlock even without F&B pairs")
            for k in heads:
                is_start[k] = 0
        left -= moved
        sweep += 1
    return np.array([k for k in starts.tolist() if is_start[k]], dtype=np.int64)


SMALL_PLAN_TASKS = 4096


def build_plan(schedule: str, pp: int, vpp: int, num_microbatches: int, paired: bool) -> Plan:
    """The cached task graph; raises ValueError if a rank's order runs an action before its input.

    Two caches by size: many small plans (validation and tuning sweep hundreds of shapes) and a few
    large ones (a 32k-task plan with its loop lists holds about 13 MB)."""
    tasks = 2 * pp * schedule_named(schedule).chunks_per_rank(vpp) * num_microbatches
    if tasks <= SMALL_PLAN_TASKS:
        return _build_small(schedule, pp, vpp, num_microbatches, paired)
    return _build_large(schedule, pp, vpp, num_microbatches, paired)


def peak_live_bytes(plan: Plan, rank: int, chunk_bytes: list[float]) -> float:
    """The largest sum of `chunk_bytes` (one figure per local chunk of `rank`, per micro-batch) over the (chunk,
    micro-batch)s alive at once on that rank: the peak activation memory the schedule leaves there."""
    vectors = plan.inflight_vectors[rank]
    if not len(vectors):
        return 0.0
    if len(chunk_bytes) == 1 and chunk_bytes[0] >= 0:
        # one chunk per rank: each candidate is count x bytes, one rounding, monotone in the count for bytes >= 0,
        # so the largest is the most live micro-batches times the bytes, to the bit (tests/sim/test_plan_peaks.py)
        return float(plan.peak_inflight_chunks[rank]) * chunk_bytes[0]
    # the last few answers kept on the plan: the tuner's memory filter asks, then the projection of the same spec
    # asks again with the same bytes (its chunks' saved activations are the stages' footprints)
    recent = plan.memo.get("peaks")
    if recent is None or len(recent) >= _RECENT_PEAKS:
        recent = plan.memo["peaks"] = {}
    key = (rank, *chunk_bytes)
    peak = recent.get(key)
    if peak is None:
        peak = recent[key] = float((vectors @ chunk_bytes).max())
    return peak


_RECENT_PEAKS = 64
"""`peak_live_bytes` answers kept per plan (then dropped all at once: a plan serves thousands of specs in a search)."""


@lru_cache(maxsize=1024)
def _build_small(schedule: str, pp: int, vpp: int, num_microbatches: int, paired: bool) -> Plan:
    return _build_plan(schedule, pp, vpp, num_microbatches, paired)


@lru_cache(maxsize=32)
def _build_large(schedule: str, pp: int, vpp: int, num_microbatches: int, paired: bool) -> Plan:
    return _build_plan(schedule, pp, vpp, num_microbatches, paired)


def _build_plan(schedule: str, pp: int, vpp: int, num_microbatches: int, paired: bool) -> Plan:
    m = num_microbatches
    n_chunks = schedule_named(schedule).chunks_per_rank(vpp)
    kind, chunk, mb, lengths, pair_starts = action_arrays(schedule, pp, vpp, m, paired)
    n_actions = len(kind)
    if n_actions and not (paired and len(pair_starts)) and loops_jit.loaded():
        return _compiled_plan(schedule, pp, vpp, m, paired, kind, chunk, mb, lengths)
    rank = np.repeat(np.arange(pp, dtype=np.int64), lengths)
    offset = np.concatenate(([0], np.cumsum(lengths)[:-1]))

    # 1. producers: the action whose output each action consumes
    stage = rank * n_chunks + chunk
    code = stage * m + mb
    is_f = kind == F
    is_b = (kind == B) | (kind == BW)
    f_action = np.full(pp * n_chunks * m, -1, dtype=np.int64)
    b_action = np.full(pp * n_chunks * m, -1, dtype=np.int64)
    f_action[code[is_f]] = np.flatnonzero(is_f)
    b_action[code[is_b]] = np.flatnonzero(is_b)
    up, down = _neighbour_tables(schedule, pp, vpp, n_chunks)
    up_s, down_s = up.ravel()[stage], down.ravel()[stage]
    consumers, producers = [], []
    sel = np.flatnonzero(is_f & (up_s >= 0))  # F needs the previous stage's F
    consumers.append(sel)
    producers.append(f_action[up_s[sel] * m + mb[sel]])
    sel = np.flatnonzero(is_b)  # B needs its own F ...
    consumers.append(sel)
    producers.append(f_action[code[sel]])
    sel = np.flatnonzero(is_b & (down_s >= 0))  # ... and the next stage's B
    consumers.append(sel)
    producers.append(b_action[down_s[sel] * m + mb[sel]])
    sel = np.flatnonzero(kind == W)  # W needs its own B
    consumers.append(sel)
    producers.append(b_action[code[sel]])
    cons = np.concatenate(consumers)
    prod = np.concatenate(producers)
    if (prod < 0).any():
        raise ValueError(f"{schedule}: an action's input never runs (pp={pp}, m={m})")
    # 2. tasks: an F and the next B/BW of another micro-batch form one pair task when pairing, unless the
    # pair would close a dependency cycle (then it runs as two tasks)
    second = np.zeros(n_actions, dtype=bool)
    if paired:
        starts = pair_starts
        if len(starts):
            ok = (kind[starts] == F) & np.isin(kind[starts + 1], (B, BW)) & (mb[starts] != mb[starts + 1])
            starts = starts[ok]
            cross = rank[cons] != rank[prod]
            if not _pairs_runnable(starts, cons[cross], prod[cross], kind, rank, offset):
                starts = _acyclic_pairs(starts, cons[cross], prod[cross], offset, lengths)
            second[starts + 1] = True
    task_of = np.cumsum(~second)  # 1-based task id of every action
    n = int(task_of[-1]) if n_actions else 0
    first_action = np.concatenate(([0], np.flatnonzero(~second), [n_actions]))
    task_rank = np.concatenate(([0], rank[first_action[1:-1]]))
    rank_first_task = task_of[offset] if n_actions else np.zeros(pp, dtype=np.int64)
    lo = tuple(int(x) for x in rank_first_task)
    hi = tuple(int(x) for x in np.append(rank_first_task[1:], n + 1))
    cons_task, prod_task = task_of[cons], task_of[prod]
    same = rank[cons] == rank[prod]
    if (prod_task[same] >= cons_task[same]).any():
        bad = int(np.flatnonzero(same & (prod_task >= cons_task))[0])
        raise ValueError(
            f"{schedule}: rank {int(rank[cons[bad]])} runs {KIND_NAMES[kind[cons[bad]]]}{chunk[cons[bad]]}."
            f"{mb[cons[bad]]} before its input (order error)"
        )

    # 3. sends: one slot per cross-rank edge, ordered by producing action (FIFO per rank)
    cross = np.flatnonzero(~same)
    cross = cross[np.argsort(prod[cross], kind="stable")]
    send_base = n + 1
    slot = send_base + np.arange(len(cross), dtype=np.int64)
    send_producer = prod_task[cross]
    release_base = send_base + len(cross)
    n_slots = release_base + pp * n_chunks
    send_slots = _group_columns(prod_task[cross], slot, n + 1)
    send_slots = np.pad(send_slots, ((0, 0), (0, 2 - send_slots.shape[1])))

    # first forward / last weight gradient of every (rank, chunk); the first forward waits for a release
    f_idx = np.flatnonzero(is_f)
    uniq, first_pos = np.unique(stage[f_idx], return_index=True)
    first_forward = np.zeros(pp * n_chunks, dtype=np.int64)
    first_forward[uniq] = task_of[f_idx[first_pos]]
    w_idx = np.flatnonzero((kind == W) | (kind == BW))[::-1]
    uniq_w, last_pos = np.unique(stage[w_idx], return_index=True)
    last_weight = np.zeros(pp * n_chunks, dtype=np.int64)
    last_weight[uniq_w] = task_of[w_idx[last_pos]]
    # dependency slots per task: cross-rank inputs in action order, then the release slot
    ff_stage = np.flatnonzero(first_forward)
    order = np.argsort(cons[cross], kind="stable")
    dep_slots = _group_columns(cons_task[cross][order], slot[order], n + 1)  # owners in order: no sort
    released = first_forward[ff_stage]
    after = (dep_slots[released] > 0).sum(axis=1)  # the release slot comes after the cross-rank inputs
    if len(released) and after.max() >= dep_slots.shape[1]:
        dep_slots = np.pad(dep_slots, ((0, 0), (0, 1)))
    dep_slots[released, after] = release_base + ff_stage
    if dep_slots.shape[1] < 2:
        dep_slots = np.pad(dep_slots, ((0, 0), (0, 2 - dep_slots.shape[1])))

    # 4. cost keys: (rank, chunk, kind), and one key per distinct pair shape
    base_keys = pp * n_chunks * N_KINDS
    head = first_action[1:-1]
    cost_key = np.zeros(n + 1, dtype=np.int64)
    cost_key[1:] = stage[head] * N_KINDS + kind[head]
    pair_tasks = np.flatnonzero(np.diff(first_action[1:]) == 2) + 1
    pair_keys: tuple[tuple[int, int, int, int], ...] = ()
    if len(pair_tasks):
        fa = first_action[pair_tasks]
        shape_code = ((rank[fa] * n_chunks + chunk[fa]) * N_KINDS + kind[fa + 1]) * n_chunks + chunk[fa + 1]
        shapes, inverse = np.unique(shape_code, return_inverse=True)
        cost_key[pair_tasks] = base_keys + inverse
        pair_keys = tuple(
            (
                int(s // (n_chunks * N_KINDS * n_chunks)),
                int(s // (N_KINDS * n_chunks) % n_chunks),
                int(s // n_chunks % N_KINDS),
                int(s % n_chunks),
            )
            for s in shapes
        )
    n_keys = base_keys + len(pair_keys)
    key_counts = np.bincount(task_rank[1:] * n_keys + cost_key[1:], minlength=pp * n_keys).reshape(pp, n_keys)
    key_counts = key_counts.astype(np.float64)

    # 5. activations alive: from a chunk's F until its last backward pass (W or BW) ends; within a task the
    # allocations come first, so the live counts right after each F are the candidates for the peak
    inflight_vectors = [_peak_candidates(v) for v in _live_after_forwards(kind, chunk, offset, lengths, n_chunks)]
    peak_chunks = [int(v.sum(axis=1).max()) for v in inflight_vectors]

    forwards = np.bincount(stage[f_idx], minlength=pp * n_chunks).reshape(pp, n_chunks)
    sends_per_rank = np.bincount(rank[prod[cross]], minlength=pp)
    return Plan(
        schedule=schedule,
        pp=pp,
        n_chunks=n_chunks,
        num_microbatches=m,
        paired=paired,
        n_tasks=n,
        lo=lo,
        hi=hi,
        task_rank=task_rank,
        first_action=first_action,
        action_kind=kind,
        action_chunk=chunk,
        action_mb=mb,
        dep_slots=dep_slots,
        send_slots=send_slots,
        send_producer=send_producer,
        send_base=send_base,
        release_base=release_base,
        n_slots=n_slots,
        cost_key=cost_key,
        pair_keys=pair_keys,
        key_counts=key_counts,
        first_forward=tuple(tuple(int(x) for x in row) for row in first_forward.reshape(pp, n_chunks)),
        last_weight=tuple(tuple(int(x) for x in row) for row in last_weight.reshape(pp, n_chunks)),
        inflight_vectors=tuple(inflight_vectors),
        peak_inflight_chunks=tuple(peak_chunks),
        microbatches_per_chunk=tuple(tuple(int(x) for x in row) for row in forwards),
        sends_per_rank=tuple(int(x) for x in sends_per_rank),
    )


def _compiled_plan(
    schedule: str,
    pp: int,
    vpp: int,
    m: int,
    paired: bool,
    kind: np.ndarray,
    chunk: np.ndarray,
    mb: np.ndarray,
    lengths: np.ndarray,
) -> Plan:
    """`_build_plan` of a plan without F&B pairs, by the compiled kernel (`paraplan.sim.plan_jit`): the same Plan."""
    n_chunks = schedule_named(schedule).chunks_per_rank(vpp)
    up, down = _neighbour_tables(schedule, pp, vpp, n_chunks)
    out = plan_jit.plan_arrays(kind, chunk, mb, lengths, up.ravel(), down.ravel(), m, n_chunks, N_KINDS)
    if out.status == plan_jit.Status.NO_INPUT:
        raise ValueError(f"{schedule}: an action's input never runs (pp={pp}, m={m})")
    offset = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    if out.status == plan_jit.Status.ORDER:
        a = out.bad_consumer
        rank = int(np.searchsorted(offset, a, side="right")) - 1
        raise ValueError(
            f"{schedule}: rank {rank} runs {KIND_NAMES[kind[a]]}{chunk[a]}.{mb[a]} before its input (order error)"
        )
    n = len(kind)
    rank_of_task = np.repeat(np.arange(pp, dtype=np.int64), lengths)
    lo = tuple(int(x) + 1 for x in offset)
    if out.status == plan_jit.Status.WIDE:
        inflight = [_peak_candidates(v) for v in _live_after_forwards(kind, chunk, offset, lengths, n_chunks)]
        peaks = [int(v.sum(axis=1).max()) for v in inflight]
    else:
        bounds = out.candidate_offsets.tolist()
        inflight = [out.candidates[a:b].copy() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        peaks = out.peaks.tolist()

    def per_stage(values: np.ndarray) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(row) for row in values.reshape(pp, n_chunks).tolist())

    return Plan(
        schedule=schedule,
        pp=pp,
        n_chunks=n_chunks,
        num_microbatches=m,
        paired=paired,
        n_tasks=n,
        lo=lo,
        hi=(*lo[1:], n + 1),
        task_rank=np.concatenate(([0], rank_of_task)),
        first_action=np.concatenate(([0], np.arange(n + 1))),
        action_kind=kind,
        action_chunk=chunk,
        action_mb=mb,
        dep_slots=out.dep_slots,
        send_slots=out.send_slots,
        send_producer=out.send_producer,
        send_base=n + 1,
        release_base=n + 1 + len(out.send_producer),
        n_slots=n + 1 + len(out.send_producer) + pp * n_chunks,
        cost_key=out.cost_key,
        pair_keys=(),
        key_counts=out.key_counts,
        first_forward=per_stage(out.first_forward),
        last_weight=per_stage(out.last_weight),
        inflight_vectors=tuple(inflight),
        peak_inflight_chunks=tuple(peaks),
        microbatches_per_chunk=per_stage(out.forwards),
        sends_per_rank=tuple(out.sends_per_rank.tolist()),
    )
