"""When a benchmark may keep what an earlier invocation computed: the same commit of a clean tree and the same
arguments. A tree with uncommitted changes never matches, so nothing made by code that was never committed is
reused."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def run_key(measured: dict) -> dict:
    head = _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": head if not dirty else f"{head}+{time.time()}", "args": measured}


def claim(work: Path, key: dict) -> bool:
    """Make `work` hold only what `key` made: its contents are kept if they were made under the same key, else
    removed. Returns whether they were kept. A folder this never stamped is left alone unless it is empty."""
    stamp = work / "run_key.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == key:
        return True
    if stamp.is_file():
        shutil.rmtree(work)
    elif work.exists() and any(work.iterdir()):
        raise SystemExit(f"{work} holds files a benchmark run did not make; give an empty or new folder")
    work.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(key) + "\n")
    return False


def kept_result(path: Path, key: dict) -> dict | None:
    """The result a run saved at `path` with `keep_result`, if it was made under `key`."""
    saved = json.loads(path.read_text()) if path.is_file() else {}
    return saved["result"] if saved.get("key") == key else None


def keep_result(path: Path, key: dict, result: dict, **extra) -> None:
    path.write_text(json.dumps({"key": key, **extra, "result": result}))


def code_key(measured: dict, paths: tuple[str, ...], neutral: tuple[str, ...] = ()) -> dict:
    """Like `run_key`, but naming only the code under `paths` (every file's blob at HEAD; a path written `!path`
    is left out, for code a run provably never loads): a result stays valid across commits that change nothing a
    run executes (docs, tables), so a long benchmark can be finished over several sittings. Uncommitted changes
    under `paths` never match another invocation's key. `neutral`: commits whose changes under `paths` the caller
    declares a run cannot tell apart (each with its reason beside the list): a file a neutral commit changed and
    nothing changed since counts with its blob from before that commit."""
    return {"code": _code(paths, neutral), "args": measured}


@functools.cache
def _code(paths: tuple[str, ...], neutral: tuple[str, ...] = ()) -> str:
    """Read once per process: the code cannot change under a running benchmark, and with uncommitted changes the
    runs this invocation made still match its own later lookups (its table), never another invocation's."""
    included = [p for p in paths if not p.startswith("!")]
    excluded = tuple(p[1:].rstrip("/") for p in paths if p.startswith("!"))

    def kept(path: str) -> bool:
        return not any(path == e or path.startswith(e + "/") for e in excluded)

    changed = _git("status", "--porcelain", "--untracked-files=no", "--", *included).splitlines()
    if any(kept(line.split(maxsplit=1)[1].split(" -> ")[-1]) for line in changed):  # "XY path" (stripped)
        return f"uncommitted {time.time()}"
    blobs = {}  # path -> "mode type blob", as ls-tree lists it
    for line in _git("ls-tree", "-r", "HEAD", "--", *included).splitlines():
        meta, path = line.split("\t", 1)
        if kept(path):
            blobs[path] = meta
    for commit in neutral:
        if not _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"):
            raise SystemExit(f"run key: the neutral commit {commit} is not in this repository")
    # newest first: a file two neutral commits changed goes back through the later one to before the earlier
    for commit in sorted(neutral, key=lambda c: int(_git("rev-list", "--count", c)), reverse=True):
        diff = _git("diff-tree", "-r", "--no-commit-id", f"{commit}^", commit, "--", *included)
        for line in diff.splitlines():  # ":old_mode new_mode old_blob new_blob status\tpath"
            meta, path = line.split("\t", 1)
            old_mode, _, old_blob, new_blob, status = meta[1:].split()
            if status == "D":  # a file it removed (or moved away) counts as it was, unless it is back since
                if path not in blobs:
                    blobs[path] = f"{old_mode} blob {old_blob}"
                continue
            if path not in blobs or blobs[path].split()[2] != new_blob:
                continue  # changed again since: that change counts
            if status == "A":
                del blobs[path]
            else:
                blobs[path] = f"{old_mode} blob {old_blob}"
    listing = [f"{meta}\t{path}" for path, meta in sorted(blobs.items())]
    return hashlib.sha256("\n".join(listing).encode()).hexdigest()
