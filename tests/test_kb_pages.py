"""Pages served by `/access` hold all of their source text, whatever layout the corpus rows use."""

import json
from pathlib import Path

import httpx

from local_retriever.build import BuildOptions, build_kb
from local_retriever.kb import KnowledgeBase
from local_retriever.server import create_app
from tests.helpers import serve_app

ROWS = [
    # wiki-18 / FlashRAG: the first line of `contents` is the title, quoted or not.
    {"id": "0", "contents": '"Billy the Kid"\nBilly the Kid was an outlaw.\nHe rode across New Mexico.'},
    {"id": "1", "contents": "Billy the Kid\nHe was shot in 1881.\nHis grave is at Fort Sumner."},
    # title/text rows.
    {"id": "2", "title": "Ned Kelly", "text": "Ned Kelly was a bushranger.\nHe wore home-made armour."},
    {
        "id": "3",
        "title": "Ned Kelly",
        "text": "He was executed in 1880.\nHis armour is in a museum.",
        "url": "https://en.wikipedia.org/wiki/Ned_Kelly",
    },
    # a row with its own title whose `contents` holds text only.
    {"id": "4", "title": "Jesse James", "contents": "Jesse James robbed banks.\nHe was shot in 1882."},
    # a row with its own title whose `contents` repeats the title line.
    {
        "id": "5",
        "title": "Belle Starr",
        "contents": '"Belle Starr"\nBelle Starr was an outlaw.\nShe was shot in 1889.',
    },
    # a single-line `contents` next to its own title.
    {"id": "6", "title": "Sam Bass", "contents": "Sam Bass robbed trains."},
]
EXPECTED = {
    "Billy the Kid": [
        "Billy the Kid was an outlaw.",
        "He rode across New Mexico.",
        "He was shot in 1881.",
        "His grave is at Fort Sumner.",
    ],
    "Ned Kelly": [
        "Ned Kelly was a bushranger.",
        "He wore home-made armour.",
        "He was executed in 1880.",
        "His armour is in a museum.",
    ],
    "Jesse James": ["Jesse James robbed banks.", "He was shot in 1882."],
    "Belle Starr": ["Belle Starr was an outlaw.", "She was shot in 1889."],
    "Sam Bass": ["Sam Bass robbed trains."],
}


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def access(kb_dir: Path, refs: list[str]) -> list:
    kb = KnowledgeBase(kb_dir, "bm25")
    try:
        with serve_app(create_app(kb)) as url:
            r = httpx.post(f"{url}/access", json={"urls": refs}, timeout=30)
            r.raise_for_status()
            return r.json()["result"]
    finally:
        kb.close()


def assert_lines_in_order(contents: str, lines: list[str]) -> None:
    got = [line.strip() for line in contents.splitlines() if line.strip()]
    assert got == lines, contents


def test_pages_from_passages_keep_every_line(tmp_path):
    src = write_jsonl(tmp_path / "corpus.jsonl", ROWS)
    build_kb(src, tmp_path / "kb", opts=BuildOptions(progress=False, dense=False))
    pages = access(tmp_path / "kb", list(EXPECTED))
    for title, page in zip(EXPECTED, pages):
        assert page is not None, title
        assert page["title"] == title
        assert_lines_in_order(page["contents"], EXPECTED[title])


def test_passages_keep_every_line_of_their_text(tmp_path):
    src = write_jsonl(tmp_path / "corpus.jsonl", ROWS)
    build_kb(src, tmp_path / "kb", opts=BuildOptions(progress=False, dense=False))
    kb = KnowledgeBase(tmp_path / "kb", "bm25")
    try:
        texts = [kb.passages.get(i)["text"] for i in range(len(ROWS))]
    finally:
        kb.close()
    assert texts[4] == "Jesse James robbed banks.\nHe was shot in 1882."
    assert texts[5] == "Belle Starr was an outlaw.\nShe was shot in 1889."
    assert texts[6] == "Sam Bass robbed trains."


