"""Event-driven placement of prefill requests into the bubbles of prefill lanes (BubbleTea's admission).

Events, in time order: a lane enters a bubble; a lane finishes a prefill inside a bubble; a request arrives.
- A free lane (bubble start, or a prefill done) takes, among the `lookahead` oldest queued requests, the
  longest one that fits the rest of its bubble (best fit packs the bubble; the window bounds unfairness).
- An arriving request goes to the idle lane whose bubble ends soonest while still fitting (best fit keeps
  long bubbles for long prompts); with none, it queues.
A request fits a lane if need = predicted * (1 + guard_fraction) + guard_s ends inside the bubble and its
time to first token stays within max_ttft_s; a queued request that can no longer make max_ttft_s leaves
(the serving cluster takes it). The lane then stays reserved for `need`, the GPU busy for the actual time.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass

import numpy as np

Interval = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Placed:
    request: int
    lane: int
    step: int
    """The training step whose bubble holds it."""
    start_s: float
    reserved_s: float
    actual_s: float

    @property
    def end_s(self) -> float:
        return self.start_s + self.actual_s


def place_prefills(
    patterns: list[list[Interval]],
    lane_model: list[int],
    predicted_s: list[np.ndarray],
    arrival_s: np.ndarray,
    step_s: float,
    steps: int,
    *,
    guard_fraction: float,
    guard_s: float,
    max_ttft_s: float,
    prediction_error: float,
    lookahead: int,
) -> list[Placed]:
    """`patterns[lane]`: the lane's idle intervals in one step (tiled over `steps` steps);
    `predicted_s[lane_model[lane]][request]`: the predicted prefill time of a request on that lane."""
    if not patterns:
        return []
    needs = [p * (1 + guard_fraction) + guard_s for p in predicted_s]
    actual = [p * (1 + prediction_error) for p in predicted_s]
    horizon = steps * step_s
    n_req = int(np.searchsorted(arrival_s, horizon))
    min_need = min((float(n[:n_req].min()) for n in needs if n_req), default=math.inf)
    starts: list[tuple[float, float, int, int]] = sorted(
        (a + k * step_s, b + k * step_s, lane, k)
        for lane, pattern in enumerate(patterns)
        for a, b in pattern
        if b - a >= min_need
        for k in range(steps)
    )
    placed: list[Placed] = []
    pending: list[int] = []
    idle: list[tuple[float, int, int]] = []  # (bubble end, lane, step) of lanes idle inside a bubble
    done: list[tuple[float, int, float, int]] = []  # heap: (time, lane, bubble end, step) a lane is free again

    def start(lane: int, req: int, now: float, end: float, step: int) -> None:
        need = float(needs[lane_model[lane]][req])
        placed.append(Placed(req, lane, step, now, need, float(actual[lane_model[lane]][req])))
        heapq.heappush(done, (now + need, lane, end, step))

    def serve(lane: int, now: float, end: float, step: int) -> None:
        while pending and now - arrival_s[pending[0]] > max_ttft_s:
            pending.pop(0)
        if pending:
            window = np.asarray(pending[:lookahead])
            need = needs[lane_model[lane]][window]
            ok = (now + need <= end) & (now + need - arrival_s[window] <= max_ttft_s)
            if ok.any():
                pos = int(np.argmax(np.where(ok, need, -1.0)))
                start(lane, pending.pop(pos), now, end, step)
                return
        bisect.insort(idle, (end, lane, step))

    i_start = i_req = 0
    while True:
        t_start = starts[i_start][0] if i_start < len(starts) else math.inf
        t_done = done[0][0] if done else math.inf
        t_req = float(arrival_s[i_req]) if i_req < n_req else math.inf
        now = min(t_start, t_done, t_req)
        if now == math.inf:
            break
        if now == t_done:
            _, lane, end, step = heapq.heappop(done)
            serve(lane, now, end, step)
        elif now == t_start:
            _, end, lane, step = starts[i_start]
            i_start += 1
            serve(lane, now, end, step)
        else:
            req = i_req
            i_req += 1
            del idle[: bisect.bisect_right(idle, (now, len(patterns), steps))]  # bubbles already over
            quickest = min(float(n[req]) for n in needs)
            chosen = None
            for pos in range(bisect.bisect_left(idle, (now + quickest, -1, -1)), len(idle)):
                end, lane, _ = idle[pos]
                need = float(needs[lane_model[lane]][req])
                if now + need <= end and need <= max_ttft_s:
                    chosen = pos
                    break
            if chosen is None:
                pending.append(req)
            else:
                end, lane, step = idle.pop(chosen)
                start(lane, req, now, end, step)
    return placed
