"""Whole pages for `/access`, in SQLite, looked up by URL or by title, redirects followed.

One read-only connection per thread: SQLite connections are not shareable across threads, and
the server answers requests from a thread pool.

A Wikipedia URL that is not stored as it is finds its page by title, but only a page of the same
language: the page's own URL says which Wikipedia it came from (rows without a URL are English, as
their made-up URL says), so a KB built from English pages answers `de.wikipedia.org/wiki/X` with
null, not with the English article, while a KB holding German pages serves them. Bare titles carry no
language and match any page.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path
from urllib.parse import urlsplit

from .wikitext import title_to_url, url_to_title

_SCHEMELESS_WIKI = re.compile(r"^[\w.-]*wikipedia\.org/", re.I)

PAGES_FILE = "pages.sqlite"
_SCHEMA = """
CREATE TABLE pages (key TEXT PRIMARY KEY, url TEXT NOT NULL, title TEXT NOT NULL, contents TEXT NOT NULL);
CREATE TABLE redirects (key TEXT PRIMARY KEY, target TEXT NOT NULL);
"""


def title_key(title: str) -> str:
    """Wikipedia titles differ only in case of the first letter and in '_' vs ' '."""
    t = " ".join(title.replace("_", " ").split())
    return t[:1].upper() + t[1:]


class PageWriter:
    def __init__(self, path: Path):
        self._db = sqlite3.connect(path)
        self._db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + _SCHEMA)
        self.pages = 0
        self.redirects = 0

    def add_page(self, title: str, contents: str, url: str | None = None, extend: bool = False) -> None:
        """Stores a page; with `extend`, a title seen before gets `contents` appended to its page.

        Pages made of passages need `extend`: a title whose passages are not all consecutive
        would otherwise lose every run after the first.
        """
        url = url or title_to_url(title)
        key = title_key(title)
        cur = self._db.execute("INSERT OR IGNORE INTO pages VALUES (?, ?, ?, ?)", (key, url, title, contents))
        if cur.rowcount == 0 and extend:
            self._db.execute("UPDATE pages SET contents = contents || char(10) || ? WHERE key = ?", (contents, key))
        self.pages += cur.rowcount

    def add_redirect(self, title: str, target: str) -> None:
        cur = self._db.execute("INSERT OR IGNORE INTO redirects VALUES (?, ?)", (title_key(title), title_key(target)))
        self.redirects += cur.rowcount

    def close(self) -> None:
        self._db.commit()
        self._db.close()


class PageStore:
    MAX_REDIRECT_HOPS = 3

    def __init__(self, path: Path):
        self.path = Path(path)
        self._local = threading.local()
        with self._conn() as db:
            self.size = db.execute("SELECT COUNT(*) FROM pages").fetchone()[0]

    def _conn(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            self._local.db = db
        return db

    def lookup(self, url_or_title: str) -> dict | None:
        """A page row `{url, title, contents}` for a Wikipedia URL or a title, or None."""
        if not isinstance(url_or_title, str) or not url_or_title.strip():
            return None
        ref = url_or_title.strip()
        if _SCHEMELESS_WIKI.match(ref):
            ref = "https://" + ref
        db = self._conn()
        lang = None
        if ref.startswith(("http://", "https://")):
            ref = canonical_url(ref)
            row = db.execute("SELECT url, title, contents FROM pages WHERE url = ?", (ref,)).fetchone()
            if row:
                return _as_dict(row)
            title, lang = url_to_title(ref), wiki_language(ref)
            if title is None or lang is None:
                return None
        else:
            title = ref
        key = title_key(title)
        for _ in range(self.MAX_REDIRECT_HOPS + 1):
            row = db.execute("SELECT url, title, contents FROM pages WHERE key = ?", (key,)).fetchone()
            if row:
                return _as_dict(row) if lang is None or wiki_language(row[0]) == lang else None
            target = db.execute("SELECT target FROM redirects WHERE key = ?", (key,)).fetchone()
            if not target:
                return None
            key = target[0]
        return None

    def sample(self, n: int, seed: int = 0, min_chars: int = 0) -> list[dict]:
        """Up to `n` distinct pages drawn uniformly at random (reproducibly), skipping shorter ones."""
        import random

        db = self._conn()
        rowids = [r[0] for r in db.execute("SELECT rowid FROM pages WHERE length(contents) >= ?", (min_chars,))]
        picked = random.Random(seed).sample(rowids, min(n, len(rowids)))
        return [
            _as_dict(db.execute("SELECT url, title, contents FROM pages WHERE rowid = ?", (i,)).fetchone())
            for i in picked
        ]


def canonical_url(url: str) -> str:
    """ASearcher's page URLs are `.../w/index.php?title=X`; agents also write `.../w/index.php/X`."""
    return url.replace("index.php/", "index.php?title=", 1)


def wiki_language(url: str) -> str | None:
    """`de` for `https://de.wikipedia.org/...` (and `de.m.`), `en` for the bare or www domain, None off Wikipedia."""
    host = (urlsplit(url).hostname or "").lower()
    if host != "wikipedia.org" and not host.endswith(".wikipedia.org"):
        return None
    first = host[: -len("wikipedia.org")].split(".")[0]
    return "en" if first in ("", "www", "m") else first


def _as_dict(row) -> dict:
    url, title, contents = row
    return {"url": url, "title": title, "contents": contents}
