"""Reading corpus rows: wiki-18 / FlashRAG JSONL and title/text/url JSONL.

Rows are normalised when read, not when stored, so a 14 GB wiki-18 file is indexed in place
and every client still sees the exact row it was built from, plus `title`, `text` and `url`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from .wikitext import title_to_url, url_to_title


class MalformedLine(ValueError):
    """A corpus line that cannot become a passage; carries its file and 1-based line number."""

    def __init__(self, path: Path | str, line_no: int, reason: str):
        super().__init__(f"{path}:{line_no}: {reason}")
        self.path, self.line_no, self.reason = str(path), line_no, reason


def split_contents(contents: str) -> tuple[str, str]:
    """`"Title"\\ntext` (quoted or not) -> (title, text)."""
    title, _, text = contents.partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text.strip()


def join_contents(title: str, text: str) -> str:
    # wiki-18 quotes the title line; Search-R1 agents show it verbatim as `Doc i(Title: "X")`.
    return f'"{title}"\n{text}'


def normalise_row(row: dict) -> dict:
    """Adds `contents`, `title`, `text` and `url` to a corpus row, keeping every original field.

    The title is the row's own, else the one its Wikipedia URL names (ASearcher's webpages rows are
    `{url, contents}`), else the first line of `contents` (wiki-18's `"Title"\ntext`).
    """
    out = dict(row)
    if isinstance(row.get("contents"), str):
        own = row.get("title") if isinstance(row.get("title"), str) else None
        if own is None and isinstance(row.get("url"), str):
            own = url_to_title(row["url"])
            if own is not None:
                out["title"] = own
        if own is not None:
            # A row with its own title may hold text only in `contents`: its first line is the
            # title only when it says so, otherwise it is text and must not be dropped.
            head, text = split_contents(row["contents"])
            if not _same_title(head, own):
                text = row["contents"].strip()
        else:
            out["title"], text = split_contents(row["contents"])
        out.setdefault("text", text)
    else:
        out["contents"] = join_contents(str(row.get("title", "")), str(row.get("text", "")))
    if not out.get("url") and out.get("title"):
        out["url"] = title_to_url(out["title"])
    return out


def _same_title(a: str, b: str) -> bool:
    # Wikipedia titles differ only in case of the first letter and in '_' vs ' '.
    a, b = (" ".join(t.replace("_", " ").split()) for t in (a, b))
    return a[:1].upper() + a[1:] == b[:1].upper() + b[1:]


def parse_line(raw: bytes, path: Path | str, line_no: int) -> dict:
    """Parses and checks one JSONL corpus line; raises MalformedLine naming what was wrong."""
    try:
        row = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedLine(path, line_no, f"invalid JSON ({exc})") from None
    if not isinstance(row, dict):
        raise MalformedLine(path, line_no, f"expected a JSON object, got {type(row).__name__}")
    if isinstance(row.get("contents"), str):
        if not row["contents"].strip():
            raise MalformedLine(path, line_no, "empty 'contents'")
        return row
    if isinstance(row.get("text"), str) and isinstance(row.get("title"), str):
        if not row["text"].strip():
            raise MalformedLine(path, line_no, "empty 'text'")
        return row
    raise MalformedLine(path, line_no, "needs 'contents' (str) or 'title' and 'text' (str)")


@dataclass
class ScanReport:
    rows: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)  # first few, for the build summary

    def skip(self, err: MalformedLine, keep: int = 20) -> None:
        self.skipped += 1
        if len(self.errors) < keep:
            self.errors.append(str(err))


def scan_jsonl(path: Path, strict: bool, report: ScanReport) -> Iterator[tuple[int, int, dict]]:
    """Yields (byte offset, byte length, row) for every valid line, streaming.

    Malformed lines raise with `strict`, otherwise they are counted in `report` and skipped.
    """
    offset = 0
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            length = len(raw)
            if raw.strip():
                try:
                    row = parse_line(raw, path, line_no)
                except MalformedLine as err:
                    if strict:
                        raise
                    report.skip(err)
                else:
                    report.rows += 1
                    yield offset, length, row
            offset += length
