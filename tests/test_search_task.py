"""The learning benchmark's task (`benchmarks/search_task.py`) on the real sample KB and the tiny model's tokenizer:
the answer is only in the search result, the result the question finds shows it where the agent prints the title,
every question is the same number of tokens, and no held-out article is trained on."""

from __future__ import annotations

import pytest

from asearcher_plugin.agent.prompts import format_docs
from asearcher_plugin.rewards.reward import normalize_answer
from benchmarks.search_task import learning_split, make_questions, passages, split


@pytest.fixture(scope="module")
def questions(sample_kb, tokenizer):
    return make_questions(sample_kb, tokenizer)


def test_questions_answer_from_search_only(questions, sample_kb, tokenizer):
    from local_retriever.kb import KnowledgeBase

    rows = questions
    assert len(rows) >= 300
    assert len({r["id"] for r in rows}) == len(rows)
    assert len({len(tokenizer.tokenize(" " + r["question"])) for r in rows}) == 1  # one copy distance for all
    texts = [p["contents"].lower() for p in passages(sample_kb)]
    kb = KnowledgeBase(sample_kb, "bm25")
    try:
        for row in rows[::7]:
            title = row["golden_answers"][0]
            word = row["question"].removeprefix("Article with ").rstrip("?").lower()
            assert normalize_answer(title) not in word and not set(normalize_answer(title).split()) & {word}
            assert sum(word in t for t in texts) >= 1
            top = kb.rows(kb.search([row["question"]], 1)[0])[0][0]
            assert format_docs([top], 200).startswith(f"Doc 1(Title: {title}) ")  # what the agent shows first
    finally:
        kb.close()


def test_split_keeps_each_article_on_one_side(questions):
    rows = questions
    train, held = split(rows, 0.25, 0)
    assert len(train) + len(held) == len(rows) and 0.1 < len(held) / len(rows) < 0.5
    assert not {r["title"] for r in train} & {r["title"] for r in held}
    assert split(rows, 0.25, 0) == (train, held)
    assert split(rows, 0.25, 1) != (train, held)


def test_warm_start_rl_and_held_out_questions_ask_about_different_articles(questions):
    sides = learning_split(questions)
    titles = {name: {r["title"] for r in rows} for name, rows in sides.items()}
    assert all(len(rows) >= 60 for rows in sides.values())
    assert not titles["sft"] & titles["rl"] and not titles["sft"] & titles["heldout"]
    assert not titles["rl"] & titles["heldout"]


def test_the_command_writes_the_benchmarks_three_sides(questions, sample_kb, tiny_model, tmp_path):
    """docs/warm-start.md's files: the warm start's side as train.jsonl (sft-data's held-out split hashes the file's
    name with each id, so another name would give the warm start other sequences than the benchmark's)."""
    import json
    import subprocess
    import sys

    from tests.helpers import ROOT

    cmd = [sys.executable, str(ROOT / "benchmarks" / "search_task.py"), str(sample_kb), str(tiny_model), str(tmp_path)]
    subprocess.run([*cmd, "--rl-share", "0.4"], check=True, capture_output=True, timeout=300)
    sides = learning_split(questions, 0.25, 0.4)
    for name, side in (("train", "sft"), ("rl", "rl"), ("heldout", "heldout")):
        rows = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        assert rows == sides[side], name
