"""Text checks shared by the steps: answer identity, answer leaks, verbatim quotes."""

from __future__ import annotations

import re

from asearcher_plugin.rewards.reward import normalize_answer


def same_answer(a: str, b: str) -> bool:
    return normalize_answer(a) == normalize_answer(b)


def leaks(answer: str, question: str) -> bool:
    """The answer, as whole words, inside the question."""
    ans = normalize_answer(answer)
    return bool(ans) and f" {ans} " in f" {normalize_answer(question)} "


def squash(text: str) -> str:
    """Lower case, runs of whitespace made one space: the form quotes are compared in."""
    return re.sub(r"\s+", " ", text).strip().lower()


def contains_quote(text: str, quote: str) -> bool:
    """`quote` appears in `text`, ignoring case and whitespace; a quote under 3 words proves nothing."""
    q = squash(quote).strip(" .\"'")
    return len(q.split()) >= 3 and q in squash(text)


def page_chunks(text: str, chars: int) -> list[str]:
    """A page cut at paragraph ends into pieces of at most `chars` (a longer paragraph is cut bluntly)."""
    chunks, cur = [], ""
    for para in (p.strip() for p in text.split("\n")):
        if not para:
            continue
        while len(para) > chars:
            if cur:
                chunks.append(cur)
                cur = ""
            chunks.append(para[:chars])
            para = para[chars:]
        if cur and len(cur) + 1 + len(para) > chars:
            chunks.append(cur)
            cur = ""
        cur = f"{cur}\n{para}" if cur else para
    if cur:
        chunks.append(cur)
    return chunks
