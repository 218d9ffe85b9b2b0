"""Wiki markup to plain text, DPR-style passages, and Wikipedia title <-> URL.

Headings are dropped (DPR passages are running text); sections that are lists of sources or
links (References, External links, ...) are dropped whole, since they answer no question.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, quote, unquote, urlsplit

import mwparserfromhell
from mwparserfromhell.nodes import Comment, ExternalLink, Heading, HTMLEntity, Tag, Template, Text, Wikilink

WIKI_URL = "https://en.wikipedia.org/wiki/"
_DROP_SECTIONS = {
    "references",
    "external links",
    "see also",
    "further reading",
    "notes",
    "bibliography",
    "sources",
    "footnotes",
    "citations",
    "notes and references",
}
_DROP_LINK_PREFIXES = ("file:", "image:", "category:", "media:")
_INTERLANG = re.compile(r"^[a-z]{2,3}(-[a-z]+)?:", re.I)
_DROP_TAGS = {
    "ref",
    "table",
    "gallery",
    "math",
    "timeline",
    "references",
    "score",
    "imagemap",
    "syntaxhighlight",
    "source",
    "chem",
    "hiero",
    "noinclude",
}


_REFS = re.compile(r"<ref[^>]*?/>|<ref[^>]*>.*?</ref\s*>", re.S | re.I)
_TAGS = re.compile(r"</?[a-zA-Z][^<>]*>")
_FILE_LINKS = re.compile(r"\[\[\s*:?(?:File|Image|Category|Media)\s*:[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]", re.I)


def clean_wikitext(raw: str) -> str:
    # Refs go first: an unbalanced one elsewhere on the page makes the parser keep them as text.
    raw = _REFS.sub("", re.sub(r"<!--.*?-->", "", raw, flags=re.S))
    try:
        text = _render(mwparserfromhell.parse(raw))
    except Exception:  # noqa: BLE001 - odd markup must not stop a build
        text = _regex_strip(raw)
    return _tidy(text)


def _render(code) -> str:
    out: list[str] = []
    skipping = False
    for node in code.nodes:
        if isinstance(node, Heading):
            title = node.title.strip_code().strip().lower()
            skipping = title in _DROP_SECTIONS
            out.append("\n")
            continue
        if skipping:
            continue
        out.append(_node_text(node))
    return "".join(out)


def _node_text(node) -> str:
    if isinstance(node, Text):
        return str(node.value)
    if isinstance(node, (Template, Comment)):
        return ""
    if isinstance(node, HTMLEntity):
        return node.normalize()
    if isinstance(node, Wikilink):
        target = str(node.title).strip()
        low = target.lower().lstrip(":")
        if low.startswith(_DROP_LINK_PREFIXES) or (_INTERLANG.match(target) and not target.startswith(":")):
            return ""
        shown = node.text if node.text is not None else node.title
        return _render(shown) if hasattr(shown, "nodes") else str(shown)
    if isinstance(node, ExternalLink):
        return _render(node.title) if node.title is not None else ""
    if isinstance(node, Tag):
        tag = str(node.tag).lower()
        if tag in _DROP_TAGS or node.wiki_markup in ("{|",):
            return ""
        if tag in ("br", "p", "li", "dt", "dd"):
            return "\n"
        return _render(node.contents) if node.contents is not None else ""
    return str(node)


def _regex_strip(text: str) -> str:
    """Fallback renderer; comments and refs were removed before either renderer runs."""
    for _ in range(5):
        text = re.sub(r"\{\{[^{}]*\}\}|\{\|.*?\|\}", "", text, flags=re.S)
    text = re.sub(r"\[\[(?:File|Image|Category):[^\]]*\]\]", "", text, flags=re.I)
    text = re.sub(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]", r"\1", text)
    text = re.sub(r"\[https?://\S+\s*([^\]]*)\]", r"\1", text)
    return re.sub(r"<[^>]+>", "", text)


def _tidy(text: str) -> str:
    text = _FILE_LINKS.sub("", _TAGS.sub("", text)).replace("'''", "").replace("''", "")
    text = re.sub(r"\{\{|\}\}|\{\||\|\}|\[\[|\]\]", "", text)
    lines = []
    for line in text.split("\n"):
        line = " ".join(line.split())
        line = re.sub(r"^[*#:;]+\s*", "", line)
        line = re.sub(r"\(\s*[,;\s]*\)", "", line)  # "( )" left where a template stood
        line = re.sub(r"\(\s*[,;]+\s*", "(", line)
        line = re.sub(r"\s+([,.;:])", r"\1", line).strip()
        if line and not line.startswith(("|", "!")):
            lines.append(line)
    return "\n".join(lines)


def split_passages(text: str, words: int = 100) -> list[str]:
    """Consecutive ~`words`-word passages; a short tail (< words/3) joins the passage before it."""
    tokens = text.split()
    chunks = [tokens[i : i + words] for i in range(0, len(tokens), words)]
    if len(chunks) > 1 and len(chunks[-1]) < words / 3:
        chunks[-2].extend(chunks.pop())
    return [" ".join(c) for c in chunks]


def title_to_url(title: str) -> str:
    t = "_".join(title.strip().split())
    t = t[:1].upper() + t[1:]
    return WIKI_URL + quote(t, safe="_()',!:*-.~@$;&=+/")


def url_to_title(url: str) -> str | None:
    parts = urlsplit(url.strip())
    if not parts.netloc.endswith("wikipedia.org"):
        return None
    if parts.path.startswith("/wiki/"):
        raw = parts.path[len("/wiki/") :]
    elif parts.path.endswith("index.php"):
        raw = (parse_qs(parts.query).get("title") or [""])[0]
    else:
        return None
    title = unquote(raw).replace("_", " ").strip()
    return title or None
