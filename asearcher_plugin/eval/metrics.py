"""Avg@k, Pass@k and bootstrap confidence intervals over per-(question, run) scores.

`scores[q]` is the list of one metric's values for question q, one per run (seed). Avg@k is the
mean over questions of the mean of the first k runs (ASearcher's Avg@k); Pass@k is, for scores
in {0, 1}, the unbiased estimator 1 - C(n-c, k) / C(n, k) when n > k runs exist (Chen et al.
2021), which is "any of the k runs correct" when n == k; for graded scores (F1) Pass@k is the
mean best-of-first-k (ASearcher's Max@k).
"""

from __future__ import annotations

from math import comb
from typing import Sequence

import numpy as np


def avg_at_k(scores: Sequence[Sequence[float]], k: int) -> float:
    per_q = [float(np.mean(s[:k])) for s in scores if len(s) >= 1]
    return float(np.mean(per_q)) if per_q else 0.0


def pass_at_k_one(values: Sequence[float], k: int) -> float:
    n = len(values)
    if n == 0:
        return 0.0
    k = min(k, n)
    if all(v in (0.0, 1.0) for v in values):
        c = int(sum(values))
        return 1.0 - comb(n - c, k) / comb(n, k) if n - c >= k else 1.0
    return float(max(values[:k]))


def pass_at_k(scores: Sequence[Sequence[float]], k: int) -> float:
    per_q = [pass_at_k_one(s, k) for s in scores if len(s) >= 1]
    return float(np.mean(per_q)) if per_q else 0.0


def bootstrap_ci(per_question: Sequence[float], iters: int = 2000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean, resampling questions with replacement."""
    values = np.asarray(per_question, dtype=float)
    if len(values) == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(iters, len(values)))].mean(axis=1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))


def summarise(scores: Sequence[Sequence[float]], k: int) -> dict:
    """Avg@k and Pass@k with bootstrap CIs, for one metric over one dataset."""
    avg_q = [float(np.mean(s[:k])) for s in scores if s]
    pass_q = [pass_at_k_one(s, k) for s in scores if s]
    return {"questions": len(avg_q), f"avg@{k}": avg_at_k(scores, k), f"avg@{k}_ci95": bootstrap_ci(avg_q),
            f"pass@{k}": pass_at_k(scores, k), f"pass@{k}_ci95": bootstrap_ci(pass_q)}
