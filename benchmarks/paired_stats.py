"""The statistics of a learning benchmark's gain: paired by seed, and resampled by article.

A gain over the SFT start is paired twice. By seed: run s of RL starts from the SFT model of seed s, so each seed's
gain is its own difference, and the t statistic is that of the differences (`paired_t`). By question: the held-out
questions of one article share their passages, so an article's questions err together; an interval that resamples
questions treats 195 questions about 30 articles as 195 independent draws and comes out too narrow.
`clustered_interval` resamples whole articles instead, each with all of its questions.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np


def paired_t(start: Sequence[float], after: Sequence[float]) -> dict:
    """Mean and sample sd of `after - start` (paired by position: seed i against seed i) and its t statistic, the
    mean over its standard error (inf when every difference is the same non-zero value, 0 when all are 0)."""
    if len(start) != len(after):
        raise ValueError(f"paired values differ in number: {len(start)} against {len(after)}")
    diff = [b - a for a, b in zip(start, after)]
    n = len(diff)
    if n < 2:
        raise ValueError(f"a paired t needs at least 2 pairs, got {n}")
    mean = sum(diff) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diff) / (n - 1))
    if sd == 0:
        t = 0.0 if mean == 0 else math.copysign(math.inf, mean)
    else:
        t = mean / (sd / math.sqrt(n))
    return {"mean": mean, "sd": sd, "t": t, "pairs": n}


def clustered_interval(
    diffs: Sequence[float], clusters: Sequence[Hashable], iters: int = 4000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile interval of the mean per-question difference, resampling clusters (articles) with replacement:
    each draw takes as many clusters as there are, with all of their questions, and averages over the questions it
    took."""
    if len(diffs) != len(clusters):
        raise ValueError(f"{len(diffs)} differences against {len(clusters)} cluster labels")
    if not diffs:
        return (0.0, 0.0)
    names = sorted(set(clusters), key=str)
    index = {name: i for i, name in enumerate(names)}
    sums = np.zeros(len(names))
    counts = np.zeros(len(names))
    for d, c in zip(diffs, clusters):
        sums[index[c]] += d
        counts[index[c]] += 1
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(names), size=(iters, len(names)))
    means = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))
