"""An on-disk cache shared by every rollout process on a machine (SQLite in WAL mode).

Values are cached by key for `ttl` seconds: the web tools' search results and pages, so the 16
samples of a group asking the same query, or a re-run of an evaluation, cost one request, and the
judge's verdicts.

A cache only saves requests: when SQLite fails (another process holds the lock past the busy
timeout, a full disk, a corrupt row) a read is a miss and a write is skipped, with a warning.
`aget` / `aset` run in a worker thread, because SQLite blocks, and in a rollout actor the event
loop it would block is every trajectory's. Keys are made of text already scrubbed where it entered
(`asearcher_plugin.utils.text`); one that still holds a lone surrogate fails as any SQLite error does.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import orjson

from local_retriever.log_throttle import throttled

log = throttled(__name__)  # a locked or broken cache fails every call alike


class DiskCache:
    def __init__(self, path: str | Path, ttl: float = 7 * 24 * 3600, busy_timeout: float = 30.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.ttl = ttl
        self.busy_timeout = busy_timeout  # seconds a call waits for another process's lock
        self._local = threading.local()
        db = self._db()
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value BLOB, at REAL)")
        db.commit()

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=self.busy_timeout, check_same_thread=False)
            self._local.db = db
        return db

    def get(self, key: str):
        try:
            row = self._db().execute("SELECT value, at FROM cache WHERE key = ?", (key,)).fetchone()
            value = None if row is None or time.time() - row[1] > self.ttl else orjson.loads(row[0])
        except (sqlite3.Error, orjson.JSONDecodeError) as exc:
            self._failed("read", exc)
            value = None
        return value

    def set(self, key: str, value) -> None:
        db = None
        try:
            db = self._db()
            db.execute(
                "INSERT OR REPLACE INTO cache VALUES (?, ?, ?)",
                (key, orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS), time.time()),
            )
            db.commit()
        except (sqlite3.Error, TypeError) as exc:  # orjson.JSONEncodeError is a TypeError
            self._failed("write", exc)
            try:
                if db is not None:
                    db.rollback()
            except sqlite3.Error:
                pass

    async def aget(self, key: str):
        return await asyncio.to_thread(self.get, key)

    async def aset(self, key: str, value) -> None:
        await asyncio.to_thread(self.set, key, value)

    def _failed(self, what: str, exc: Exception) -> None:
        log.warning(
            "cache %s failed in %s (%s: %s); going on without it",
            what,
            self.path,
            type(exc).__name__,
            exc,
            extra={"throttle_key": (what, str(self.path), type(exc).__name__)},
        )
