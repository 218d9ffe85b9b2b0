"""Avg@k, Pass@k (unbiased estimator) and bootstrap intervals against hand-computed values."""

from math import comb

import pytest

from asearcher_plugin.eval.metrics import avg_at_k, bootstrap_ci, pass_at_k, pass_at_k_one, summarise


def test_avg_and_pass_with_n_equal_k():
    scores = [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
    assert avg_at_k(scores, 4) == pytest.approx((0.25 + 0 + 1) / 3)
    assert pass_at_k(scores, 4) == pytest.approx(2 / 3)  # any of the 4 correct


def test_unbiased_pass_at_k_when_n_exceeds_k():
    values = [1, 0, 0, 1, 0, 0, 0, 0]  # n=8, c=2
    assert pass_at_k_one(values, 1) == pytest.approx(2 / 8)
    assert pass_at_k_one(values, 4) == pytest.approx(1 - comb(6, 4) / comb(8, 4))
    assert pass_at_k_one([0, 0, 0], 2) == 0.0 and pass_at_k_one([1, 1, 0], 2) == 1.0


def test_graded_scores_use_best_of_first_k():
    assert pass_at_k_one([0.2, 0.5, 0.9], 2) == 0.5


def test_bootstrap_interval_contains_the_mean_and_narrows_with_more_questions():
    small = [1, 0] * 10
    large = [1, 0] * 500
    lo_s, hi_s = bootstrap_ci(small)
    lo_l, hi_l = bootstrap_ci(large)
    assert lo_s < 0.5 < hi_s and lo_l < 0.5 < hi_l and (hi_l - lo_l) < (hi_s - lo_s)


def test_summary_keys():
    out = summarise([[1, 0], [0, 0]], 2)
    assert out["questions"] == 2 and out["avg@2"] == 0.25 and out["pass@2"] == 0.5
    assert len(out["avg@2_ci95"]) == 2
