"""Evaluation dataset formats and their errors."""

import json

import pytest

from asearcher_plugin.eval.datasets import DatasetError, load_dataset


def test_builtin_sample():
    rows = load_dataset("sample")
    assert len(rows) >= 60 and rows[0]["dataset"] == "sample" and rows[0]["golden_answers"]


def test_flashrag_asearcher_and_custom_keys(tmp_path):
    (tmp_path / "nq.jsonl").write_text(
        json.dumps({"id": "test_0", "question": "who?", "golden_answers": ["A", "B"]}) + "\n"
    )
    (tmp_path / "as.jsonl").write_text(json.dumps({"question": "what?", "answer": "C"}) + "\n\n")
    (tmp_path / "own.jsonl").write_text(json.dumps({"q": "when?", "a": ["1999"]}) + "\n")
    assert load_dataset(str(tmp_path / "nq.jsonl"))[0] == {
        "id": "test_0",
        "question": "who?",
        "golden_answers": ["A", "B"],
        "dataset": "nq",
    }
    assert load_dataset(str(tmp_path / "as.jsonl"))[0]["golden_answers"] == ["C"]
    assert load_dataset(str(tmp_path / "own.jsonl"), question_key="q", answer_key="a")[0]["question"] == "when?"


def test_errors_name_file_line_and_choices(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "ok", "answer": "x"}) + "\n" + json.dumps({"question": "no answer"}) + "\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: no answer field"):
        load_dataset(str(bad))
    with pytest.raises(DatasetError, match="built-ins are: sample"):
        load_dataset("hotpotqa-that-is-not-here")
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{nope\n")
    with pytest.raises(DatasetError, match="broken.jsonl:1: invalid JSON"):
        load_dataset(str(broken))


def test_parquet_with_named_keys(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"id": ["a", "b"], "prompt": ["one?", "two?"], "target": [["1"], ["2", "II"]]}),
        tmp_path / "set.parquet",
    )
    rows = load_dataset(str(tmp_path / "set.parquet"), question_key="prompt", answer_key="target")
    assert [r["golden_answers"] for r in rows] == [["1"], ["2", "II"]] and rows[0]["dataset"] == "set"


def test_json_array_and_gt_answers(tmp_path):
    # ASearcher's `test.json` holds one JSON array; `gt` is its other answer key.
    path = tmp_path / "frames.json"
    path.write_text(
        json.dumps([{"question": "who?", "gt": ["A"]}, {"id": "q2", "question": "what?", "answer": "B"}], indent=1)
    )
    rows = load_dataset(str(path))
    assert [(r["id"], r["golden_answers"], r["dataset"]) for r in rows] == [
        ("frames_1", ["A"], "frames"),
        ("q2", ["B"], "frames"),
    ]
    path.write_text(json.dumps({"question": "who?", "answer": "A"}) + "\n")  # a .json file holding JSONL rows
    assert load_dataset(str(path))[0]["golden_answers"] == ["A"]
