"""A study file (SQLite): every evaluation and every finished group, per problem, written as they arrive.

An interrupted search started again with the same file and problem skips the groups it finished and
re-ranks what it had found; Ctrl-C loses at most the batches in flight.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from paraplan.errors import ConfigError
from paraplan.tune.candidate import CANDIDATE_AXES, Candidate
from paraplan.tune.evaluate import Evaluation

_SCHEMA = """
CREATE TABLE IF NOT EXISTS paraplan_problem (problem TEXT PRIMARY KEY, description TEXT, created REAL);
CREATE TABLE IF NOT EXISTS paraplan_evaluation (
    problem TEXT, candidate TEXT, config TEXT, source TEXT,
    step_time_s REAL, tokens_per_sec_per_gpu REAL, mfu REAL, peak_gib REAL, fits INTEGER,
    PRIMARY KEY (problem, candidate));
CREATE TABLE IF NOT EXISTS paraplan_group_done (problem TEXT, grp TEXT, PRIMARY KEY (problem, grp));
"""
_CANDIDATE_FIELDS = CANDIDATE_AXES


class Study:
    def __init__(self, path: str | Path, problem_key: str, description: str = "") -> None:
        self.path = Path(path)
        self.problem = problem_key
        try:
            self._db = sqlite3.connect(self.path)
            self._db.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;" + _SCHEMA)
            self._db.execute(
                "INSERT OR IGNORE INTO paraplan_problem VALUES (?, ?, julianday('now'))", (problem_key, description)
            )
            self._db.commit()
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"--study {path}: not a usable SQLite file ({exc})") from None

    def load(self) -> tuple[list[Evaluation], set[str]]:
        """(evaluations, finished group keys) recorded for this problem."""
        rows = self._db.execute(
            "SELECT config, source, step_time_s, tokens_per_sec_per_gpu, mfu, peak_gib, fits "
            "FROM paraplan_evaluation WHERE problem = ?",
            (self.problem,),
        ).fetchall()
        evaluations = []
        for config, source, step, tps, mfu, peak, fits in rows:
            values = json.loads(config)
            candidate = Candidate.of(**{k: values[k] for k in _CANDIDATE_FIELDS})
            evaluations.append(Evaluation(candidate, step, tps, mfu, peak, bool(fits), source))
        done = {
            g for (g,) in self._db.execute("SELECT grp FROM paraplan_group_done WHERE problem = ?", (self.problem,))
        }
        return evaluations, done

    def record(self, evaluations: list[Evaluation], groups_done: list[str]) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO paraplan_evaluation VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    self.problem,
                    e.candidate.key(),
                    json.dumps({k: getattr(e.candidate, k) for k in _CANDIDATE_FIELDS}),
                    e.source,
                    e.step_time_s,
                    e.tokens_per_sec_per_gpu,
                    e.mfu,
                    e.peak_gib,
                    int(e.fits),
                )
                for e in evaluations
                if e.train is None  # exact specs (--candidates) are re-evaluated, not resumed
            ],
        )
        self._db.executemany(
            "INSERT OR IGNORE INTO paraplan_group_done VALUES (?, ?)", [(self.problem, g) for g in groups_done]
        )
        self._db.commit()

    def close(self) -> None:
        self._db.commit()
        self._db.close()
