"""Reciprocal rank fusion of ranked id lists (Cormack et al., 2009): score = sum 1 / (k + rank)."""

from __future__ import annotations

import numpy as np

RRF_K = 60


def rrf_fuse(rankings: list[np.ndarray], topk: int, k: int = RRF_K) -> tuple[list[int], list[float]]:
    """Fuses several rankings of one query (arrays of ids, best first, -1 = empty slot)."""
    fused: dict[int, float] = {}
    for ids in rankings:
        for rank, doc in enumerate(int(i) for i in ids):
            if doc >= 0:
                fused[doc] = fused.get(doc, 0.0) + 1.0 / (k + rank + 1)
    best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:topk]
    return [d for d, _ in best], [s for _, s in best]
