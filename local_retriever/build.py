"""`asearcher kb build`: corpus -> passages + pages + dense/BM25 indexes, resumable and atomic.

Everything is written into `OUT.partial/` and renamed to `OUT` only when complete, so a failed
build never leaves a folder that looks usable. Re-running the same command after a crash reuses
the finished stages (ingest, dense, bm25) and embedding shards found in `OUT.partial/`. A stage is
finished when its marker `.NAME.stage.json` is there: written last, after the stage's files are
fsync'd, naming its inputs and each file's size (see manifest.mark_stage).
"""

from __future__ import annotations

import bz2
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson
from tqdm import tqdm

from .corpus import ScanReport, join_contents, normalise_row, scan_jsonl
from .encoder import EncoderConfig
from .manifest import (
    MANIFEST_FILE,
    STAGE_SUFFIX,
    Manifest,
    clear_stage,
    completed_stage,
    fsync_path,
    mark_stage,
    write_durable,
)
from .pages import PAGES_FILE, PageWriter
from .store import OFFSETS_FILE, OffsetWriter, PassageStore

SourceFormat = Literal["auto", "jsonl", "xml"]
PASSAGES_FILE = "passages.jsonl"
DENSE_FILE = "dense.faiss"
BM25_DIR = "bm25"


@dataclass
class BuildOptions:
    encoder: EncoderConfig | None = None
    faiss_factory: str = "Flat"
    dense: bool = True
    bm25: bool = True
    strict: bool = False
    shard_size: int = 50_000
    passage_words: int = 100
    import_faiss: Path | None = None
    pages_jsonl: Path | None = None
    keep_embeddings: bool = False
    force: bool = False
    progress: bool = True
    device: str | None = None  # the encoder's: None is cuda when torch sees one, else cpu


def ensure_sample_kb(out: Path) -> Path:
    """The bundled sample knowledge base at `out`, built with the defaults unless already there."""
    from .sample import sample_dump_path

    if not (Path(out) / MANIFEST_FILE).is_file():
        build_kb(sample_dump_path(), out)
    return Path(out)


def detect_format(path: Path) -> str:
    name = path.name.lower()
    if name.endswith((".xml", ".xml.bz2")):
        return "xml"
    if name.endswith((".jsonl", ".json")):
        return "jsonl"
    head = (bz2.open(path) if name.endswith(".bz2") else open(path, "rb")).read(512).lstrip()
    if head.startswith(b"<"):
        return "xml"
    if head.startswith(b"{"):
        return "jsonl"
    raise ValueError(f"cannot tell the format of {path}: expected JSONL rows or a MediaWiki XML dump (.xml/.xml.bz2)")


def build_kb(
    source: Path, out: Path, fmt: SourceFormat = "auto", opts: BuildOptions | None = None
) -> tuple[Manifest, ScanReport]:
    opts = opts or BuildOptions()
    source, out = Path(source).resolve(), Path(out).resolve()
    if not source.is_file():
        raise FileNotFoundError(f"corpus not found: {source}")
    if out.exists() and not opts.force:
        raise FileExistsError(f"{out} already exists; pass --force to replace it")
    fmt = detect_format(source) if fmt == "auto" else fmt
    if not (opts.dense or opts.bm25 or opts.import_faiss):
        raise ValueError("nothing to index: both the dense and the BM25 index are disabled")
    started = time.time()
    work = out.with_name(out.name + ".partial")
    work.mkdir(parents=True, exist_ok=True)

    stage = _ingest(source, fmt, work, opts)
    report = ScanReport(rows=stage["passages"], skipped=stage["skipped"], errors=stage["errors"])
    corpus = work / PASSAGES_FILE if fmt == "xml" else source
    store = PassageStore(corpus, work / OFFSETS_FILE)
    if len(store) == 0:
        raise ValueError(f"{source} yielded no passages ({report.skipped} malformed lines skipped)")

    manifest = Manifest(
        corpus=PASSAGES_FILE if fmt == "xml" else str(source),
        passages=len(store),
        pages=stage["pages"],
        redirects=stage["redirects"],
        source=str(source),
        source_format=fmt,
        skipped_lines=report.skipped,
    )
    try:
        if opts.import_faiss:
            manifest.dense_index, manifest.faiss_factory = _import_faiss(opts.import_faiss, len(store))
            manifest.encoder = opts.encoder or EncoderConfig()
        elif opts.dense:
            manifest.encoder = opts.encoder or EncoderConfig()
            _build_dense(store, work, manifest.encoder, opts, stage["fingerprint"])
            manifest.dense_index, manifest.faiss_factory = DENSE_FILE, opts.faiss_factory
        if opts.bm25:
            _build_bm25(store, work, opts, stage["fingerprint"])
            manifest.bm25_index = BM25_DIR
    finally:
        store.close()

    # A stage left by an earlier run with other options must not ship in this KB.
    if manifest.dense_index != DENSE_FILE:
        clear_stage(work, "dense")
        (work / DENSE_FILE).unlink(missing_ok=True)
    if not opts.bm25:
        clear_stage(work, "bm25")
        shutil.rmtree(work / BM25_DIR, ignore_errors=True)
    if not opts.keep_embeddings:
        shutil.rmtree(work / "emb", ignore_errors=True)
    manifest.build_seconds = round(time.time() - started, 1)
    manifest.save(work)
    if out.exists():
        shutil.rmtree(out)
    os.replace(work, out)
    fsync_path(out.parent)  # the rename itself reaches the disk before success is reported
    # The markers go only after the rename: a crash before it must still find every stage done.
    for mark in out.glob("*" + STAGE_SUFFIX):
        mark.unlink()
    return manifest, report


