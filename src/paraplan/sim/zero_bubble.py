"""Zero-bubble programs: ZB-H1 (Qi et al. 2023) and ZB-V (Qi et al. 2024).

Both split the backward into B (input gradient, on the critical path between stages) and W (weight
gradient, local), and move W into what would otherwise be bubbles.
"""

from __future__ import annotations

from collections import deque

from paraplan.sim.program import Action, B, F, RankProgram, W


def zb_h1(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> tuple[RankProgram, ...]:
    """ZB-H1 ("Zero Bubble Pipeline Parallelism", Qi et al. 2023, section 3.1, figure 3); one chunk per rank
    (vpp unused), no F&B pairs (overlap_pairs unused).

    1F1B's warm-up (pp - r - 1 forwards on rank r), then F B W in the steady state, with rank r running the
    W of micro-batch j - r after the B of micro-batch j: later ranks, which hold fewer micro-batches under
    1F1B, delay their W passes into the cool-down where they fill the bubble. Every rank then holds at most
    pp micro-batches (counted from F until W), 1F1B's peak (rank 0), and with T_F = T_B = T_W the bubble
    shrinks from (pp-1)(T_F + T_B + T_W) to (pp-1)(T_F + T_B - T_W), a third."""
    programs = []
    for rank in range(pp):
        warmup = min(pp - rank - 1, m)
        delay = rank
        actions: list[Action] = [(F, 0, i) for i in range(warmup)]
        next_w = 0
        for j in range(m):
            if j < m - warmup:
                actions.append((F, 0, warmup + j))
            actions.append((B, 0, j))
            if j - delay >= 0:
                actions.append((W, 0, next_w))
                next_w += 1
        actions += [(W, 0, i) for i in range(next_w, m)]
        programs.append(RankProgram(tuple(actions)))
    return tuple(programs)


def zb_v(pp: int, vpp: int, m: int, overlap_pairs: bool = False) -> tuple[RankProgram, ...]:
    """ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"; the zero-bubble repository's
    `zbv` greedy scheduler): 2 chunks per rank in a V (rank r holds stages r and 2pp-1-r), built by a greedy
    list scheduler on unit F = B = W times under 1F1B's memory (2pp chunk-micro-batches per rank):
    a ready B first (it is on the critical path), then a ready F (the upper chunk first, to reach the loss
    sooner) while memory allows, else a deferred W (filling what would be a bubble).
    The resulting static order is what the engine then plays with the real durations. Two chunks per rank
    whatever vpp says; no F&B pairs (overlap_pairs unused)."""
    cap = 2 * pp
    inf = 1 << 60
    # done step (exclusive end) of F and B per [rank][chunk][micro-batch]
    f_done = [[[inf] * m for _ in range(2)] for _ in range(pp)]
    b_done = [[[inf] * m for _ in range(2)] for _ in range(pp)]

    def upstream(rank: int, chunk: int) -> tuple[int, int] | None:
        if chunk == 0:
            return (rank - 1, 0) if rank > 0 else None
        return (rank + 1, 1) if rank < pp - 1 else (rank, 0)

    def downstream(rank: int, chunk: int) -> tuple[int, int] | None:
        if chunk == 0:
            return (rank + 1, 0) if rank < pp - 1 else (rank, 1)
        return (rank - 1, 1) if rank > 0 else None

    ups = [[upstream(r, c) for c in range(2)] for r in range(pp)]
    downs = [[downstream(r, c) for c in range(2)] for r in range(pp)]
    next_f = [[0, 0] for _ in range(pp)]
    next_b = [[0, 0] for _ in range(pp)]
    pending_w: list[deque[tuple[int, int]]] = [deque() for _ in range(pp)]
    memory = [0] * pp
    left = [6 * m] * pp
    actions: list[list[Action]] = [[] for _ in range(pp)]
    step = 0
    while any(left):
        progressed = False
        for r in range(pp):
            if not left[r]:
                continue
            choice: Action | None = None
            # a ready B: smallest micro-batch, the upper chunk (closer to the loss) on ties
            best_mb = inf
            for c in (1, 0):
                mb = next_b[r][c]
                if mb < m and mb < best_mb and f_done[r][c][mb] <= step:
                    down = downs[r][c]
                    if down is None or b_done[down[0]][down[1]][mb] <= step:
                        best_mb, choice = mb, (B, c, mb)
            if choice is None and memory[r] < cap:
                for c in (1, 0):
                    mb = next_f[r][c]
                    if mb < m:
                        up = ups[r][c]
                        if up is None or f_done[up[0]][up[1]][mb] <= step:
                            choice = (F, c, mb)
                            break
            if choice is None and pending_w[r]:
                c, mb = pending_w[r].popleft()
                choice = (W, c, mb)
            if choice is None:
                continue
            kind, c, mb = choice
            if kind == F:
                f_done[r][c][mb] = step + 1
                next_f[r][c] += 1
                memory[r] += 1
            elif kind == B:
                b_done[r][c][mb] = step + 1
                next_b[r][c] += 1
                pending_w[r].append((c, mb))
            else:
                memory[r] -= 1
            actions[r].append(choice)
            left[r] -= 1
            progressed = True
        step += 1
        if not progressed:  # every op takes one step, so nothing is running: no later change either
            raise RuntimeError(f"zb-v greedy scheduler stalled (pp={pp}, m={m})")
    return tuple(RankProgram(tuple(a)) for a in actions)
