"""Recall@1/5/10 of a gold-article passage on the sample questions, for dense, BM25 and hybrid.

One command: `python benchmarks/retrieval_quality.py` (builds the sample KB into runs/ if needed).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.readme_table import publish  # noqa: E402
from local_retriever.build import build_kb  # noqa: E402
from local_retriever.kb import KnowledgeBase  # noqa: E402
from local_retriever.manifest import MANIFEST_FILE  # noqa: E402
from local_retriever.recall import recall_at_k  # noqa: E402
from local_retriever.sample import load_sample_questions, sample_dump_path  # noqa: E402

KB = Path("runs/sample-kb")


def main() -> None:
    if not (KB / MANIFEST_FILE).is_file():
        build_kb(sample_dump_path(), KB)
    questions = load_sample_questions()
    rows, payload = [], {}
    for name in ("dense", "bm25", "hybrid"):
        kb = KnowledgeBase(KB, name)
        start = time.perf_counter()
        hits = kb.search([q["question"] for q in questions], 10)
        seconds = time.perf_counter() - start
        titles = [[row["title"] for row, _ in kb.rows(h)] for h in hits]
        by_hops = {}
        for hops in (1, 2):
            sel = [i for i, q in enumerate(questions) if q["hops"] == hops]
            by_hops[hops] = recall_at_k([questions[i] for i in sel], [titles[i] for i in sel], ks=(5,))["recall@5"]
        r = recall_at_k(questions, titles)
        payload[name] = {**r, "recall@5_single_hop": by_hops[1], "recall@5_two_hop": by_hops[2], "seconds": seconds}
        rows.append([name, f"{r['recall@1']:.3f}", f"{r['recall@5']:.3f}", f"{r['recall@10']:.3f}",
                     f"{by_hops[1]:.3f}", f"{by_hops[2]:.3f}"])
        kb.close()
    n1 = sum(q["hops"] == 1 for q in questions)
    note = (f"{len(questions)} sample questions ({n1} single-hop, {len(questions) - n1} two-hop) over "
            f"{len(kb.passages)} passages of the bundled Wikipedia sample; a hit is a top-k passage from a supporting article; "
            "dense = all-MiniLM-L6-v2 + FAISS Flat, hybrid = reciprocal rank fusion of both")
    print(publish("retrieval_quality", ["retriever", "recall@1", "recall@5", "recall@10", "R@5 single-hop", "R@5 two-hop"],
                  rows, note, payload))


if __name__ == "__main__":
    main()
