"""Retrieval recall on questions with gold answers and supporting titles.

Two conventions: *article recall* counts a top-k passage from the answer's article (the last
supporting title, where a two-hop question ends); *answer recall* (FlashRAG's
`retrieval_recall_top{k}`) counts a top-k passage that contains a gold answer string.
"""

from __future__ import annotations

from .pages import title_key


def recall_at_k(questions: list[dict], titles: list[list[str]], ks=(1, 5, 10)) -> dict[str, float]:
    """`titles[i]` are the titles of the ranked passages returned for `questions[i]`."""

    def hit(q, ranked, k):
        return title_key(q["supporting_titles"][-1]) in {title_key(t) for t in ranked[:k]}

    return _rates(questions, titles, ks, hit)


def answer_recall_at_k(questions: list[dict], texts: list[list[str]], ks=(1, 5, 10)) -> dict[str, float]:
    """`texts[i]` are the ranked passage texts returned for `questions[i]`."""

    def hit(q, ranked, k):
        answers = [a.lower() for a in q["golden_answers"]]
        return any(a in t.lower() for t in ranked[:k] for a in answers)

    return _rates(questions, texts, ks, hit)


def _rates(questions, ranked_lists, ks, hit) -> dict[str, float]:
    n = len(questions) or 1
    return {f"recall@{k}": sum(hit(q, r, k) for q, r in zip(questions, ranked_lists)) / n for k in ks}
