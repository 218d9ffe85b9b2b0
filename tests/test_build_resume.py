"""`asearcher kb build` killed with SIGKILL between the files of each stage resumes to the same KB.

The build runs as a real `asearcher kb build` subprocess that kills itself (SIGKILL, as kill -9)
at a chosen call, i.e. at a chosen moment between two files; re-running the same command must give
a knowledge base identical to an uninterrupted build that `KnowledgeBase` (what `kb serve` runs) opens.
"""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from local_retriever.build import BuildOptions, build_kb
from local_retriever.kb import KnowledgeBase

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent

# Patches `module:attr.path` so that its n-th call (counting only calls whose last positional
# argument ends with `match`) SIGKILLs the process before or after the real call runs.
CHILD = r"""
import importlib, os, signal, sys
target, when, nth, match = sys.argv[1:5]
module, _, attr = target.partition(":")
owner = importlib.import_module(module)
*parents, name = attr.split(".")
for part in parents:
    owner = getattr(owner, part)
real, calls = getattr(owner, name), [0]
def wrapper(*args, **kwargs):
    hit = False
    if not args or str(args[-1]).endswith(match):
        calls[0] += 1
        hit = calls[0] == int(nth)
    if hit and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    out = real(*args, **kwargs)
    if hit and when == "after":
        os.kill(os.getpid(), signal.SIGKILL)
    return out
setattr(owner, name, wrapper)
from local_retriever.cli import app
app(sys.argv[5:], prog_name="asearcher kb")
"""

SHARD = 25  # passages per embedding shard: the corpus below makes 3 shards


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """~60 passages of real Wikipedia text from the bundled sample, several passages a page."""
    from local_retriever.sample import sample_dump_path
    from local_retriever.wikitext import clean_wikitext, split_passages
    from local_retriever.wikixml import iter_pages

    rows = []
    for page in iter_pages(sample_dump_path()):
        if page.ns != 0 or page.redirect:
            continue
        for chunk in split_passages(clean_wikitext(page.text), 60)[:6]:
            rows.append({"id": str(len(rows)), "title": page.title, "text": chunk})
        if len(rows) >= 60:
            break
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _argv(corpus: Path, out: Path) -> list[str]:
    return ["build", str(corpus), "--out", str(out), "--shard-size", str(SHARD), "--force"]


def _opts() -> BuildOptions:
    return BuildOptions(shard_size=SHARD, force=True, progress=False)


@pytest.fixture(scope="module")
def baseline(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("baseline") / "kb_out"
    build_kb(corpus, out, opts=_opts())
    return out


def _snapshot(kb: Path) -> dict:
    """Every file of a KB by content; the manifest without its timing, pages by their rows."""
    files = {}
    for f in sorted(kb.rglob("*")):
        if not f.is_file():
            continue
        rel = f.relative_to(kb).as_posix()
        if rel == "manifest.json":
            data = json.loads(f.read_text())
            data.pop("build_seconds")
            files[rel] = data
        elif rel == "pages.sqlite":
            with sqlite3.connect(f) as db:
                files[rel] = [db.execute(f"SELECT * FROM {t} ORDER BY key").fetchall() for t in ("pages", "redirects")]
        else:
            files[rel] = f.read_bytes()
    return files


def _crash(corpus: Path, out: Path, target: str, when: str, nth: int = 1, match: str = "", extra=()) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, target, when, str(nth), match, *_argv(corpus, out), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -9, f"the build was not killed at {target} ({when}): {proc.returncode}\n{proc.stderr}"


def _assert_serves(kb_dir: Path) -> None:
    kb = KnowledgeBase(kb_dir, "hybrid")
    try:
        [hits] = kb.search(["Albert Einstein relativity"], 3)
        assert hits and kb.rows(hits)[0][0]["contents"]
    finally:
        kb.close()


KILL_POINTS = [
    # (what the crash interrupts, patched call, before/after its n-th call, last argument ends with)
    ("ingest: rows half read", "local_retriever.store:OffsetWriter.add", "before", 30, ""),
    ("ingest: pages written, marker not", "local_retriever.pages:PageWriter.close", "after", 1, ""),
    ("dense: first shard written", "os:replace", "after", 1, "emb_000000.npy"),
    ("dense: index written, not renamed", "os:replace", "before", 1, "dense.faiss"),
    ("bm25: params written, vocabulary not", "bm25s.tokenization:Tokenizer.save_vocab", "before", 1, ""),
    ("bm25: vocabulary written, stop words not", "bm25s.tokenization:Tokenizer.save_stopwords", "before", 1, ""),
    ("final rename not done", "os:replace", "before", 1, "kb_out"),
]


ALL_STAGES_DONE = ("local_retriever.manifest:Manifest.save", "before", 1, "")


@pytest.mark.parametrize("label,target,when,nth,match", KILL_POINTS, ids=[k[0] for k in KILL_POINTS])
def test_kill_9_then_resume_gives_the_uninterrupted_kb(corpus, baseline, tmp_path, label, target, when, nth, match):
    out = tmp_path / "kb_out"
    _crash(corpus, out, target, when, nth, match)
    assert not out.exists(), "a killed build must not leave a folder that looks usable"
    build_kb(corpus, out, opts=_opts())  # what the re-run `kb build` command calls
    assert _snapshot(out) == _snapshot(baseline)
    _assert_serves(out)


def test_a_missing_later_file_of_a_finished_stage_is_rebuilt(corpus, baseline, tmp_path):
    """A stage counts as done only while every file it recorded is there at its size."""
    out = tmp_path / "kb_out"
    _crash(corpus, out, *ALL_STAGES_DONE)
    work = tmp_path / "kb_out.partial"
    (work / "bm25" / "vocab.tokenizer.json").unlink()
    (work / "pages.sqlite").write_bytes(b"")
    with open(work / "dense.faiss", "r+b") as fh:
        fh.truncate(100)
    build_kb(corpus, out, opts=_opts())
    assert _snapshot(out) == _snapshot(baseline)
    _assert_serves(out)


def test_changed_index_options_are_not_served_from_an_old_stage(corpus, tmp_path):
    """A crashed build resumed with another FAISS factory must not keep the first run's index."""
    out = tmp_path / "kb_out"
    _crash(corpus, out, *ALL_STAGES_DONE)
    build_kb(corpus, out, opts=BuildOptions(shard_size=SHARD, force=True, progress=False, faiss_factory="HNSW8"))
    kb = KnowledgeBase(out, "dense")
    try:
        assert kb.dense.kind == "IndexHNSWFlat"
    finally:
        kb.close()


def test_an_edited_pages_file_is_ingested_again(corpus, tmp_path):
    """The page store depends on `--pages` too: a resume after that file changed must not keep the old pages."""
    pages = tmp_path / "pages.jsonl"
    pages.write_text(
        json.dumps({"url": "https://en.wikipedia.org/wiki/Zebra", "title": "Zebra", "contents": "Zebra\nold text"})
        + "\n"
    )
    out = tmp_path / "kb_out"
    _crash(corpus, out, *ALL_STAGES_DONE, extra=["--pages", str(pages), "--no-dense"])
    pages.write_text(pages.read_text().replace("old text", "the new, longer text"))
    build_kb(corpus, out, opts=BuildOptions(force=True, progress=False, dense=False, pages_jsonl=pages))
    kb = KnowledgeBase(out, "bm25")
    try:
        assert "the new, longer text" in kb.access("Zebra")["contents"]
    finally:
        kb.close()
