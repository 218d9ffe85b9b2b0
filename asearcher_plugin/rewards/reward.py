"""Answer scoring: normalisation, EM, F1, cover-EM, substring match, format factor, LLM judge.

Two normalisations, because the two lineages score differently:
- SQuAD (`normalize_answer`): lower case, punctuation removed, articles removed. Search-R1's EM.
- ASearcher (`normalize_text`): every punctuation character becomes a space, no article removal,
  and F1 is computed over *sets* of tokens. ASearcher's F1 (its evaluation's exactly; its training reward adds
  `bool_mapping` and, for Chinese, characters).

Options of ASearcher's training reward (`RewardConfig`), each off by default: F1 over characters when
a gold answer holds Chinese text (`cjk=True`), the blend with `aug_answer` aliases, and the penalty for
an answer calling the question invalid.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT_TO_SPACE = re.compile("[" + re.escape(string.punctuation) + "]")


def normalize_answer(text: str) -> str:
    """SQuAD normalisation."""
    text = "".join(ch for ch in str(text).lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def normalize_text(text: str) -> str:
    """ASearcher normalisation: punctuation to spaces, lower case, whitespace collapsed."""
    return " ".join(_PUNCT_TO_SPACE.sub(" ", str(text).lower()).split())


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


def bool_mapping(text: str) -> str:
    """An answer or gold of exactly "True" / "False" read as "yes" / "no": ASearcher's training reward and its
    evaluation's cover-EM do this (its evaluation F1 does not)."""
    return {"True": "yes", "False": "no"}.get(text, text)


def cover_exact_match(pred: str, gold: str | Sequence[str]) -> float:
    """Every token of a gold answer appears in the prediction (R1-Searcher's ACC_R, ASearcher's CEM)."""
    p = set(normalize_answer(bool_mapping(pred)).split())
    return float(any((g := normalize_answer(bool_mapping(x)).split()) and set(g) <= p for x in _golds(gold)))


# The ranges ASearcher's `contains_chinese` matches. Its test for supplementary planes never fires in
# Python 3 (a str holds code points, not surrogate pairs), so Extension B and later are not matched.
_CJK = re.compile("[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff]")
_CJK_DROP = str.maketrans("", "", "0123456789\uff0c\u3002 ,.-")  # ASCII digits, fullwidth comma, ideographic stop


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def cjk_tokens(text: str) -> list[str]:
    """ASearcher's tokens for Chinese text: each run of digits, and every other character but spaces and ，。,.-"""
    runs, run = [], ""
    for ch in text:  # str.isdigit, as there (it also takes e.g. "²"); only ASCII digits are dropped below
        if ch.isdigit():
            run += ch
        elif run:
            runs.append(run)
            run = ""
    return runs + ([run] if run else []) + list(text.translate(_CJK_DROP))


def _tokens(normalised: str, cjk: bool) -> list[str]:
    return cjk_tokens(normalised) if cjk else normalised.split()


def f1_score(pred: str, gold: str | Sequence[str], cjk: bool = False) -> float:
    """SQuAD token F1 (bag of tokens), best over the gold answers; `cjk`: characters for a Chinese gold."""
    best = 0.0
    for g in _golds(gold):
        p_norm, g_norm = normalize_answer(pred), normalize_answer(g)
        chars = cjk and has_cjk(g_norm)
        best = max(best, _f1(_tokens(p_norm, chars), _tokens(g_norm, chars), bag=True))
    return best


def asearcher_f1(pred: str, gold: str | Sequence[str], cjk: bool = False) -> float:
    """ASearcher's training F1: set of tokens after `normalize_text`, best over the gold answers.

    With `cjk`, a gold answer holding a Chinese character is compared character by character (digit
    runs kept whole), as ASearcher's reward does: "北京市" against "北京" is P 2/3, R 1, F1 0.8.
    """
    best = 0.0
    for g in _golds(gold):
        p_norm, g_norm = normalize_text(pred), normalize_text(g)
        chars = cjk and has_cjk(g_norm)
        best = max(best, _f1(_tokens(p_norm, chars), _tokens(g_norm, chars), bag=False))
    return best


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

