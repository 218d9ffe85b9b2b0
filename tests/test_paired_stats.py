"""The gain statistics of the learning benchmarks, against cases worked by hand."""

from __future__ import annotations

import math

import pytest

from benchmarks.paired_stats import clustered_interval, paired_t


def test_paired_t_is_the_differences_mean_over_their_standard_error():
    # differences 0.2, 0.1, 0.3: mean 0.2, sd 0.1, standard error 0.1 / sqrt(3), t = 2 sqrt(3)
    out = paired_t([0.1, 0.2, 0.3], [0.3, 0.3, 0.6])
    assert out["mean"] == pytest.approx(0.2) and out["sd"] == pytest.approx(0.1)
    assert out["t"] == pytest.approx(2 * math.sqrt(3)) and out["pairs"] == 3
    # pairing matters: the same values paired otherwise (differences 0, 0.1, 0.5: sd sqrt(0.07)) give another t
    assert paired_t([0.3, 0.2, 0.1], [0.3, 0.3, 0.6])["t"] == pytest.approx(0.2 / (math.sqrt(0.07) / math.sqrt(3)))
    assert paired_t([0.5, 0.5], [0.6, 0.6])["t"] == math.inf and paired_t([1, 2], [1, 2])["t"] == 0.0


def test_paired_t_refuses_what_is_not_a_pairing():
    with pytest.raises(ValueError, match="differ in number"):
        paired_t([0.1, 0.2], [0.3])
    with pytest.raises(ValueError, match="at least 2 pairs"):
        paired_t([0.1], [0.3])


def test_the_interval_resamples_articles_not_questions():
    # article A: one question gained 1; article B: three questions gained 0. Drawing 2 articles: AA (1/4 of draws)
    # averages 1, AB or BA (1/2) 1 / 4, BB (1/4) 0; so the 95% interval is 0 to 1. Resampling the 4 questions alone
    # would draw the gained one 4 times in 0.4% of draws (3 times in 4.7%), so its interval would stop at 0.75.
    diffs, articles = [1.0, 0.0, 0.0, 0.0], ["A", "B", "B", "B"]
    low, high = clustered_interval(diffs, articles, iters=4000, seed=1)
    assert (low, high) == (0.0, 1.0)
    # every question its own article: the plain question bootstrap's interval, narrower here
    low, high = clustered_interval(diffs, ["A", "B", "C", "D"], iters=4000, seed=1)
    assert low == 0.0 and high == 0.75


def test_the_interval_needs_a_label_per_difference():
    with pytest.raises(ValueError, match="cluster labels"):
        clustered_interval([0.1, 0.2], ["A"])
    assert clustered_interval([], []) == (0.0, 0.0)
