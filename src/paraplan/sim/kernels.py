"""The compiled kernels besides the loops (numba, imported with this module: only `paraplan.sim.plan_jit` and
`paraplan.sim.summary` import it, and only where the compiled loops are loaded, `loops_jit.loaded`): the plan
builder (`build`, for `paraplan.sim.plan_jit`) and the critical-path walk (`critical_waits`, for
`paraplan.sim.summary.critical_path_waits`). Module-level functions, so numba's cache (`cache=True`) keys them by
this file and loads them in a later process instead of compiling again (jitted closures that call each other
were compiled anew in every process, 10-25 s)."""

from __future__ import annotations

import numba
import numpy as np

from paraplan.sim.program import BW, B, F, W


@numba.njit(cache=True, nogil=True)
def stable_order(keys, size):  # pragma: no cover
    """np.argsort(keys, kind="stable") for keys in [0, size): a counting sort (numba's merge sort is slow)."""
    start = np.zeros(size + 1, dtype=np.int64)
    for k in range(keys.shape[0]):
        start[keys[k] + 1] += 1
    for v in range(size):
        start[v + 1] += start[v]
    out = np.zeros(keys.shape[0], dtype=np.int64)
    for k in range(keys.shape[0]):
        out[start[keys[k]]] = k
        start[keys[k]] += 1
    return out


@numba.njit(cache=True, nogil=True)
def group_columns(owner, values, n_rows, min_width):  # pragma: no cover
    """`paraplan.sim.plan._group_columns` for owners in non-decreasing order, padded to min_width columns."""
    width = 0
    run = 0
    for k in range(owner.shape[0]):
        run = run + 1 if k > 0 and owner[k] == owner[k - 1] else 1
        if run > width:
            width = run
    out = np.zeros((n_rows, max(width, min_width)), dtype=np.int64)
    run = 0
    for k in range(owner.shape[0]):
        run = run + 1 if k > 0 and owner[k] == owner[k - 1] else 1
        out[owner[k], run - 1] = values[k]
    return out, width


