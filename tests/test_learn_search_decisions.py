"""The decision benchmark's table (benchmarks/learn_search_decisions.py) on evaluations written by hand: the gain is
paired by seed, its interval resamples articles, and each arm's rows start with kind `all`; its pieces are kept
each by its own key; the chart's curves are centred moving means."""

from __future__ import annotations

import pytest

from benchmarks.decision_behaviour import KINDS
from benchmarks.learn_search_decisions import LABELS, gain_cells, piece, smoothed, table_rows


def evaluation(f1: float, questions: dict[str, tuple[float, str]]) -> dict:
    """One arm's summary for every kind (decision_behaviour.summarise's shape), the same numbers in each."""
    row = {"f1": f1, "searches": 1.0, "page_reads": 0.5, "valid_actions": 0.9, "questions": questions}
    return {kind: {**row, "reads_when_needed": 0.8, "reads_when_not": 0.1, "second_search": 0.6} for kind in KINDS}


# seed 1's start scores 0.2 and its RL 0.3; seed 2's 0.4 and 0.6: gains 0.1 and 0.2 (0.4 and 0.1 if mispaired)
START = [evaluation(0.2, {"q1": (0.0, "A"), "q2": (0.4, "B")}), evaluation(0.4, {"q1": (0.4, "A"), "q2": (0.4, "B")})]
AFTER = [evaluation(0.3, {"q1": (0.2, "A"), "q2": (0.4, "B")}), evaluation(0.6, {"q1": (0.8, "A"), "q2": (0.4, "B")})]


def runs() -> dict:
    a = [{"seed": s, "eval": e} for s, e in zip((1, 2), START)]
    b = [{"seed": s, "eval": e} for s, e in zip((1, 2), AFTER)]
    return {"a": a, "b": b, "c": a, "d": b}


def test_the_gain_is_paired_by_seed_with_its_t():
    cell, t, stats = gain_cells(runs()["b"], runs()["a"], "all")
    assert stats["mean"] == pytest.approx(0.15) and stats["sd"] == pytest.approx(0.0707, abs=1e-4)
    assert stats["t"] == pytest.approx(3.0) and t == "3.0"
    assert cell.startswith("+0.150 ± 0.071 [")


def test_the_interval_resamples_articles_from_per_question_gains():
    # per question, its gain paired by seed and averaged: q1 (article A) (0.2 - 0.0 + 0.8 - 0.4) / 2 = 0.3, q2 (B) 0;
    # resampling the two articles gives means of 0.3, 0.15 or 0, so the interval is [0, 0.3]
    cell = gain_cells(runs()["b"], runs()["a"], "read")[0]
    assert cell.endswith("[+0.000, +0.300]")


def test_one_seed_states_no_spread_and_no_t():
    one = {arm: r[:1] for arm, r in runs().items()}
    rows = table_rows(one)
    rl = rows[len(KINDS)]
    assert rl[2] == "0.300" and rl[4] == "-" and rl[5] == 1  # seed 1: 0.2 -> 0.3
    assert rl[3].startswith("+0.100 [") and "±" not in rl[3]


def test_each_arm_has_its_rows_with_kind_all_first():
    rows = table_rows(runs())
    assert [r[1] for r in rows] == list(KINDS) * len(LABELS)
    assert [r[0] for r in rows if r[0]] == list(LABELS.values())
    start, rl = rows[0], rows[len(KINDS)]
    assert start[3] == "" and rl[3].startswith("+0.150") and rl[5] == 2
    read = rows[1]
    assert read[8] == "0.80 / 0.10" and rows[2][9] == "0.60"


def test_a_piece_is_kept_while_its_key_and_the_piece_it_was_made_from_are_unchanged(tmp_path):
    def claim(copier_code: str, task_code: str) -> list[str]:
        """Claim both pieces as a run would, and say which still hold what the last run made."""
        made = piece(tmp_path / "copier", {"code": copier_code})
        piece(tmp_path / "task", {"code": task_code}, made)
        held = [name for name in ("copier", "task") if (tmp_path / name / "out").exists()]
        for name in ("copier", "task"):
            (tmp_path / name / "out").touch()
        return held

    assert claim("c1", "t1") == []
    assert claim("c1", "t1") == ["copier", "task"]
    assert claim("c1", "t2") == ["copier"]  # the task's code changed: the copier stays
    assert claim("c2", "t2") == []  # the copier's code changed: the task, made from it, goes too


def test_the_charts_curve_is_a_mean_centred_on_each_update_skipping_updates_without_a_value():
    # window 3: [0, 10] -> 5, [0, 10, -] -> 5, [10, -, 20] -> 15, [-, 20, 40] -> 30, [20, 40] -> 30
    assert smoothed([0.0, 10.0, None, 20.0, 40.0], window=3) == [5.0, 5.0, 15.0, 30.0, 30.0]
