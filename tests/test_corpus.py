"""Corpus ingestion: JSONL formats, malformed lines, on-disk rows, atomic and resumable builds."""

import json
from pathlib import Path

import numpy as np
import pytest

from local_retriever.build import BuildOptions, build_kb
from local_retriever.corpus import MalformedLine
from local_retriever.kb import KnowledgeBase
from local_retriever.manifest import Manifest

ROWS_A = [
    {"id": "0", "contents": '"Luanda"\nLuanda is the capital and largest city of Angola, on the Atlantic coast.'},
    {"id": "1", "contents": "Albert Einstein\nAlbert Einstein was a theoretical physicist who developed relativity."},
    {
        "id": "2",
        "contents": '"Albert Einstein"\nIn 1921 he received the Nobel Prize in Physics for the photoelectric effect.',
    },
]
ROWS_B = [
    {
        "id": "a",
        "title": "Atlantic Ocean",
        "text": "The Atlantic is the second-largest ocean.",
        "url": "https://example.org/atlantic",
    },
    {"id": "b", "title": "Algorithm", "text": "An algorithm is a finite sequence of instructions."},
]


def write_jsonl(path: Path, rows, extra_lines=()) -> Path:
    lines = [json.dumps(r) for r in rows] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def small_opts(**kw) -> BuildOptions:
    return BuildOptions(progress=False, **kw)


def test_flashrag_rows_quoted_and_unquoted_titles(tmp_path):
    src = write_jsonl(tmp_path / "wiki.jsonl", ROWS_A)
    manifest, report = build_kb(src, tmp_path / "kb", opts=small_opts(bm25=True))
    assert manifest.passages == 3 and report.skipped == 0
    kb = KnowledgeBase(tmp_path / "kb", "dense")
    first = kb.passages.get(0)
    # The row a Search-R1 client sees keeps every original field unchanged.
    assert first["id"] == "0" and first["contents"] == ROWS_A[0]["contents"]
    assert first["title"] == "Luanda" and first["url"] == "https://en.wikipedia.org/wiki/Luanda"
    assert kb.passages.get(1)["title"] == "Albert Einstein"
    # Consecutive passages with one title form one page for /access.
    page = kb.access("Albert Einstein")
    assert "relativity" in page["contents"] and "photoelectric" in page["contents"]
    hits = kb.search(["What is the capital of Angola?"], 2)[0]
    assert hits[0][0] == 0
    kb.close()


def test_title_text_url_rows(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", ROWS_B)
    build_kb(src, tmp_path / "kb", opts=small_opts())
    kb = KnowledgeBase(tmp_path / "kb", "bm25")
    row = kb.passages.get(0)
    assert row["contents"] == '"Atlantic Ocean"\nThe Atlantic is the second-largest ocean.'
    assert row["url"] == "https://example.org/atlantic"
    assert kb.access("https://example.org/atlantic")["title"] == "Atlantic Ocean"
    assert kb.search(["algorithms instructions"], 1)[0][0][0] == 1
    kb.close()


def test_malformed_lines_are_counted_or_fatal(tmp_path):
    bad = ["{not json", '{"id": "9"}', "[1, 2]", '{"id": "8", "contents": "   "}']
    src = write_jsonl(tmp_path / "c.jsonl", ROWS_A[:2], extra_lines=bad)
    manifest, report = build_kb(src, tmp_path / "kb", opts=small_opts(dense=False))
    assert manifest.passages == 2 and manifest.skipped_lines == 4
    assert (
        report.errors[0].endswith("c.jsonl:3: invalid JSON (unexpected character: line 1 column 2 (char 1))")
        or ":3: invalid JSON" in report.errors[0]
    )
    assert ":4: needs 'contents'" in report.errors[1]

    with pytest.raises(MalformedLine) as err:
        build_kb(src, tmp_path / "strict", opts=small_opts(dense=False, strict=True))
    assert err.value.line_no == 3 and "c.jsonl:3" in str(err.value)
    # Nothing that looks like a finished knowledge base is left behind.
    assert not (tmp_path / "strict").exists()


def test_rows_are_read_from_disk_by_offset(tmp_path):
    rows = [{"id": str(i), "contents": f'"T{i}"\n' + "word " * (i % 7 + 1) + "é ✓"} for i in range(500)]
    src = write_jsonl(tmp_path / "c.jsonl", rows)
    build_kb(src, tmp_path / "kb", opts=small_opts(dense=False))
    kb = KnowledgeBase(tmp_path / "kb", "bm25")
    # The manifest points at the source file in place: no copy, no row held in memory.
    assert Manifest.load(tmp_path / "kb").corpus == str(src.resolve())
    assert isinstance(kb.passages._spans, np.memmap)
    for i in (0, 1, 250, 499):
        assert kb.passages.get(i)["contents"] == rows[i]["contents"]
    with pytest.raises(IndexError):
        kb.passages.get(500)
    kb.close()


def test_existing_output_needs_force(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", ROWS_B)
    build_kb(src, tmp_path / "kb", opts=small_opts(dense=False))
    with pytest.raises(FileExistsError, match="--force"):
        build_kb(src, tmp_path / "kb", opts=small_opts(dense=False))
    build_kb(src, tmp_path / "kb", opts=small_opts(dense=False, force=True))


def test_unknown_format_and_missing_file_are_named(tmp_path):
    odd = tmp_path / "corpus.dat"
    odd.write_text("hello\n")
    with pytest.raises(ValueError, match="corpus.dat"):
        build_kb(odd, tmp_path / "kb", opts=small_opts())
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        build_kb(tmp_path / "nope.jsonl", tmp_path / "kb", opts=small_opts())
