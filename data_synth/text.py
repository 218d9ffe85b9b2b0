"""Text checks shared by the steps: answer identity, answer leaks, verbatim quotes."""

from __future__ import annotations

import re

from asearcher_plugin.reward import normalize_answer


def same_answer(a: str, b: str) -> bool:
    return normalize_answer(a) == normalize_answer(b)


def leaks(answer: str, question: str) -> bool:
    """The answer, as whole words, inside the question."""
    ans = normalize_answer(answer)
    return bool(ans) and f" {ans} " in f" {normalize_answer(question)} "


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def contains_quote(text: str, quote: str) -> bool:
    """`quote` appears in `text`, ignoring case and whitespace; a quote under 3 words proves nothing."""
    q = _squash(quote).strip(" .\"'")
    return len(q.split()) >= 3 and q in _squash(text)