def test_title_seen_again_later_extends_its_page(tmp_path):
    rows = [ROWS[0], ROWS[2], ROWS[1]]
    src = write_jsonl(tmp_path / "corpus.jsonl", rows)
    build_kb(src, tmp_path / "kb", opts=BuildOptions(progress=False, dense=False))
    [page] = access(tmp_path / "kb", ["Billy the Kid"])
    assert_lines_in_order(page["contents"], EXPECTED["Billy the Kid"])


def test_pages_file_keeps_every_line(tmp_path):
    # ASearcher's webpages file: whole pages, `contents` is the page text.
    src = write_jsonl(tmp_path / "corpus.jsonl", ROWS)
    pages_file = write_jsonl(
        tmp_path / "webpages.jsonl",
        [
            {
                "url": "https://en.wikipedia.org/wiki/Ned_Kelly",
                "title": "Ned Kelly",
                "contents": "Ned Kelly was a bushranger.\nHe was executed in 1880.",
            },
            {
                "title": "Billy the Kid",
                "contents": '"Billy the Kid"\nBilly the Kid was an outlaw.\nHe was shot in 1881.',
            },
            {"id": "x", "contents": '"Jesse James"\nJesse James robbed banks.\nHe was shot in 1882.'},
            {"title": "Sam Bass", "text": "Sam Bass robbed trains.\nHe died in 1878."},
        ],
    )
    build_kb(src, tmp_path / "kb", opts=BuildOptions(progress=False, dense=False, pages_jsonl=pages_file))
    pages = access(
        tmp_path / "kb", ["https://en.wikipedia.org/wiki/Ned_Kelly", "Billy the Kid", "Jesse James", "Sam Bass"]
    )
    assert_lines_in_order(pages[0]["contents"], ["Ned Kelly was a bushranger.", "He was executed in 1880."])
    assert_lines_in_order(pages[1]["contents"], ["Billy the Kid was an outlaw.", "He was shot in 1881."])
    assert_lines_in_order(pages[2]["contents"], ["Jesse James robbed banks.", "He was shot in 1882."])
    assert_lines_in_order(pages[3]["contents"], ["Sam Bass robbed trains.", "He died in 1878."])


def test_urls_in_asearcher_forms_and_languages(tmp_path):
    # ASearcher's webpages rows: `{url, contents}`, the title named by the index.php URL.
    src = write_jsonl(tmp_path / "corpus.jsonl", ROWS)
    pages_file = write_jsonl(
        tmp_path / "webpages.jsonl",
        [
            {
                "url": "https://en.wikipedia.org/w/index.php?title=Beveridge,%20Victoria",
                "contents": "A town.\nIn Victoria.",
            },
            {"url": "https://de.wikipedia.org/wiki/Ned_Kelly", "contents": "Ned Kelly war ein Buschräuber."},
        ],
    )
    build_kb(src, tmp_path / "kb", opts=BuildOptions(progress=False, dense=False, pages_jsonl=pages_file))
    refs = [
        "https://en.wikipedia.org/w/index.php/Beveridge,%20Victoria",  # index.php/ -> index.php?title=
        "https://en.wikipedia.org/wiki/Beveridge,_Victoria",  # same page by title
        "en.m.wikipedia.org/wiki/Beveridge,_Victoria",  # no scheme, mobile domain
        "https://fr.wikipedia.org/wiki/Beveridge,_Victoria",  # an English page is no French one
        "https://de.wikipedia.org/wiki/Ned_Kelly",  # the KB holds this German page
        "https://de.wikipedia.org/w/index.php?title=Ned%20Kelly",
        "https://en.wikipedia.org/wiki/Ned_Kelly",  # the English one is not in the pages file
        "Beveridge, Victoria",  # a bare title has no language
        "https://example.org/wiki/Beveridge,_Victoria",
    ]
    got = access(tmp_path / "kb", refs)
    assert [p and (p["title"], p["contents"]) for p in got] == [
        ("Beveridge, Victoria", "A town.\nIn Victoria."),
        ("Beveridge, Victoria", "A town.\nIn Victoria."),
        ("Beveridge, Victoria", "A town.\nIn Victoria."),
        None,
        ("Ned Kelly", "Ned Kelly war ein Buschräuber."),
        ("Ned Kelly", "Ned Kelly war ein Buschräuber."),
        None,
        ("Beveridge, Victoria", "A town.\nIn Victoria."),
        None,
    ]
