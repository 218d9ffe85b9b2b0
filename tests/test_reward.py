"""Answer metrics against hand-checked values."""

import pytest

from asearcher_plugin.reward import (asearcher_f1, cover_exact_match, exact_match, f1_score, format_factor, normalize_answer,
                                     normalize_text, parse_gold, score_all, substring_match)


def test_normalisations():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_text("The  Eiffel-Tower!") == "the eiffel tower"
    assert normalize_text("True") == "yes"


@pytest.mark.parametrize("pred,gold,em,f1,sub,cover", [
    ("Luanda", ["Luanda"], 1, 1, 1, 1),
    ("the city of Luanda", ["Luanda"], 0, 0.5, 1, 1),
    ("Frank Borman", ["Borman", "Frank Borman"], 1, 1, 1, 1),
    ("Borman Frank", ["Frank Borman"], 0, 1, 0, 1),
    ("Lisbon", ["Luanda"], 0, 0, 0, 0),
    ("", ["Luanda"], 0, 0, 0, 0),
])
def test_metrics(pred, gold, em, f1, sub, cover):
    assert exact_match(pred, gold) == em
    assert f1_score(pred, gold) == pytest.approx(f1)
    assert substring_match(pred, gold) == sub
    assert cover_exact_match(pred, gold) == cover


def test_asearcher_f1_uses_token_sets():
    # Repeated tokens count once in ASearcher's F1 but twice in SQuAD's.
    assert asearcher_f1("paris paris", "paris") == 1.0
    assert f1_score("paris paris", "paris") == pytest.approx(2 / 3)


def test_gold_parsing_and_format():
    assert parse_gold('["a", "b"]') == ["a", "b"]
    assert parse_gold("Luanda") == ["Luanda"]
    assert parse_gold({"golden_answers": ["x"]}) == ["x"]
    assert format_factor(0, True) == 1.0 and format_factor(1, True) == 0.0 and format_factor(0, False) == 0.0
    assert score_all(None, ["x"])["f1"] == 0.0
