"""Streaming reader of MediaWiki XML exports (`.xml` or `.xml.bz2`).

`iterparse` with each `<page>` cleared once read keeps memory flat however large the dump.
Tags are matched without their namespace because the export schema version varies by dump.
"""

from __future__ import annotations

import bz2
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_REDIRECT_TEXT = re.compile(r"^\s*#REDIRECT\s*:?\s*\[\[([^\]|#]+)", re.I)


@dataclass(frozen=True)
class WikiPage:
    page_id: str
    title: str
    ns: int
    text: str
    redirect: str | None


def _open(path: Path):
    with open(path, "rb") as fh:
        magic = fh.read(3)
    return bz2.open(path, "rb") if magic == b"BZh" else open(path, "rb")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def iter_pages(path: Path | str) -> Iterator[WikiPage]:
    path = Path(path)
    seen_root = False
    try:
        with _open(path) as fh:
            context = ET.iterparse(fh, events=("start", "end"))
            for event, elem in context:
                if event == "start":
                    if not seen_root:
                        if _local(elem.tag) != "mediawiki":
                            raise ValueError(f"{path} is not a MediaWiki XML dump (root element <{_local(elem.tag)}>)")
                        seen_root = True
                    continue
                if _local(elem.tag) != "page":
                    continue
                yield _page(elem)
                elem.clear()
    except (ET.ParseError, OSError, EOFError) as exc:
        if not seen_root:
            raise ValueError(f"{path} is not a MediaWiki XML dump: {exc}") from None
        raise ValueError(f"{path}: broken XML after the dump began: {exc}") from None


def _page(elem: ET.Element) -> WikiPage:
    fields: dict[str, str] = {}
    redirect = None
    for child in elem:
        name = _local(child.tag)
        if name == "redirect":
            redirect = child.get("title")
        elif name == "revision":
            for part in child:
                if _local(part.tag) == "text":
                    fields["text"] = part.text or ""
        else:
            fields[name] = child.text or ""
    text = fields.get("text", "")
    if redirect is None:
        m = _REDIRECT_TEXT.match(text)
        redirect = m.group(1).strip() if m else None
    return WikiPage(
        page_id=fields.get("id", ""),
        title=fields.get("title", ""),
        ns=int(fields.get("ns") or 0),
        text=text,
        redirect=redirect,
    )
