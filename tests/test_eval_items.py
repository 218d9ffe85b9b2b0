"""`asearcher eval` item bookkeeping against a scripted model server: dataset-qualified keys,
per-item failures, resuming after a crash."""

import json

import pytest

from asearcher_plugin.eval.datasets import DatasetError, load_datasets
from tests.helpers import FRAMES, GAIA, TOO_LONG, run_eval, write_jsonl


def rows_of(out):
    return [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]


def test_datasets_sharing_ids_and_file_names_are_kept_apart(tmp_path, model_server):
    gaia = write_jsonl(tmp_path / "GAIA" / "test.jsonl", GAIA)
    frames = write_jsonl(tmp_path / "Frames" / "test.jsonl", FRAMES)
    out = tmp_path / "eval"
    first = run_eval(tmp_path, model_server, out, [gaia, frames], k=2)
    assert first.returncode == 0, first.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["items_ok"] == 8
    assert (
        metrics["datasets"]["GAIA"]["em"]["questions"] == 2 and metrics["datasets"]["Frames"]["em"]["questions"] == 2
    )
    assert metrics["datasets"]["overall"]["em"]["questions"] == 4
    assert metrics["datasets"]["overall"]["em"]["avg@2"] == 1.0
    assert "| GAIA | em | 2 |" in (out / "summary.md").read_text()

    # A crash after the GAIA items were written: the resumed run must still run every Frames item.
    kept = [r for r in rows_of(out) if r["dataset"] == "GAIA"]
    (out / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    before = dict(model_server.calls)
    again = run_eval(tmp_path, model_server, out, [gaia, frames], k=2)
    assert again.returncode == 0, again.stderr[-2000:]
    rows = rows_of(out)
    assert sorted((r["dataset"], r["id"], r["seed"]) for r in rows) == sorted(
        (d, i, s) for d in ("GAIA", "Frames") for i in ("test_0", "test_1") for s in (0, 1)
    )
    for r in FRAMES:
        assert model_server.calls[r["question"]] - before.get(r["question"], 0) == 2
    for r in GAIA:
        assert model_server.calls[r["question"]] == before[r["question"]]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["items_ok"] == 8 and metrics["datasets"]["Frames"]["em"]["questions"] == 2


def test_dataset_names_are_unique_or_refused(tmp_path):
    nq = write_jsonl(tmp_path / "nq.jsonl", GAIA)
    tqa = write_jsonl(tmp_path / "tqa.jsonl", FRAMES)
    items = load_datasets([str(nq), str(tqa)])
    assert {(r["dataset"], r["id"]) for r in items} == {(d, i) for d in ("nq", "tqa") for i in ("test_0", "test_1")}

    a = write_jsonl(tmp_path / "a" / "x" / "test.jsonl", GAIA)
    b = write_jsonl(tmp_path / "b" / "x" / "test.jsonl", FRAMES)
    with pytest.raises(DatasetError) as err:
        load_datasets([str(a), str(b)])
    assert str(a) in str(err.value) and str(b) in str(err.value)
    with pytest.raises(DatasetError, match="nq.jsonl and .*nq.jsonl"):
        load_datasets([str(nq), str(nq)])


def test_duplicate_ids_within_a_dataset_name_both_lines(tmp_path):
    dup = write_jsonl(tmp_path / "dup.jsonl", GAIA + [dict(FRAMES[0], id="test_1")])
    with pytest.raises(DatasetError, match=r"dup.jsonl: id 'test_1' on line 2 and again on line 3"):
        load_datasets([str(dup)])


def test_an_item_the_model_server_refuses_is_recorded_and_the_run_goes_on(tmp_path, model_server):
    rows = GAIA + [
        {"id": "test_2", "question": f"Which river {TOO_LONG} crosses Luanda?", "golden_answers": ["Kwanza"]}
    ]
    data = write_jsonl(tmp_path / "gaia.jsonl", rows)
    out = tmp_path / "eval"
    done = run_eval(tmp_path, model_server, out, [data])
    assert done.returncode == 0, done.stderr[-2000:]
    by_id = {r["id"]: r for r in rows_of(out)}
    assert by_id["test_0"]["status"] == by_id["test_1"]["status"] == "ok"
    refused = by_id["test_2"]
    assert (
        refused["status"] == "error"
        and "HTTP 400" in refused["error"]
        and "maximum context length" in refused["error"]
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["items_ok"] == 2 and metrics["items_error"] == 1 and metrics["items_failed"] == 0
    assert metrics["datasets"]["gaia"]["em"]["questions"] == 2  # not scored as wrong
    assert "1 failed on their own" in (out / "summary.md").read_text()
    html = (out / "report.html").read_text()
    assert html.count('class="error"') == 1 and "maximum context length" in html


def test_resume_after_a_crash_mid_write_keeps_every_row(tmp_path, model_server):
    data = write_jsonl(tmp_path / "gaia.jsonl", [*GAIA, dict(FRAMES[0], id="test_2")])
    out = tmp_path / "eval"
    assert run_eval(tmp_path, model_server, out, [data]).returncode == 0
    path = out / "trajectories.jsonl"
    raw = path.read_bytes()
    last_start = raw.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(raw[: last_start + (len(raw) - last_start) // 2])  # the last row cut mid-JSON, no newline
    cut_id = json.loads(raw[last_start:])["id"]

    again = run_eval(tmp_path, model_server, out, [data])
    assert again.returncode == 0, again.stderr[-2000:]
    lines = path.read_text().splitlines()
    rows = [json.loads(line) for line in lines]  # every line parses
    assert sorted(r["id"] for r in rows) == ["test_0", "test_1", "test_2"]
    assert all(r["status"] == "ok" for r in rows) and any(r["id"] == cut_id for r in rows)
    assert json.loads((out / "metrics.json").read_text())["items_ok"] == 3


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b'{"question": "q", "answer": "a"}\n' + b"[" * 100_000 + b"\n", ":2: JSON nested too deeply"),
        (b'{"question": "q", "answer": "a"}\n{"question": "\xff\xfe", "answer": "a"}\n', ":2: not UTF-8 text"),
        (b'{"question": "q", "answer": NaN}\n', ":1: 'answer' holds [nan]"),
        (b'{"question": "q", "answer": -Infinity}\n', ":1: 'answer' holds [-inf]"),
        (b'{"question": "q", "answer": ' + b"7" * 5000 + b"}\n", ":1: invalid JSON"),
        (b"[" * 100_000, ": JSON nested too deeply"),
    ],
)
def test_a_malformed_dataset_file_is_named_not_a_traceback(tmp_path, content, named):
    """`eval --data-dir` (ASearcher's layout, test.jsonl or test.json): a file anyone wrote fails with its line."""
    from asearcher_plugin.eval.datasets import asearcher_layout

    name = "test.json" if content.startswith(b"[[") else "test.jsonl"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / name).write_bytes(content)
    with pytest.raises(DatasetError) as refused:
        load_datasets([], None, None, None, asearcher_layout(tmp_path, "bad", name.split(".")[0]))
    assert named in str(refused.value) and name in str(refused.value), str(refused.value)