def _ingest(source: Path, fmt: str, work: Path, opts: BuildOptions) -> dict:
    """Writes offsets (and for XML the passages) plus the page store; skipped when already done."""
    fingerprint = {
        "source": _file_id(source),
        "format": fmt,
        "words": opts.passage_words,
        "pages": _file_id(Path(opts.pages_jsonl)) if opts.pages_jsonl else None,
    }
    done = completed_stage(work, "ingest", fingerprint)
    if done:
        return {**done["result"], "fingerprint": fingerprint}
    for name in ("ingest", "dense", "bm25"):
        clear_stage(work, name)
    for name in (PASSAGES_FILE, OFFSETS_FILE, PAGES_FILE):
        (work / name).unlink(missing_ok=True)
    shutil.rmtree(work / "emb", ignore_errors=True)
    shutil.rmtree(work / BM25_DIR, ignore_errors=True)
    (work / DENSE_FILE).unlink(missing_ok=True)

    offsets = OffsetWriter(work / OFFSETS_FILE)
    pages = PageWriter(work / PAGES_FILE)
    report = ScanReport()
    try:
        if fmt == "xml":
            _ingest_xml(source, work / PASSAGES_FILE, offsets, pages, opts)
        else:
            _ingest_jsonl(source, offsets, pages, report, opts)
    finally:
        offsets.close()
        pages.close()
    done = {
        "passages": offsets.count,
        "pages": pages.pages,
        "redirects": pages.redirects,
        "skipped": report.skipped,
        "errors": report.errors,
    }
    outputs = [OFFSETS_FILE, PAGES_FILE] + ([PASSAGES_FILE] if fmt == "xml" else [])
    mark_stage(work, "ingest", fingerprint, outputs, done)
    return {**done, "fingerprint": fingerprint}


def _file_id(path: Path) -> dict:
    """What tells a changed input file apart: a corpus edited between two runs is ingested again."""
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime": stat.st_mtime}


def _ingest_xml(
    source: Path, passages_path: Path, offsets: OffsetWriter, pages: PageWriter, opts: BuildOptions
) -> None:
    from .wikitext import clean_wikitext, split_passages, title_to_url
    from .wikixml import iter_pages

    pos = 0
    with open(passages_path, "wb") as fh:
        for page in tqdm(
            iter_pages(source), desc="XML pages read (redirects too)", unit=" page", disable=not opts.progress
        ):
            if page.ns != 0:
                continue
            if page.redirect:
                pages.add_redirect(page.title, page.redirect)
                continue
            text = clean_wikitext(page.text)
            if not text.strip():
                continue
            url = title_to_url(page.title)
            pages.add_page(page.title, text, url)
            for chunk in split_passages(text, opts.passage_words):
                row = {
                    "id": str(offsets.count),
                    "contents": join_contents(page.title, chunk),
                    "title": page.title,
                    "url": url,
                }
                line = orjson.dumps(row) + b"\n"
                fh.write(line)
                offsets.add(pos, len(line))
                pos += len(line)


