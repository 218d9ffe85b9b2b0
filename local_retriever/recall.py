"""Retrieval recall on questions with supporting titles: a hit is a top-k passage from a gold article."""

from __future__ import annotations

from .pages import title_key


def recall_at_k(questions: list[dict], titles: list[list[str]], ks=(1, 5, 10)) -> dict[str, float]:
    """`titles[i]` are the titles of the ranked passages returned for `questions[i]`."""
    out = {}
    for k in ks:
        hits = 0
        for q, ranked in zip(questions, titles):
            gold = {title_key(t) for t in q["supporting_titles"]}
            hits += any(title_key(t) in gold for t in ranked[:k])
        out[f"recall@{k}"] = hits / len(questions) if questions else 0.0
    return out
