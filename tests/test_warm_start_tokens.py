"""benchmarks/warm_start_tokens.py: a held-out teacher trajectory scored token by token, per question kind."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.warm_start_tokens import summarise  # noqa: E402

PROMPT = "A conversation.\n\nUser: Echo Ridley?\n\nAssistant: \n"
REPLY = "<think>The answer is in the question.</think>\n<answer> Echo Ridley </answer>"


def _row(tokenizer, reply: str = REPLY) -> tuple[dict, int]:
    prompt, reply = tokenizer(PROMPT)["input_ids"], tokenizer(reply)["input_ids"]
    row = {"input_ids": prompt + reply, "loss_mask": [0] * len(prompt) + [1] * len(reply), "question_id": "train/q1"}
    return row, len(reply)


KINDS = {"q1": "none"}  # the task's rows: the question's kind by its id


class _Uniform:
    """Every token equally likely: a taught token has probability 1 / vocabulary."""

    def __init__(self, vocab: int):
        self.vocab = vocab

    def __call__(self, ids):
        import torch

        return SimpleNamespace(logits=torch.zeros(1, ids.shape[1], self.vocab))


class _Knows:
    """All the probability on the row's next token, but `wrong` of it elsewhere at the answer's close."""

    def __init__(self, ids: list[int], vocab: int, close_at: int, wrong: float):
        self.ids, self.vocab, self.close_at, self.wrong = ids, vocab, close_at, wrong

    def __call__(self, ids):
        import torch

        probs = torch.full((1, len(self.ids), self.vocab), 1e-12)
        for i, nxt in enumerate(self.ids[1:]):
            probs[0, i, nxt] = 1.0
        probs[0, self.close_at - 1, self.ids[self.close_at]] = 1 - self.wrong
        probs[0, self.close_at - 1, (self.ids[self.close_at] + 1) % self.vocab] = self.wrong
        return SimpleNamespace(logits=probs.log())


def test_a_uniform_model_has_one_in_vocabulary_per_taught_token(tokenizer):
    row, taught = _row(tokenizer)
    vocab = len(tokenizer)
    table, pairs = summarise([row], tokenizer, _Uniform(vocab), KINDS)
    assert list(table) == ["none"] and table["none"]["trajectories"] == 1
    assert table["none"]["whole"] == pytest.approx(vocab**-taught, rel=1e-4)
    assert table["none"]["wrong"] == pytest.approx(taught * (1 - 1 / vocab), rel=1e-4)
    words = len(tokenizer(" Echo Ridley")["input_ids"])  # the answer's words; then " </answer>", two tokens
    assert tokenizer.convert_ids_to_tokens(row["input_ids"][-2:]) == ["Ġ", "</answer>"]
    assert table["none"]["words"] == pytest.approx(vocab**-words, rel=1e-4)
    assert table["none"]["close"] == pytest.approx(vocab**-2, rel=1e-4)
    assert len(pairs) <= taught and sum(share for _, share in pairs) == pytest.approx(1.0)


def test_a_close_written_without_a_space_is_the_tag_alone(tokenizer):
    row, taught = _row(tokenizer, REPLY.replace(" </answer>", "</answer>"))
    vocab = len(tokenizer)
    table, _ = summarise([row], tokenizer, _Uniform(vocab), KINDS)
    words = len(tokenizer(" Echo Ridley")["input_ids"])
    assert tokenizer.convert_ids_to_tokens(row["input_ids"][-2:])[-1] == "</answer>"
    assert table["none"]["words"] == pytest.approx(vocab**-words, rel=1e-4)
    assert table["none"]["close"] == pytest.approx(1 / vocab, rel=1e-4)


def test_a_model_unsure_where_the_answer_ends_loses_only_the_close(tokenizer):
    row, _ = _row(tokenizer)
    space = len(row["input_ids"]) - 2  # " </answer>" is the space token, then the tag
    model = _Knows(row["input_ids"], len(tokenizer), space, wrong=0.4)
    table, pairs = summarise([row], tokenizer, model, KINDS)
    s = table["none"]
    assert s["words"] == pytest.approx(1.0) and s["close"] == pytest.approx(0.6, rel=1e-4)
    assert s["whole"] == pytest.approx(0.6, rel=1e-4) and s["wrong"] == pytest.approx(0.4, rel=1e-4)
    before = tokenizer.convert_ids_to_tokens(row["input_ids"][space - 1])
    assert pairs[0] == ((before, "Ġ"), pytest.approx(1.0))  # the whole loss, on the close's space


def test_the_kind_comes_from_the_task_row_and_an_unknown_question_is_named(tokenizer):
    row, _ = _row(tokenizer)
    table, _ = summarise([row], tokenizer, _Uniform(len(tokenizer)), {"q1": "read"})
    assert list(table) == ["read"]  # the task's kind, not a guess from the prompt's text (an echo question)
    with pytest.raises(ValueError, match="'train/q1' is not in the task's rows"):
        summarise([row], tokenizer, _Uniform(len(tokenizer)), {"q2": "none"})
