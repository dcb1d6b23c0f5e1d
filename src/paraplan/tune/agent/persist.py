"""The agent's log in the study file (SQLite), beside the search's tables: one row per step, per problem and run.

A run is keyed by the problem, the proposer and the starting points; the same command with the same study file
loads the steps it finished and goes on from the last one (`run_agent`).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from paraplan.errors import ConfigError
from paraplan.tune.agent.record import AgentStep

_SCHEMA = """
CREATE TABLE IF NOT EXISTS paraplan_agent_step (
    problem TEXT, run TEXT, step INTEGER, round INTEGER, status TEXT, record TEXT,
    PRIMARY KEY (problem, run, step));
"""


class AgentStudy:
    def __init__(self, path: str | Path, problem_key: str, run_key: str) -> None:
        self.path = Path(path)
        self.problem, self.run = problem_key, run_key
        try:
            self._db = sqlite3.connect(self.path)
            self._db.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;" + _SCHEMA)
            self._db.commit()
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"--study {path}: not a usable SQLite file ({exc})") from None

    def load(self) -> list[AgentStep]:
        rows = self._db.execute(
            "SELECT record FROM paraplan_agent_step WHERE problem = ? AND run = ? ORDER BY step",
            (self.problem, self.run),
        ).fetchall()
        return [AgentStep.from_dict(json.loads(record)) for (record,) in rows]

    def record(self, step: AgentStep) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO paraplan_agent_step VALUES (?, ?, ?, ?, ?, ?)",
            (self.problem, self.run, step.index, step.round, step.status, json.dumps(step.to_dict(), default=str)),
        )
        self._db.commit()

    def close(self) -> None:
        self._db.commit()
        self._db.close()
