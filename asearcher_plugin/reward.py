"""Answer scoring: normalisation, EM, F1, cover-EM, substring match, format factor, LLM judge.

Two normalisations, because the two lineages score differently:
- SQuAD (`normalize_answer`): lower case, punctuation removed, articles removed. Search-R1's EM.
- ASearcher (`normalize_text`): every punctuation character becomes a space, no article removal,
  and F1 is computed over *sets* of tokens. ASearcher's training F1.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Sequence

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT_TO_SPACE = re.compile("[" + re.escape(string.punctuation) + "]")
_BOOL = {"true": "yes", "false": "no"}


def normalize_answer(text: str) -> str:
    """SQuAD normalisation."""
    text = "".join(ch for ch in str(text).lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def normalize_text(text: str) -> str:
    """ASearcher normalisation: punctuation to spaces, lower case, whitespace collapsed."""
    text = _BOOL.get(str(text).strip().lower(), str(text))
    return " ".join(_PUNCT_TO_SPACE.sub(" ", text.lower()).split())


def _golds(gold: str | Sequence[str]) -> list[str]:
    golds = [gold] if isinstance(gold, str) else [str(g) for g in gold]
    return [g for g in golds if g.strip()] or [""]


def exact_match(pred: str, gold: str | Sequence[str]) -> float:
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in _golds(gold)))


def substring_match(pred: str, gold: str | Sequence[str]) -> float:
    """FlashRAG `acc` / Search-R1 `subem`: a normalised gold answer occurs inside the prediction."""
    p = normalize_answer(pred)
    return float(any((g := normalize_answer(x)) and g in p for x in _golds(gold)))


def cover_exact_match(pred: str, gold: str | Sequence[str]) -> float:
    """Every token of a gold answer appears in the prediction (R1-Searcher's ACC_R)."""
    p = set(normalize_answer(pred).split())
    return float(any((g := normalize_answer(x).split()) and set(g) <= p for x in _golds(gold)))


def f1_score(pred: str, gold: str | Sequence[str]) -> float:
    """SQuAD token F1 (bag of tokens), best over the gold answers."""
    return max(_f1(normalize_answer(pred).split(), normalize_answer(g).split(), bag=True) for g in _golds(gold))


def asearcher_f1(pred: str, gold: str | Sequence[str]) -> float:
    """ASearcher's training F1: set of tokens after `normalize_text`, best over the gold answers."""
    return max(_f1(normalize_text(pred).split(), normalize_text(g).split(), bag=False) for g in _golds(gold))


def _f1(pred: list[str], gold: list[str], bag: bool) -> float:
    if not pred or not gold:
        return float(pred == gold)
    if bag:
        common = sum((Counter(pred) & Counter(gold)).values())
        p_len, g_len = len(pred), len(gold)
    else:
        common = len(set(pred) & set(gold))
        p_len, g_len = len(set(pred)), len(set(gold))
    if common == 0:
        return 0.0
    precision, recall = common / p_len, common / g_len
    return 2 * precision * recall / (precision + recall)


METRICS = {
    "em": exact_match,
    "f1": f1_score,
    "asearcher_f1": asearcher_f1,
    "cover_em": cover_exact_match,
    "substring": substring_match,
}


def score_all(pred: str | None, gold: str | Sequence[str]) -> dict[str, float]:
    if pred is None:
        return {name: 0.0 for name in METRICS}
    return {name: fn(pred, gold) for name, fn in METRICS.items()}


def format_factor(invalid_actions: int, answered: bool) -> float:
    """1 for a trajectory whose every turn was a valid action and that ends in an answer, else 0.

    ASearcher multiplies the answer score by this factor, so a model is never paid for a correct
    answer reached through malformed actions.
    """
    return 1.0 if answered and invalid_actions == 0 else 0.0


def parse_gold(label) -> list[str]:
    """Gold answers from a dataset label: a string, a list, or JSON of either."""
    import json

    if isinstance(label, (list, tuple)):
        return [str(x) for x in label]
    if isinstance(label, str):
        text = label.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
                if isinstance(value, list):
                    return [str(x) for x in value]
            except ValueError:
                pass
        return [label]
    if isinstance(label, dict):
        for key in ("golden_answers", "answer", "answers", "target"):
            if key in label:
                return parse_gold(label[key])
    return [str(label)]
