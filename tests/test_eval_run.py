"""`asearcher eval` end to end on CPU: tiny model, real KB server, resume, failures kept apart, reports."""

import json
import subprocess
import sys

from tests.helpers import free_port


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "asearcher_plugin.cli", "eval", *args], capture_output=True, text=True, timeout=900
    )


def test_eval_writes_metrics_reports_and_resumes(tmp_path, tiny_model, kb_server):
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("agent:\n  agent_type: asearcher\n  max_turns: 2\n  max_new_tokens_per_turn: 16\n")
    out = tmp_path / "eval"
    common = [
        "--dataset",
        "sample",
        "--limit",
        "3",
        "--k",
        "2",
        "--out",
        str(out),
        "--agent-config",
        str(cfg),
        "--kb-url",
        kb_server,
        "--max-length",
        "1024",
    ]
    first = run(*common, "--hf-model", str(tiny_model))
    assert first.returncode == 0, first.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)
    metrics = json.loads((out / "metrics.json").read_text())
    f1 = metrics["datasets"]["sample"]["f1"]
    assert f1["questions"] == 3 and 0 <= f1["avg@2"] <= f1["pass@2"] <= 1 and len(f1["pass@2_ci95"]) == 2
    assert metrics["datasets"]["overall"]["distributions"]["turns"]["max"] <= 2
    assert "| sample | f1 | 3 |" in (out / "summary.md").read_text()
    html = (out / "report.html").read_text()
    assert html.count('class="traj"') == 6 and "data:image/png;base64," in html

    # A re-run skips every finished (question, seed): nothing new is appended.
    again = run(*common, "--hf-model", str(tiny_model))
    assert again.returncode == 0 and len((out / "trajectories.jsonl").read_text().splitlines()) == 6

    # A dead model server: items are recorded as failed, not scored as wrong.
    dead = tmp_path / "dead"
    down = run(
        "--dataset",
        "sample",
        "--limit",
        "2",
        "--out",
        str(dead),
        "--agent-config",
        str(cfg),
        "--kb-url",
        kb_server,
        "--base-url",
        f"http://127.0.0.1:{free_port()}/v1",
        "--model",
        "tiny",
        "--tokenizer",
        str(tiny_model),
    )
    assert down.returncode == 0, down.stderr[-2000:]
    m = json.loads((dead / "metrics.json").read_text())
    assert m["items_failed"] == 2 and m["items_ok"] == 0 and "FAILED" in (dead / "report.html").read_text()


def test_eval_bad_input_is_named(tmp_path):
    bad = run("--dataset", "nope", "--hf-model", "x")
    assert bad.returncode == 2 and "built-ins are: sample" in bad.stderr
    both = run("--dataset", "sample", "--limit", "1")
    assert (
        both.returncode == 2 and "exactly one of --hf-model, --base-url or --scripted-reference-policy" in both.stderr
    )
