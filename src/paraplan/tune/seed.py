"""The deterministic seed planner: a baseline that fits, then one axis at a time in order of expected impact.

Baseline: the smallest model-parallel layout (tensor parallelism inside the node first, then pipeline stages)
whose memory estimate fits with no recompute, one micro-batch per step and the distributed optimizer.
Then a line search per axis, holding the others, keeping the best that fits; passes repeat until a pass
changes nothing (at most `max_passes`). It gives the search a good incumbent in a few hundred evaluations.
"""

from __future__ import annotations

from collections.abc import Callable

from paraplan.specs.schedule import DEFAULT_SCHEDULE
from paraplan.tune.candidate import Candidate
from paraplan.tune.evaluate import Evaluation, Evaluator, TaskReport
from paraplan.tune.space import SearchSpace

SEED_AXES = (
    "tp",
    "pipeline",
    "cp",
    "mbs",
    "recompute",
    "sharding",
    "sp",
    "precision",
    "ep",
    "etp",
    "num_gpus",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "tp_comm_overlap",
    "ep_overlap",
)
"""Layout first (it moves the step time most), then batch and recompute, sharding, the rest."""

Score = Callable[[Evaluation], float]


def _base(space: SearchSpace, tp: int, pp: int, cp: int, recompute: str, num_gpus: int) -> Candidate:
    shardings = space.sharding_values()
    return space.normalize(
        Candidate.of(
            num_gpus=num_gpus,
            precision=space.precision_values()[0],
            tp=tp,
            cp=cp,
            pp=pp,
            vpp=1,
            schedule=DEFAULT_SCHEDULE,
            ep=1 if not space.problem.model.is_moe else space.ep_values()[0],
            etp=1 if space.problem.model.is_moe else tp,
            mbs=space.mbs_values()[0] if space.mbs_values() else 1,
            sp=tp > 1 and True in space.sp_values(tp),
            sharding="dist_opt" if "dist_opt" in shardings else shardings[0],
            recompute=recompute,
            recompute_layers=None,
            overlap_grad_reduce=True,
            overlap_param_gather=True,
            tp_comm_overlap=True,
            ep_overlap=True,
        )
    )


def baseline(space: SearchSpace, evaluator: Evaluator) -> Candidate | None:
    """The first legal layout, smallest tp*pp first (tp before pp), that the memory estimate admits."""
    num_gpus = max(space.problem.gpu_counts)
    cps = space.cp_values() or [1]
    layouts = sorted(
        ((tp, pp) for tp in space.tp_values() for pp in space.pp_values()),
        key=lambda tp_pp: (tp_pp[0] * tp_pp[1], -tp_pp[0]),
    )
    for recompute in ("none", "full"):
        for tp, pp in layouts:
            c = _base(space, tp, pp, cps[0], recompute, num_gpus)
            if not space.admits(c):
                continue
            resolved, _ = evaluator.screen(c)
            if resolved is not None:
                return c
    return None


def seed_plan(
    space: SearchSpace,
    evaluator: Evaluator,
    score: Score,
    max_passes: int = 3,
    stop: Callable[[], bool] | None = None,
) -> tuple[list[Evaluation], TaskReport]:
    """Coordinate descent from the baseline. Returns (every evaluation made in order, rejection counts); `stop`
    (a time limit) ends it early with what it found."""
    report = TaskReport()
    start = baseline(space, evaluator)
    if start is None:
        return [], report
    evaluations: list[Evaluation] = []
    best_eval, _ = evaluator.evaluate(start, "seed")
    current = start
    if best_eval is not None:
        evaluations.append(best_eval)
    for _ in range(max_passes):
        changed = False
        for axis in SEED_AXES:
            try:
                values = space.axis_values(axis, current)
            except KeyError:
                continue
            for value in values:
                if stop is not None and stop():
                    return evaluations, report
                c = space.normalize(space.with_axis(current, axis, value))
                if c == current or not space.admits(c):
                    continue
                evaluation, reason = evaluator.evaluate(c, "seed")
                if evaluation is None:
                    if reason.startswith("illegal"):
                        report.illegal += 1
                    else:
                        report.memory_rejected += 1
                    continue
                evaluations.append(evaluation)
                if evaluation.fits and (
                    best_eval is None or not best_eval.fits or score(evaluation) > score(best_eval)
                ):
                    best_eval, current, changed = evaluation, c, True
            if best_eval is not None and not best_eval.fits:
                # nothing fits yet: move toward memory savings before judging speed
                current = current.with_axes(recompute="full", recompute_layers=None)
        if not changed:
            break
    return evaluations, report
