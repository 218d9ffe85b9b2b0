"""The decision task (benchmarks/decision_task.py) checked against the KB it is built from, each property read off the
passages, the pages and the KB's own search rather than the generator's bookkeeping."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from tests.helpers import ROOT

DOC_CHARS, PAGE_CHARS = 200, 2500


@pytest.fixture(scope="module")
def task(sample_kb, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("decision")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "decision_task.py"), str(sample_kb), str(tiny_model), str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    sides = {name: [json.loads(x) for x in (out / f"{name}.jsonl").read_text().splitlines()] for name in SIDES}
    return sides, json.loads(done.stdout.splitlines()[-1])


SIDES = ("train", "rl", "heldout")


def kb_texts(sample_kb):
    """Every whole word of the passages' text -> the (title, text) of each passage holding it, exact case and lower
    case; and the pages by title."""
    exact, lower = defaultdict(list), defaultdict(list)
    for line in (sample_kb / "passages.jsonl").read_text().splitlines():
        title, _, body = json.loads(line)["contents"].partition("\n")
        for word in set(re.findall(r"\w+", body)):
            exact[word].append((title.strip('"'), body))
        for word in {w.lower() for w in re.findall(r"\w+", body)}:
            lower[word].append((title.strip('"'), body))
    with sqlite3.connect(sample_kb / "pages.sqlite") as con:
        pages = dict(con.execute("select title, contents from pages"))
    return exact, lower, pages


def test_every_kind_is_there_on_every_side_and_articles_never_cross(task):
    sides, printed = task
    for name in SIDES:
        kinds = Counter(r["kind"] + ("+page" if r.get("needs_page") else "") for r in sides[name])
        assert min(kinds[k] for k in ("read", "read+page", "both", "none")) >= 15, (name, kinds)
        assert printed["questions"][name] == dict(kinds)
    titles = [{r["title"] for r in sides[name]} for name in SIDES]
    assert not (titles[0] & titles[1] or titles[0] & titles[2] or titles[1] & titles[2])
    assert len(titles[2]) >= 25  # enough held-out articles for an error clustered by article


def test_read_questions_need_the_page_exactly_when_the_result_hides_the_word(task, sample_kb):
    _, lower, pages = kb_texts(sample_kb)
    for row in (r for side in task[0].values() for r in side if r["kind"] == "read"):
        word, (answer,) = row["word"], row["golden_answers"]
        assert row["question"] == f"Word after {word}?"
        holding = lower[word.lower()]
        assert len(holding) == 1 and holding[0][0] == row["title"], (word, len(holding))  # one passage in the KB
        body = holding[0][1]
        found = re.search(rf"\b{word}[ ,;:]{{1,2}}{answer}\b", body)
        assert found, (word, answer)  # the answer is the word that follows
        assert row["needs_page"] == (found.end() > DOC_CHARS), row
        if row["needs_page"]:  # the page's first chunk shows it
            assert re.search(rf"\b{word}[ ,;:]{{1,2}}{answer}\b", pages[row["title"]][:PAGE_CHARS]), row


def test_both_questions_need_two_searches(task, sample_kb):
    from local_retriever.kb import KnowledgeBase

    exact, _, _ = kb_texts(sample_kb)
    rows = [r for side in task[0].values() for r in side if r["kind"] == "both"]
    kb = KnowledgeBase(sample_kb, "bm25")
    try:

        def top(queries, k):
            return [[row["title"] for row, _ in kb.rows(found)] for found in kb.search(queries, k)]

        whole = top([r["question"] for r in rows], 1)
        each = top([w for r in rows for w in r["words"]], 2)
    finally:
        kb.close()
    for i, row in enumerate(rows):
        (answer,) = row["golden_answers"]
        articles = []
        for word in row["words"]:
            holding = [title for title, _ in exact[word]]
            assert len(holding) == 2 and len(set(holding)) == 2, (word, holding)  # two passages, two articles
            articles.append(set(holding))
        assert articles[0] & articles[1] == {answer}
        assert whole[i] != [answer]  # one search for the whole question does not find it first
        assert answer in each[2 * i] and answer in each[2 * i + 1]  # a search for each word shows it


def test_none_questions_hold_their_answer_and_searching_costs(task):
    sys.path.insert(0, str(ROOT))
    from benchmarks.decision_reward import score

    for row in (r for side in task[0].values() for r in side if r["kind"] == "none"):
        assert row["question"] == f"Echo {row['golden_answers'][0]}?"
    counters = {"invalid_actions": 0, "searches": 0, "accesses": 0}
    assert score("Echo Royalists?", "Royalists", ["Royalists"], counters) == 1.0
    assert score("Echo Royalists?", "Royalists", ["Royalists"], {**counters, "searches": 1}) == pytest.approx(0.95)
    searched_and_read = {**counters, "searches": 1, "accesses": 1}
    assert score("Word after Grammy?", "Awards", ["Awards"], searched_and_read) == pytest.approx(0.9)
    assert score("Echo Royalists?", "Royalists", ["Royalists"], {**counters, "invalid_actions": 1}) == 0.0
    assert score("Echo Royalists?", None, ["Royalists"], counters) == 0.0
    # a `read` answer stated as a phrase, "WORD next" (the teacher's --read-phrase): its rest is scored; WORD alone,
    # the question's own word, earns nothing
    assert score("Word after Grammy?", "Grammy Awards", ["Awards"], searched_and_read) == pytest.approx(0.9)
    assert score("Word after Grammy?", "Grammy", ["Awards"], searched_and_read) == 0.0
    # a wrong answer scores 0 whatever it searched: the cost is a share of what the answer earned, so a group whose
    # answers are all wrong has no spread to teach "search less" with
    assert score("Word after Grammy?", "Trophy", ["Awards"], {**counters, "searches": 3}) == 0.0
    assert score("Word after Grammy?", "Trophy", ["Awards"], counters) == 0.0
    assert score("Echo Royalists?", "Royalists Royalists", ["Royalists"], counters) == pytest.approx(2 / 3)
    # an echo stated after its cue, "Echo WORD" (the teacher's --cue-copies): its rest is scored; "Echo" alone is not
    assert score("Echo Royalists?", "Echo Royalists", ["Royalists"], counters) == 1.0
    assert score("Echo Royalists?", "Echo", ["Royalists"], counters) == 0.0
    # on another kind "Echo" is not a cue: F1 2/3, less a tenth of it for a search and a page read
    assert score("Word after Grammy?", "Echo Awards", ["Awards"], searched_and_read) == pytest.approx(0.6)


def test_the_warm_start_side_capped_per_kind_spans_the_articles():
    """`--warm-per-kind N`: at most N of each kind (`read` needing the page its own), taken round the articles, so an
    article with many questions of a kind does not crowd out the others."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.decision_task import per_kind

    rows = [{"id": f"{t}{i}", "kind": "read", "title": t, "needs_page": False} for t in "AB" for i in range(5)]
    rows += [{"id": "P", "kind": "read", "title": "C", "needs_page": True}, {"id": "N", "kind": "none", "title": "A"}]
    kept = per_kind(rows, 3)
    assert [r["id"] for r in kept] == ["A0", "B0", "A1", "P", "N"]