def _ingest_jsonl(
    source: Path, offsets: OffsetWriter, pages: PageWriter, report: ScanReport, opts: BuildOptions
) -> None:
    # Without a pages file, a page is the run of consecutive passages with the same title
    # (wiki-18 keeps an article's passages together, in order).
    current: list = [None, None, []]  # title, url, texts

    def flush():
        if current[0] is not None and opts.pages_jsonl is None:
            pages.add_page(current[0], "\n".join(current[2]), current[1], extend=True)

    rows = scan_jsonl(source, opts.strict, report)
    for offset, length, row in tqdm(rows, desc="passages", unit=" row", disable=not opts.progress):
        offsets.add(offset, length)
        row = normalise_row(row)
        if row["title"] != current[0]:
            flush()
            current[:] = [row["title"], row["url"], []]
        current[2].append(row["text"])
    flush()
    if opts.pages_jsonl is not None:
        page_report = ScanReport()
        for _, _, row in scan_jsonl(Path(opts.pages_jsonl), opts.strict, page_report):
            row = normalise_row(row)
            pages.add_page(row["title"], row["text"], row["url"])


def _build_dense(
    store: PassageStore, work: Path, encoder_cfg: EncoderConfig, opts: BuildOptions, corpus_fp: dict
) -> None:
    from .dense import build_index, encode_shards, write_index
    from .encoder import Encoder

    shards_fp = {
        "corpus": corpus_fp,
        "encoder": encoder_cfg.model_dump(),
        "passages": len(store),
        "shard_size": opts.shard_size,
    }
    fingerprint = {**shards_fp, "factory": opts.faiss_factory}
    if completed_stage(work, "dense", fingerprint):
        return
    clear_stage(work, "dense")
    (work / DENSE_FILE).unlink(missing_ok=True)
    shard_dir = work / "emb"
    fp_path = shard_dir / "fingerprint.json"
    try:
        stale = json.loads(fp_path.read_text()) != json.loads(json.dumps(shards_fp))
    except (OSError, ValueError):
        stale = True
    if stale:
        shutil.rmtree(shard_dir, ignore_errors=True)
        shard_dir.mkdir(parents=True)
        write_durable(fp_path, json.dumps(shards_fp).encode())

    encoder = Encoder(encoder_cfg, device=opts.device)
    bar = tqdm(total=len(store), desc="encoding", unit=" passage", disable=not opts.progress)
    shards = encode_shards(
        lambda a, b: store.texts(a, b),
        len(store),
        lambda texts: encoder.encode(texts, "passage"),
        shard_dir,
        opts.shard_size,
        on_progress=bar.update,
    )
    bar.close()
    write_index(build_index(shards, opts.faiss_factory), work / DENSE_FILE)
    mark_stage(work, "dense", fingerprint, [DENSE_FILE])


def _build_bm25(store: PassageStore, work: Path, opts: BuildOptions, corpus_fp: dict) -> None:
    # bm25s writes its index files one by one and the tokenizer files after them: no single file
    # tells that the folder is whole, only the stage marker written after all of them does.
    fingerprint = {"corpus": corpus_fp, "passages": len(store)}
    if completed_stage(work, "bm25", fingerprint):
        return
    from .sparse import build_bm25

    clear_stage(work, "bm25")
    shutil.rmtree(work / BM25_DIR, ignore_errors=True)
    build_bm25(store.texts(), len(store), work / BM25_DIR, show_progress=opts.progress)
    mark_stage(work, "bm25", fingerprint, [BM25_DIR])


def _import_faiss(path: Path, passages: int) -> tuple[str, str]:
    """Uses a prebuilt index (e.g. Search-R1's e5_Flat.index) in place, checking it fits the corpus."""
    import faiss

    path = Path(path).resolve()
    index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    if index.ntotal != passages:
        raise ValueError(
            f"{path} holds {index.ntotal} vectors but the corpus has {passages} passages; "
            "FAISS ids must be corpus row positions"
        )
    return str(path), type(faiss.downcast_index(index)).__name__
