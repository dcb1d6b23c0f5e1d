"""The SQLite measurement cache: keyed by device, kind, shapes and software."""

from __future__ import annotations

from paraplan.measure.hybrid.cache import CACHE_ENV, MeasurementCache, default_cache_path


def test_round_trip_and_keys(tmp_path):
    cache = MeasurementCache(tmp_path / "h.sqlite")
    shapes, software = {"hidden": 256, "seq": 128}, {"torch": "2.13.0"}
    assert cache.get("cpu:x", "dense", shapes, software) is None
    cache.put("cpu:x", "dense", shapes, software, {"forward_s": 0.01})
    assert cache.get("cpu:x", "dense", shapes, software) == {"forward_s": 0.01}
    assert cache.get("cpu:x", "dense", {"hidden": 512, "seq": 128}, software) is None
    assert cache.get("cuda:H200", "dense", shapes, software) is None
    assert cache.get("cpu:x", "dense", shapes, {"torch": "2.14.0"}) is None
    rows = MeasurementCache(tmp_path / "h.sqlite").rows()  # persisted
    assert rows[0]["device"] == "cpu:x" and rows[0]["shapes"] == shapes and rows[0]["created"]


def test_location_and_disabling(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "elsewhere.sqlite"))
    assert default_cache_path() == tmp_path / "elsewhere.sqlite"
    monkeypatch.delenv(CACHE_ENV)
    assert default_cache_path().parts[-3:] == (".cache", "paraplan", "hybrid.sqlite")
    off = MeasurementCache(None)
    off.put("cpu:x", "dense", {}, {}, {"a": 1})
    assert off.get("cpu:x", "dense", {}, {}) is None and off.rows() == []
