"""The decision task's behaviour summary, on trajectories written by hand."""

from __future__ import annotations

import json

import pytest

from benchmarks.decision_behaviour import load, summarise

ITEMS = {
    "r1": {"id": "r1", "kind": "read", "title": "Angola", "needs_page": True},
    "r2": {"id": "r2", "kind": "read", "title": "Angola", "needs_page": False},
    "r3": {
        "id": "r3",
        "kind": "read",
        "title": "Grammy",
        "needs_page": False,
        "question": "Word after Grammy?",
        "golden_answers": ["Awards"],
    },
    "b1": {"id": "b1", "kind": "both", "title": "Actrius"},
    "n1": {"id": "n1", "kind": "none", "title": "Algeria"},
}


def row(qid: str, seed: int, f1: float, searches: int, accesses: int, turns: int, invalid: int = 0, status="ok",
        answer=None):  # fmt: skip
    logs = {"searches": searches, "accesses": accesses, "turns": turns, "invalid_actions": invalid}
    return {"id": qid, "seed": seed, "status": status, "scores": {"f1": f1}, "logs": logs, "answer": answer}


ROWS = [
    row("r1", 0, 1.0, 1, 1, 3),  # needed the page, read it
    row("r1", 1, 0.0, 1, 0, 2),  # needed it, guessed
    row("r2", 0, 1.0, 1, 1, 3),  # the result showed the word: a wasted read
    row("r2", 1, 1.0, 1, 1, 3, invalid=1),  # and again
    row("b1", 0, 1.0, 2, 0, 3),  # searched each word
    row("b1", 1, 0.0, 1, 0, 2),  # answered after one search
    row("n1", 0, 1.0, 0, 0, 1),
    row("n1", 1, 1.0, 1, 0, 2),
    row("n1", 2, 0.0, 0, 0, 1, status="failed"),  # the infrastructure's failure: not counted
]


def test_each_kind_reports_the_decisions_it_tests():
    out = summarise(ROWS, ITEMS)
    assert set(out) == {"all", "read", "both", "none"}
    read, both, none, every = out["read"], out["both"], out["none"], out["all"]
    assert read["trajectories"] == 4 and read["f1"] == 0.75
    assert read["reads_when_needed"] == 0.5 and read["reads_when_not"] == 1.0
    assert read["searches"] == 1 and read["page_reads"] == 0.75
    assert read["valid_actions"] == 1 - 1 / 11  # one invalid action in 3 + 2 + 3 + 3 turns
    assert both["second_search"] == 0.5 and both["f1"] == 0.5
    assert none["trajectories"] == 2 and none["searches"] == 0.5 and none["f1"] == 1.0
    assert every["trajectories"] == 8 and every["f1"] == pytest.approx(6 / 8)
    # per question: the mean over its seeds and its article, for the interval resampled by article
    assert read["questions"] == {"r1": (0.5, "Angola"), "r2": (1.0, "Angola")}
    assert "reads_when_needed" not in both and "second_search" not in read


def test_a_read_answer_stated_as_a_phrase_is_scored_on_its_rest():
    """ "Grammy Awards" for `Word after Grammy?`: the agent's plain F1 gives it 2/3; the task scores "Awards", 1."""
    rows = [row("r3", 0, 2 / 3, 1, 0, 2, answer="Grammy Awards"), row("r3", 1, 0.0, 1, 0, 2, answer="Grammy")]
    out = summarise(rows, ITEMS)
    assert out["read"]["f1"] == 0.5 and out["read"]["questions"] == {"r3": (0.5, "Grammy")}


def test_a_kind_without_trajectories_is_left_out_and_an_unknown_question_is_refused():
    assert set(summarise(ROWS[:4], ITEMS)) == {"all", "read"}
    with pytest.raises(ValueError, match="not in the task's rows, e.g. 'x9'"):
        summarise([*ROWS, row("x9", 0, 1.0, 0, 0, 1)], ITEMS)


def test_it_reads_an_eval_folder_and_the_task_rows(tmp_path):
    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps(i) + "\n" for i in ITEMS.values()))
    rows, items = load(tmp_path, tmp_path / "heldout.jsonl")
    assert summarise(rows, items) == summarise(ROWS, ITEMS)


def test_the_command_prints_one_row_per_kind_with_each_kinds_decisions(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps(i) + "\n" for i in ITEMS.values()))
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "decision_behaviour.py"
    out = subprocess.run([sys.executable, str(script), str(tmp_path), str(tmp_path / "heldout.jsonl")],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    lines = out.strip().splitlines()
    assert lines[0].startswith("| kind | trajectories | F1 | searches | page reads | pages read: needed / not |")
    cells = {line.split(" | ")[0].strip("| "): line.strip("|").split("|") for line in lines[2:]}
    assert list(cells) == ["all", "read", "both", "none"]
    assert [c.strip() for c in cells["read"]] == ["read", "4", "0.750", "1.00", "0.75", "0.50 / 1.00", "", "0.91"]
    assert [c.strip() for c in cells["both"]][5:7] == ["", "0.50"]
    assert [c.strip() for c in cells["none"]][1:3] == ["2", "1.000"]
