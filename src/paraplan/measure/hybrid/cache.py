"""SQLite cache of measurements, keyed by device and shapes.

One table, one row per measurement: the key is a hash of (device, software, kind, shapes, settings) and
the row keeps them readable next to the measured value (JSON). Default location
`~/.cache/paraplan/hybrid.sqlite`; `PARAPLAN_HYBRID_CACHE` or an explicit path overrides it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CACHE_ENV = "PARAPLAN_HYBRID_CACHE"
SCHEMA = """
create table if not exists measurements (
    key text primary key,
    device text not null,
    kind text not null,
    shapes text not null,
    value text not null,
    software text not null,
    created text not null
)
"""


def default_cache_path() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "paraplan" / "hybrid.sqlite"


def _canonical(data: Mapping[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


class MeasurementCache:
    """`get(device, kind, shapes)` -> the stored value or None; `put(...)` stores one. A path of None
    disables caching (every lookup misses, nothing is written)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path).expanduser() if path is not None else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect() as db:
                db.execute(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        assert self.path is not None
        return sqlite3.connect(self.path, timeout=30)

    @staticmethod
    def key(device: str, kind: str, shapes: Mapping[str, Any], software: Mapping[str, Any]) -> str:
        text = _canonical({"device": device, "kind": kind, "shapes": shapes, "software": software})
        return hashlib.sha256(text.encode()).hexdigest()

    def get(
        self, device: str, kind: str, shapes: Mapping[str, Any], software: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        if self.path is None:
            return None
        with self._connect() as db:
            row = db.execute(
                "select value from measurements where key = ?", (self.key(device, kind, shapes, software),)
            ).fetchone()
        return json.loads(row[0]) if row else None

    def put(
        self,
        device: str,
        kind: str,
        shapes: Mapping[str, Any],
        software: Mapping[str, Any],
        value: Mapping[str, Any],
    ) -> None:
        if self.path is None:
            return
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        with self._connect() as db:
            db.execute(
                "insert or replace into measurements values (?, ?, ?, ?, ?, ?, ?)",
                (
                    self.key(device, kind, shapes, software),
                    device,
                    kind,
                    _canonical(shapes),
                    _canonical(value),
                    _canonical(software),
                    now,
                ),
            )

    def rows(self) -> list[dict[str, Any]]:
        """Every stored measurement (for reports and the shipped GPU figures)."""
        if self.path is None or not self.path.exists():
            return []
        with self._connect() as db:
            cursor = db.execute("select device, kind, shapes, value, software, created from measurements")
            return [
                {
                    "device": device,
                    "kind": kind,
                    "shapes": json.loads(shapes),
                    "value": json.loads(value),
                    "software": json.loads(software),
                    "created": created,
                }
                for device, kind, shapes, value, software, created in cursor
            ]
