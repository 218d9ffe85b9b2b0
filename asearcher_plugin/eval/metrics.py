"""Avg@k, Pass@k and bootstrap confidence intervals over per-(question, run) scores.

`scores[q]` is the list of one metric's values for question q, one per run (seed). Avg@k is the
mean over questions of the mean of the first k runs (ASearcher's Avg@k); Pass@k is, for scores
in {0, 1}, the unbiased estimator 1 - C(n-c, k) / C(n, k) when n > k runs exist (Chen et al.
2021), which is "any of the k runs correct" when n == k; for graded scores (F1) Pass@k is the
mean best-of-first-k (ASearcher's Max@k).

Metrics are computed from each row's `scores` alone; its `logs` (turns, tool errors, judge failures) are
counters, shown as distributions and never as a metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import numpy as np

from ..records import EvalRow


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


def bootstrap_ci(
    per_question: Sequence[float], iters: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
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
    return {
        "questions": len(avg_q),
        f"avg@{k}": avg_at_k(scores, k),
        f"avg@{k}_ci95": bootstrap_ci(avg_q),
        f"pass@{k}": pass_at_k(scores, k),
        f"pass@{k}_ci95": bootstrap_ci(pass_q),
    }


# Counters shown per trajectory as mean / p50 / p90 / max.
DISTRIBUTIONS = ("turns", "searches", "accesses", "invalid_actions", "tool_errors")


def compute_metrics(rows: list[EvalRow], k: int) -> dict:
    ok = [r for r in rows if r.status == "ok"]
    failed = [r for r in rows if r.status == "failed"]
    metrics = {
        "k": k,
        "items_ok": len(ok),
        "items_failed": len(failed),
        "items_error": len(rows) - len(ok) - len(failed),
        "datasets": {},
    }
    groups = {"overall": ok}
    for r in ok:
        groups.setdefault(r.dataset, []).append(r)
    for name, group in groups.items():
        by_q: dict[tuple[str, str], list[EvalRow]] = {}
        for r in group:
            by_q.setdefault((r.dataset, r.id), []).append(r)
        names = sorted({m for r in group for m in r.scores})
        entry = {
            m: summarise([[x.scores.get(m, 0.0) for x in sorted(rs, key=lambda x: x.seed)] for rs in by_q.values()], k)
            for m in names
        }
        entry["distributions"] = {key: _dist([r.logs.get(key, 0.0) for r in group]) for key in DISTRIBUTIONS}
        entry["distributions"]["tokens"] = _dist([r.tokens for r in group])
        metrics["datasets"][name] = entry
    return metrics


def _dist(values: list[float]) -> dict:
    if not values:
        return {}
    a = np.asarray(values, dtype=float)
    return {
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "max": float(a.max()),
    }


# ASearcher's metric names for ours: its F1 is the set-based one, CEM is cover-EM, MBE the judge's verdict.
ASEARCHER_METRICS = {"F1": "asearcher_f1", "EM": "em", "CEM": "cover_em", "MBE": "judge"}


def asearcher_aggregate(rows: list[EvalRow], k: int) -> dict:
    """Per dataset, the shape of ASearcher's aggregate file: `num` questions, each metric's mean over every
    (question, run), `{metric}.Max@{k}` (mean over questions of the best of the first k runs), and the
    average generated tokens, searches and page accesses per trajectory."""
    out: dict[str, dict] = {}
    for name in dict.fromkeys(r.dataset for r in rows if r.status == "ok"):
        group = [r for r in rows if r.status == "ok" and r.dataset == name]
        by_q: dict[str, list[EvalRow]] = {}
        for r in sorted(group, key=lambda r: r.seed):
            by_q.setdefault(r.id, []).append(r)
        entry: dict = {"num": len(by_q)}
        for theirs, ours in ASEARCHER_METRICS.items():
            if not all(ours in r.scores for r in group):
                continue
            runs = [[r.scores[ours] for r in rs] for rs in by_q.values()]
            entry[theirs] = float(np.mean([v for vs in runs for v in vs]))
            entry[f"{theirs}.Max@{k}"] = float(np.mean([max(vs[:k]) for vs in runs]))
        if all(r.gen_tokens is not None for r in group):
            entry["avg_gen_len"] = float(np.mean([r.gen_tokens for r in group]))
        entry["avg_num_searchs"] = float(np.mean([r.logs.get("searches", 0.0) for r in group]))
        entry["avg_num_access"] = float(np.mean([r.logs.get("accesses", 0.0) for r in group]))
        out[name] = entry
    return out
