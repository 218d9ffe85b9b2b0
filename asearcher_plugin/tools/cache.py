"""An on-disk cache shared by every rollout process on a machine (SQLite in WAL mode).

Search results and pages are cached by key for `ttl` seconds, so the 16 samples of a group
asking the same query, or a re-run of an evaluation, cost one request.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import orjson


class DiskCache:
    def __init__(self, path: str | Path, ttl: float = 7 * 24 * 3600):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.ttl = ttl
        self._local = threading.local()
        db = self._db()
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value BLOB, at REAL)")
        db.commit()
        self.hits = self.misses = 0

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            self._local.db = db
        return db

    def get(self, key: str):
        row = self._db().execute("SELECT value, at FROM cache WHERE key = ?", (key,)).fetchone()
        if row is None or time.time() - row[1] > self.ttl:
            self.misses += 1
            return None
        self.hits += 1
        return orjson.loads(row[0])

    def set(self, key: str, value) -> None:
        db = self._db()
        db.execute("INSERT OR REPLACE INTO cache VALUES (?, ?, ?)", (key, orjson.dumps(value), time.time()))
        db.commit()
