"""Sentences over 40 words in the docs, per page: the share a reader meets, and which they are.

`python scripts/long_sentences.py` prints a table of every page (README.md and docs/*.md): its sentences, how many
run over 40 words and their share; `--show PAGE` lists that page's long sentences. A page may hold at most 5% of
them (`LIMIT`). Prose only: code blocks, tables, HTML comments and headings are left out, and each paragraph or list
item is a block of its own (a sentence never runs from one item into the next).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS, LIMIT = 40, 0.05
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
# a sentence ends at . ! ? (or one closing a quote, bracket or bold) before a space and a capital, a backtick, a link
# or a number; "e.g. the" and "0.5" do not end one
_END = re.compile(r"([.!?][\"')\]*]*)\s+(?=[A-Z`\[(*\"0-9])")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(text: str) -> list[str]:
    """The page's prose, one string per paragraph or list item."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    out, current, fenced = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            line = ""
        skip = fenced or line.lstrip().startswith(("|", "#", "<", "![", "!!!", "???")) or not line.strip()
        if skip or _ITEM.match(line):
            if current:
                out.append(" ".join(current))
            current = [] if skip else [_ITEM.sub("", line).strip()]
            continue
        current.append(line.strip())
    if current:
        out.append(" ".join(current))
    return out


def sentences(text: str) -> list[str]:
    return [s.strip() for block in blocks(text) for s in _END.sub("\\1\n", block).split("\n") if s.strip()]


def long_ones(text: str) -> tuple[int, list[str]]:
    """(sentences on the page, those over WORDS words)."""
    found = sentences(text)
    return len(found), [s for s in found if len(s.split()) > WORDS]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", help="list the long sentences of this page (e.g. docs/kb.md)")
    args = ap.parse_args()
    if args.show:
        for s in long_ones((ROOT / args.show).read_text())[1]:
            print(f"- ({len(s.split())} words) {s}\n")
        return 0
    over = 0
    print(f"| page | sentences | over {WORDS} words | share |\n|---|---|---|---|")
    for page in pages():
        total, long = long_ones(page.read_text())
        share = len(long) / total if total else 0.0
        over += share > LIMIT
        flag = f" (over {LIMIT:.0%})" if share > LIMIT else ""
        print(f"| {page.relative_to(ROOT)} | {total} | {len(long)} | {share:.0%}{flag} |")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
