"""`asearcher eval` item bookkeeping against a scripted model server: dataset-qualified keys,
per-item failures, resuming after a crash."""

import json
import subprocess
import sys
import threading

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from asearcher_plugin.eval.datasets import DatasetError, load_datasets
from tests.http_helpers import free_port, serve_app

TOO_LONG = "TOOLONG"  # a question carrying this makes the model server refuse it, as vLLM does past its context


class ScriptedModel:
    """OpenAI `/v1/completions` that answers each question with the answer scripted for it."""

    def __init__(self, tokenizer, answers: dict[str, str]):
        self.tokenizer, self.answers = tokenizer, answers
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()
        self.app = FastAPI()
        self.app.post("/v1/completions")(self.completions)

    async def completions(self, request: Request):
        body = await request.json()
        prompt = self.tokenizer.decode(body["prompt"])
        question = next((q for q in self.answers if q in prompt), None)
        with self.lock:
            self.calls[question] = self.calls.get(question, 0) + 1
        if question is not None and TOO_LONG in question:
            return JSONResponse(
                {
                    "object": "error",
                    "type": "BadRequestError",
                    "code": 400,
                    "message": "This model's maximum context length is 32768 tokens.",
                },
                status_code=400,
            )
        answer = self.answers.get(question, "unknown")
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": body["model"],
            "choices": [
                {"index": 0, "text": f"<think>known</think> <answer>{answer}</answer>", "finish_reason": "stop"}
            ],
        }


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GAIA = [
    {"id": "test_0", "question": "Which city is the capital of Angola?", "golden_answers": ["Luanda"]},
    {"id": "test_1", "question": "Which ocean lies west of Angola?", "golden_answers": ["Atlantic"]},
]
FRAMES = [
    {"id": "test_0", "question": "Who wrote An American in Paris?", "golden_answers": ["Gershwin"]},
    {"id": "test_1", "question": "Which prize did Einstein get in 1921?", "golden_answers": ["Nobel"]},
]


@pytest.fixture
def model_server(tiny_model):
    from transformers import AutoTokenizer

    answers = {r["question"]: r["golden_answers"][0] for r in GAIA + FRAMES}
    answers[f"Which river {TOO_LONG} crosses Luanda?"] = "Kwanza"
    model = ScriptedModel(AutoTokenizer.from_pretrained(tiny_model), answers)
    with serve_app(model.app) as url:
        model.url = url
        yield model


def run_eval(tmp_path, model, out, datasets=(), k=1, extra=()):
    """`asearcher eval` on `datasets` (and the flags in `extra`) against `model`, in a subprocess."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("agent:\n  agent_type: search-r1\n  max_turns: 2\n")
    args = [a for d in datasets for a in ("--dataset", str(d))] + list(extra)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "asearcher_plugin.cli",
            "eval",
            *args,
            "--k",
            str(k),
            "--out",
            str(out),
            "--agent-config",
            str(cfg),
            "--kb-url",
            f"http://127.0.0.1:{free_port()}",
            "--base-url",
            f"{model.url}/v1",
            "--model",
            "scripted",
            "--tokenizer",
            str(model.tokenizer.name_or_path),
            "--max-length",
            "1024",
            "--concurrency",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


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