@numba.njit(cache=True, nogil=True)
def inflight(kind, chunk, rank, pp, n_chunks, peak_filter_rows):  # pragma: no cover
    """`_live_after_forwards` and `_peak_candidates` of every rank, where one packed word holds them."""
    n = kind.shape[0]
    step = np.zeros(n, dtype=np.int64)
    for a in range(n):
        if kind[a] == F:
            step[a] = 1
        elif kind[a] == W or kind[a] == BW:
            step[a] = -1
    # bases: one more than the largest running sum over each chunk's actions, rank after rank (the numpy
    # builder's cumulative sum in (chunk, rank) order)
    bases = np.zeros(n_chunks, dtype=np.int64)
    running = 0
    for c in range(n_chunks):
        top = 0
        first = True
        for a in range(n):  # actions are in rank order already
            if chunk[a] == c:
                running += step[a]
                if first or running > top:
                    top = running
                    first = False
        if first:
            return False, np.zeros((0, n_chunks)), np.zeros(pp + 1, dtype=np.int64), np.zeros(pp, dtype=np.int64)
        bases[c] = top + 1
    weight = np.zeros(n_chunks, dtype=np.int64)
    product = 0  # 0: no word begun yet (the numpy builder's 2**63)
    limit = 2**62
    for c in range(n_chunks):
        base = bases[c]
        if product == 0 or (base > 0 and product > limit // base):
            if product != 0:
                return (
                    False, np.zeros((0, n_chunks)), np.zeros(pp + 1, dtype=np.int64), np.zeros(pp, dtype=np.int64)
                )  # fmt: skip
            product = 1
        weight[c] = product
        product *= base
    packed = np.zeros(n, dtype=np.int64)
    total = 0
    for a in range(n):
        total += step[a] * weight[chunk[a]]
        packed[a] = total
    starts = np.zeros(pp + 1, dtype=np.int64)
    for a in range(n):
        starts[rank[a] + 1] += 1
    for r in range(pp):
        starts[r + 1] += starts[r]
    blocks = []
    peaks = np.zeros(pp, dtype=np.int64)
    offsets = np.zeros(pp + 1, dtype=np.int64)
    for r in range(pp):
        count = 1
        for a in range(starts[r], starts[r + 1]):
            if step[a] == 1:
                count += 1
        codes = np.zeros(count, dtype=np.int64)  # the last stays 0: the empty vector
        k = 0
        for a in range(starts[r], starts[r + 1]):
            if step[a] == 1:
                codes[k] = packed[a]
                k += 1
        codes = np.unique(codes)
        rows = np.zeros((codes.shape[0], n_chunks))
        for i in range(codes.shape[0]):
            for c in range(n_chunks):
                rows[i, c] = (codes[i] // weight[c]) % bases[c]
        if rows.shape[0] <= peak_filter_rows:
            keep = np.zeros(rows.shape[0], dtype=np.bool_)
            for j in range(rows.shape[0]):
                # a row >= row j everywhere has the larger packed code (the counts are the digits), so it comes
                # later in the sorted rows: row j stays unless one of those dominates it
                dominated = False
                for i in range(j + 1, rows.shape[0]):
                    ge = True
                    for c in range(n_chunks):
                        if rows[i, c] < rows[j, c]:
                            ge = False
                            break
                    if ge:
                        dominated = True
                        break
                keep[j] = not dominated
            rows = rows[keep]
        top = 0.0
        for i in range(rows.shape[0]):
            s = 0.0
            for c in range(n_chunks):
                s += rows[i, c]
            if i == 0 or s > top:
                top = s
        peaks[r] = int(top)
        blocks.append(rows)
        offsets[r + 1] = offsets[r] + rows.shape[0]
    out = np.zeros((offsets[pp], n_chunks))
    for r in range(pp):
        out[offsets[r] : offsets[r + 1]] = blocks[r]
    return True, out, offsets, peaks


@numba.njit(cache=True, nogil=True)
def filled_slots(dep_slots, task, width):  # pragma: no cover
    """The dependency slots of `task` in use (its first `width` columns)."""
    used = 0
    for c in range(width):
        if dep_slots[task, c] > 0:
            used += 1
    return used


@numba.njit(cache=True, nogil=True)
def build(kind, chunk, mb, lengths, up, down, m, n_chunks, n_kinds, peak_filter_rows):  # pragma: no cover
    pp = lengths.shape[0]
    n = kind.shape[0]
    rank = np.zeros(n, dtype=np.int64)
    a = 0
    for r in range(pp):
        for _ in range(lengths[r]):
            rank[a] = r
            a += 1
    stage = rank * n_chunks + chunk
    n_codes = pp * n_chunks * m
    f_action = np.full(n_codes, -1, dtype=np.int64)
    b_action = np.full(n_codes, -1, dtype=np.int64)
    for a in range(n):
        code = stage[a] * m + mb[a]
        if kind[a] == F:
            f_action[code] = a
        elif kind[a] == B or kind[a] == BW:
            b_action[code] = a
    # 1. producers, rule by rule as the numpy builder concatenates them
    cons = np.zeros(4 * n, dtype=np.int64)
    prod = np.zeros(4 * n, dtype=np.int64)
    e = 0
    for a in range(n):  # F needs the previous stage's F
        if kind[a] == F and up[stage[a]] >= 0:
            cons[e], prod[e] = a, f_action[up[stage[a]] * m + mb[a]]
            e += 1
    for a in range(n):  # B needs its own F ...
        if kind[a] == B or kind[a] == BW:
            cons[e], prod[e] = a, f_action[stage[a] * m + mb[a]]
            e += 1
    for a in range(n):  # ... and the next stage's B
        if (kind[a] == B or kind[a] == BW) and down[stage[a]] >= 0:
            cons[e], prod[e] = a, b_action[down[stage[a]] * m + mb[a]]
            e += 1
    for a in range(n):  # W needs its own B
        if kind[a] == W:
            cons[e], prod[e] = a, b_action[stage[a] * m + mb[a]]
            e += 1
    cons, prod = cons[:e], prod[:e]
    empty = np.zeros((0, 0), dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    failed = (empty, empty, none, none, np.zeros((0, 0)), none, none, none, none, np.zeros((0, 0)), none, none)
    for k in range(e):
        if prod[k] < 0:
            return (1, -1) + failed
    # 2. tasks: one per action (no pairs), task id = action + 1; a same-rank input runs first
    for k in range(e):
        if rank[cons[k]] == rank[prod[k]] and prod[k] >= cons[k]:
            return (2, cons[k]) + failed
    # 3. sends: one slot per cross-rank edge, ordered by producing action (stable)
    n_cross = 0
    for k in range(e):
        if rank[cons[k]] != rank[prod[k]]:
            n_cross += 1
    cross = np.zeros(n_cross, dtype=np.int64)
    j = 0
    for k in range(e):
        if rank[cons[k]] != rank[prod[k]]:
            cross[j] = k
            j += 1
    cross = cross[stable_order(prod[cross], n)]
    send_base = n + 1
    slot = send_base + np.arange(n_cross)
    send_producer = prod[cross] + 1
    release_base = send_base + n_cross
    send_slots, _ = group_columns(send_producer, slot, n + 1, 2)
    # first forward / last weight gradient of every (rank, chunk)
    first_forward = np.zeros(pp * n_chunks, dtype=np.int64)
    last_weight = np.zeros(pp * n_chunks, dtype=np.int64)
    forwards = np.zeros(pp * n_chunks, dtype=np.int64)
    for a in range(n):
        if kind[a] == F:
            if first_forward[stage[a]] == 0:
                first_forward[stage[a]] = a + 1
            forwards[stage[a]] += 1
        elif kind[a] == W or kind[a] == BW:
            last_weight[stage[a]] = a + 1
    # dependency slots per task: cross-rank inputs in action order, then the release slot
    consumer = cons[cross] + 1
    order = stable_order(consumer, n + 1)
    dep_slots, width = group_columns(consumer[order], slot[order], n + 1, 0)
    grow = False
    for s in range(pp * n_chunks):
        task = first_forward[s]
        if task != 0 and filled_slots(dep_slots, task, width) >= width:
            grow = True
    if grow or width < 2:
        wider = np.zeros((n + 1, max(width + 1 if grow else width, 2)), dtype=np.int64)
        wider[:, :width] = dep_slots[:, :width]
        dep_slots = wider
    for s in range(pp * n_chunks):
        task = first_forward[s]
        if task != 0:
            dep_slots[task, filled_slots(dep_slots, task, width)] = release_base + s
    # 4. cost keys: (rank, chunk, kind)
    n_keys = pp * n_chunks * n_kinds
    cost_key = np.zeros(n + 1, dtype=np.int64)
    key_counts = np.zeros((pp, n_keys))
    for a in range(n):
        key = stage[a] * n_kinds + kind[a]
        cost_key[a + 1] = key
        key_counts[rank[a], key] += 1.0
    sends_per_rank = np.zeros(pp, dtype=np.int64)
    for k in range(n_cross):
        sends_per_rank[rank[prod[cross[k]]]] += 1
    # 5. activations alive
    fits, candidates, offsets, peaks = inflight(kind, chunk, rank, pp, n_chunks, peak_filter_rows)
    status = 0 if fits else 3
    return (
        status, -1, dep_slots, send_slots, send_producer, cost_key, key_counts, first_forward, last_weight,
        forwards, sends_per_rank, candidates, offsets, peaks,
    )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def critical_waits(start, end, slots, dep_slots, send_producer, send_base, release_base, is_first, task):
    """`paraplan.sim.summary.critical_path_waits` without FSDP gates, from `task` (the last to end): the waits on
    sends ("pp") and on parameter releases ("dp"), added up in the same order."""  # pragma: no cover
    pp_wait = 0.0
    dp_wait = 0.0
    while task != 0:
        s = start[task]
        p = 0 if is_first[task] else task - 1
        busy_until = end[p] if p != 0 else 0.0
        if s <= busy_until:
            task = p
            continue
        producer = 0
        released = False
        for j in range(dep_slots.shape[1]):
            slot = dep_slots[task, j]
            if slot != 0 and slots[slot] >= s:
                if slot < release_base:
                    producer = send_producer[slot - send_base]
                else:
                    released = True
                break
        if producer != 0:
            pp_wait += s - end[producer]
            task = producer
            continue
        if released:
            dp_wait += s - busy_until
        task = p
    return pp_wait, dp_wait


@numba.njit(cache=True, nogil=True)
def static_order(task_rank, lo, forward, dep_slots, send_producer, send_base, release_base, rounds):
    """`paraplan.sim.order.static_order` (`paraplan.sim.priority.priority_order` over the plan's cross-rank
    inputs), step by step: the same priorities, the same rounds, the same stable sort; an empty order where the
    priorities do not settle."""  # pragma: no cover
    n, pp = task_rank.shape[0] - 1, lo.shape[0]
    n_edges = 0
    for t in range(n + 1):
        for j in range(dep_slots.shape[1]):
            if send_base <= dep_slots[t, j] < release_base:
                n_edges += 1
    consumer = np.zeros(n_edges, dtype=np.int64)
    producer = np.zeros(n_edges, dtype=np.int64)
    e = 0
    for t in range(n + 1):  # row by row, as np.nonzero
        for j in range(dep_slots.shape[1]):
            slot = dep_slots[t, j]
            if send_base <= slot < release_base:
                consumer[e], producer[e] = t, send_producer[slot - send_base]
                e += 1
    priority = np.zeros(n + 1, dtype=np.int64)
    segment = np.zeros(n + 1, dtype=np.int64)
    r = -1
    first = 0
    for t in range(n + 1):
        while r + 1 < pp and lo[r + 1] <= t:
            r += 1
            first = lo[r]
        position = t - first if r >= 0 else t
        priority[t] = position * (pp + 1) + (task_rank[t] if forward[t] else pp - 1 - task_rank[t])
        segment[t] = task_rank[t] + 1 if t > 0 else 0
    need = np.zeros(n_edges, dtype=np.int64)
    for _ in range(rounds):
        low = False
        for k in range(n_edges):
            need[k] = priority[producer[k]] + 1
            if need[k] > priority[consumer[k]]:
                low = True
        if not low:
            return stable_order_of(priority[1:]) + 1
        for k in range(n_edges):  # every need from the priorities before the round (np.maximum.at)
            if need[k] > priority[consumer[k]]:
                priority[consumer[k]] = need[k]
        top = priority.max()
        width = top + n + 2
        running = 0
        for t in range(n + 1):  # p_t = t + running max of (p_j - j) within the rank (maximum.accumulate)
            value = priority[t] - t + segment[t] * width
            if t == 0 or value > running:
                running = value
            priority[t] = running - segment[t] * width + t
    return np.zeros(0, dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def stable_order_of(values):  # pragma: no cover
    """np.argsort(values, kind="stable"), by a counting sort over the values' range (a merge sort where wide)."""
    if values.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    low = values.min()
    span = values.max() - low + 1
    if span > 4 * values.shape[0] + 1024:
        return np.argsort(values, kind="mergesort")
    return stable_order(values - low, span)


@numba.njit(cache=True, nogil=True)
def grad_reduction(last, start, tasks, reduce_s, task_s, rank_of, buckets, overlap, dp_free):
    """`paraplan.sim.engine._grad_reduction` on arrays: per rank, when its last backward (`last`) and its chunks'
    gradient reductions (`reduce_s` of each chunk's last weight-gradient task, in task order, `rank_of` each) are
    both done; the same operations in the same order."""  # pragma: no cover
    pp = last.shape[0]
    done = last.copy()
    at = dp_free.copy()
    for k in range(tasks.shape[0]):
        r = rank_of[k]
        if reduce_s[k] <= 0:
            continue
        if overlap:
            share = reduce_s[k] / buckets
            began = start[tasks[k]]
            for bucket in range(buckets):  # paraplan.sim.timeline.bucket_delays_s
                ready = began + (bucket + 1) * task_s[k] / buckets
                at[r] = (at[r] if at[r] > ready else ready) + share
        else:
            at[r] = (at[r] if at[r] > last[r] else last[r]) + reduce_s[k]
        if at[r] > done[r]:
            done[r] = at[r]
    return done[:pp]