# What each metric counts, for pages that show them side by side: on a short answer that is a gold answer, or
# shares no word with one, all five give the same number; they part on partial answers.
METRIC_NOTES = {
    "em": "the normalised answer equals a gold answer",
    "f1": "token F1 with the closest gold answer (SQuAD)",
    "asearcher_f1": "F1 over sets of tokens (ASearcher's training reward)",
    "cover_em": "every token of a gold answer is in the answer",
    "substring": "a gold answer occurs inside the answer",
    "judge": "an LLM judge's verdict",
}
AGREE_NOTE = (
    "The metrics agree when the answer is a gold answer or shares no word with one; they differ on partial answers."
)

CJK_AWARE = {"f1", "asearcher_f1"}


def score_all(pred: str | None, gold: str | Sequence[str], options=None, aug: Sequence[str] = ()) -> dict[str, float]:
    """Every metric; `options` (a RewardConfig) switches on the CJK F1 and the `aug` alias blend."""
    if pred is None:
        return {name: 0.0 for name in METRICS}
    cjk = bool(getattr(options, "cjk_char_f1", False))
    if getattr(options, "bool_mapping", False):
        pred, gold, aug = bool_mapping(pred), [bool_mapping(g) for g in _golds(gold)], [bool_mapping(a) for a in aug]
    weight = float(getattr(options, "aug_answer_weight", 0.0))
    aug = [a for a in aug if str(a).strip()] if weight else []

    def one(name: str, golds) -> float:
        return METRICS[name](pred, golds, cjk=True) if cjk and name in CJK_AWARE else METRICS[name](pred, golds)

    scores = {}
    for name in METRICS:
        score = one(name, gold)
        if aug:
            # ASearcher's blend: the aliases can only add to the answer's own score.
            score = (1 - weight) * score + weight * max(one(name, aug), score)
        scores[name] = score
    return scores


def invalid_answer_penalty(score: float, answer: str | None, options) -> float:
    """`options.invalid_answer_penalty` in place of the score when the answer holds one of its words.

    ASearcher gives -0.5 to an answer containing "question", "invalid", "appropriate" or "valid" when the
    prompt told the model the question is valid, as the asearcher agent's prompt does.
    """
    penalty = getattr(options, "invalid_answer_penalty", None)
    if penalty is None or answer is None:
        return score
    words = getattr(options, "invalid_answer_words", ())
    return float(penalty) if any(w and w in answer for w in words) else score


def format_factor(invalid_actions: int, answered: bool) -> float:
    """1 for a trajectory whose every turn was a valid action and that ends in an answer, else 0.

    ASearcher multiplies the answer score by this factor, so a model is never paid for a correct
    answer reached through malformed actions.
    """
    return 1.0 if answered and invalid_actions == 0 else 0.0


def parse_aug(label) -> list[str]:
    """The `aug_answer` aliases of a label given as an object (or its JSON), as in ASearcher's training data."""
    if isinstance(label, str) and label.strip().startswith("{"):
        import json

        try:
            label = json.loads(label)
        except ValueError:
            return []
    if isinstance(label, dict):
        aug = label.get("aug_answer")
        if isinstance(aug, (list, tuple)):
            return [str(x) for x in aug if x is not None]
        if aug is not None and str(aug).strip():
            return [str(aug)]
    return []


def parse_gold(label) -> list[str]:
    """Gold answers from a dataset label: a string, a list, an object with the answers, or JSON of one."""
    import json

    if label is None:  # a null label has no gold answer: "None" must never score as correct
        return []
    if isinstance(label, (list, tuple)):
        return [str(x) for x in label if x is not None]
    if isinstance(label, str):
        text = label.strip()
        if text.startswith(("[", "{")):
            try:
                value = json.loads(text)
            except ValueError:
                value = None
            if isinstance(value, (list, dict)):
                return parse_gold(value)
        return [label]
    if isinstance(label, dict):
        for key in ("golden_answers", "answer", "answers", "target"):
            if key in label:
                return parse_gold(label[key])
    return [str(label)]
