"""The tuner: the fastest parallel configurations that fit, found by calling the projection as an oracle.

    from paraplan.tune import TuneOptions, TuneProblem, parse_constraints, tune
    result = tune(TuneProblem(model, (system,), gbs, seq), parse_constraints(["tp=8"], {"pp": 16}))
    best = result.top[0]  # an Evaluation: candidate, step_time_s, tokens_per_sec_per_gpu, mfu, peak_gib, fits

Modules, in the order data flows: candidate (a point and the problem), space (axis values and the user's
constraints), legality (the one validator), memfilter (memory before timing), evaluate (groups of recompute
variants, the projection), executors (process pool, Ray), seed / optuna_search / proposer (where candidates
come from), study (SQLite), tuner (the phases), explain and reproduce (what the CLI prints).
"""

from paraplan.tune.candidate import Candidate, TuneProblem
from paraplan.tune.evaluate import Evaluation
from paraplan.tune.space import SearchSpace, SpaceLimits, parse_constraints
from paraplan.tune.tuner import TuneOptions, TuneResult, tune

__all__ = [
    "Candidate",
    "Evaluation",
    "SearchSpace",
    "SpaceLimits",
    "TuneOptions",
    "TuneProblem",
    "TuneResult",
    "parse_constraints",
    "tune",
]