@pytest.fixture(scope="module")
def bm25_server(sample_kb):
    """The sample KB served with BM25, as the task's questions were checked."""
    from local_retriever.kb import KnowledgeBase
    from local_retriever.server import create_app
    from tests.helpers import serve_app

    kb = KnowledgeBase(sample_kb, "bm25")
    try:
        with serve_app(create_app(kb)) as url:
            yield url
    finally:
        kb.close()


@pytest.mark.parametrize("cue_copies", [False, True], ids=["plain", "cued"])
def test_the_teacher_makes_each_kinds_decisions_with_its_share_of_mistakes(
    task, tiny_model, bm25_server, tmp_path, cue_copies
):
    """The scripted teacher through the real agent and eval runner, its searches and page reads served over HTTP:
    per kind, the tools a careful searcher uses, and about a quarter of the decisions wrong on purpose. Cued
    (`--cue-copies`), the echo is "Echo WORD" and the `both` searches "with W1" and "and W2", scored the same."""
    import asyncio

    from transformers import AutoTokenizer

    sys.path.insert(0, str(ROOT))
    from asearcher_plugin.eval.runner import run_eval
    from asearcher_plugin.settings.config import AgentConfig
    from benchmarks.decision_behaviour import task_f1
    from benchmarks.decision_teacher import DecisionTeacher, kind_of

    config = AgentConfig.model_validate(
        {
            "agent_type": "asearcher",
            "max_turns": 4,
            "max_new_tokens_per_turn": 96,
            "tools": {"topk": 2, "max_doc_chars": DOC_CHARS, "page_chunk_chars": PAGE_CHARS,
                      "local": {"urls": [bm25_server]}},
            "reward": {"metric": "f1", "function": "benchmarks.decision_reward:score"},
        }
    )  # fmt: skip
    items = [{**r, "dataset": "decide"} for r in task[0]["heldout"]]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    teacher = DecisionTeacher(tokenizer, cue_copies=cue_copies)
    out = asyncio.run(run_eval(items, config, teacher, tokenizer, tmp_path, k=2, max_length=2048))
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    kinds = {r["question"]: r["kind"] + ("+page" if r.get("needs_page") else "") for r in items}
    by = {k: [r for r in rows if kinds[r["question"]] == k] for k in set(kinds.values())}

    by_question = {r["question"]: r for r in items}

    def mean(kind, what):  # F1 as the task scores it: a cued answer's rest (decision_behaviour.task_f1)
        values = [r["logs"][what] if what in r["logs"] else task_f1(r, by_question[r["question"]]) for r in by[kind]]
        return sum(values) / len(values)

    assert all(r["status"] == "ok" and r["logs"]["invalid_actions"] == 0 for r in rows)
    assert mean("none", "searches") < 0.45 and mean("none", "f1") == 1.0  # a needless search is the mistake
    assert mean("read", "searches") == 1.0 and 0.05 < mean("read", "accesses") < 0.45  # a needless page, by mistake
    assert mean("read", "f1") > 0.9
    assert mean("read+page", "accesses") > 0.55 and mean("read+page", "f1") > 0.55  # guessing is the mistake
    assert 1.55 < mean("both", "searches") < 1.95 and mean("both", "f1") > 0.7  # one search of two, by mistake
    # the reward charges every tool call: a needless search costs an echo 0.05
    searched = [r["reward"] for r in by["none"] if r["logs"]["searches"] == 1]
    assert searched and searched == pytest.approx([0.95] * len(searched))
    echoes = {r["answer"].split()[0] == "Echo" for r in by["none"]}
    written = [re.findall(r"<search> (.*?)</search>", r["text"].partition("Assistant:")[2]) for r in by["both"]]
    queries = {q.split()[0] for qs in written for q in qs}
    assert echoes == {cue_copies} and (queries <= {"with", "and"}) == cue_copies
    # cued, no think text names a word of the question (a copy with no cue: the student garbled those) and a
    # needless search before an echo is cued too
    named = {
        any(word in thought for word in kind_of(r["question"])[1])
        for r in rows
        for thought in re.findall(r"<think>(.*?)</think>", r["text"].partition("Assistant:")[2], re.S)
    }
    assert (True in named) != cue_copies
    searched_echoes = [
        q for r in by["none"] for q in re.findall(r"<search> (.*?)</search>", r["text"].partition("Assistant:")[2])
    ]
    assert searched_echoes and {q.split()[0] == "Echo" for q in searched_echoes} == {cue_copies}
    assert all(r["reward"] > 0.9 for r in by["none"] if r["logs"]["searches"] == 0)  # the cue is not scored
    # no space before a closing tag: the student's tokenizer writes it as a lone token that came to mean "close now"
    actions = "".join(r["text"].partition("Assistant:")[2] for r in rows)
    assert "</search>" in actions and "</access>" in actions and "</answer>" in actions
    assert not re.search(r"\s</(search|access|answer)>", actions)
