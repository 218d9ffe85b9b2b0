"""Recall@1/5/10 of a gold-article passage on the sample questions, for dense, BM25 and hybrid.

One command: `python benchmarks/retrieval_quality.py` (builds the sample KB into runs/ if needed).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.readme_table import publish  # noqa: E402
from local_retriever.build import ensure_sample_kb  # noqa: E402
from local_retriever.kb import KnowledgeBase  # noqa: E402
from local_retriever.recall import answer_recall_at_k, recall_at_k  # noqa: E402
from local_retriever.sample import load_sample_questions  # noqa: E402

KB = Path("runs/sample-kb")


def main() -> None:
    ensure_sample_kb(KB)
    questions = load_sample_questions()
    rows, payload = [], {}
    # int8 queries search the same fp32 index: the row shows the recall that --int8-queries costs
    for label, name, int8 in (
        ("dense", "dense", False),
        ("dense, int8 queries", "dense", True),
        ("bm25", "bm25", False),
        ("hybrid", "hybrid", False),
    ):
        kb = KnowledgeBase(KB, name, int8_queries=int8)
        start = time.perf_counter()
        hits = kb.search([q["question"] for q in questions], 10)
        seconds = time.perf_counter() - start
        ranked = [kb.rows(h) for h in hits]
        titles = [[row["title"] for row, _ in r] for r in ranked]
        texts = [[row["contents"] for row, _ in r] for r in ranked]
        art, ans = recall_at_k(questions, titles), answer_recall_at_k(questions, texts)
        two = [i for i, q in enumerate(questions) if q["hops"] == 2]
        ans_two = answer_recall_at_k([questions[i] for i in two], [texts[i] for i in two], ks=(5,))["recall@5"]
        payload[label] = {"article": art, "answer": ans, "answer_recall@5_two_hop": ans_two, "seconds": seconds}
        rows.append(
            [label]
            + [f"{art[f'recall@{k}']:.3f}" for k in (1, 5, 10)]
            + [f"{ans[f'recall@{k}']:.3f}" for k in (1, 5, 10)]
            + [f"{ans_two:.3f}"]
        )
        kb.close()
    n1 = sum(q["hops"] == 1 for q in questions)
    note = (
        f"{len(questions)} sample questions ({n1} single-hop, {len(questions) - n1} two-hop) over "
        f"{len(kb.passages)} passages of the bundled Wikipedia sample. "
        "Article recall: a top-k passage from the article that states the answer; "
        "answer recall (FlashRAG convention): a top-k passage contains a gold answer; "
        "dense = all-MiniLM-L6-v2 + FAISS Flat (int8 queries: `--int8-queries`, same index), "
        "hybrid = reciprocal rank fusion of both"
    )
    print(
        publish(
            "retrieval_quality",
            [
                "retriever",
                "article R@1",
                "article R@5",
                "article R@10",
                "answer R@1",
                "answer R@5",
                "answer R@10",
                "answer R@5 two-hop",
            ],
            rows,
            note,
            payload,
        )
    )


if __name__ == "__main__":
    main()
