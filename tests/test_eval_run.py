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
    assert html.count('class="traj"') == 7 and "data:image/png;base64," in html  # 6, and one open near the top
    assert html.count('class="traj" open') == 1

    # A re-run skips every finished (question, seed): nothing new is appended.
    again = run(*common, "--hf-model", str(tiny_model))
    assert again.returncode == 0 and len((out / "trajectories.jsonl").read_text().splitlines()) == 6

    # Other settings in the same folder would mix two runs in one set of metrics: refused in one line, before any
    # item runs, unless asked for.
    other = run(*common, "--hf-model", str(tiny_model), "--temperature", "1.0")
    assert other.returncode == 2 and "Traceback" not in other.stderr
    (line,) = [line for line in other.stderr.splitlines() if "error" in line]
    assert line.startswith(f"error: {out} holds a run with other settings (model.sampling.temperature)")
    assert "--resume-other-settings" in other.stderr
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 6
    mixed = run(*common, "--hf-model", str(tiny_model), "--temperature", "1.0", "--resume-other-settings")
    assert mixed.returncode == 0 and "resuming" in mixed.stderr and "other settings" in mixed.stderr

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
    # ... and a run that scored nothing does not end as a success would
    assert down.returncode == 1, down.stderr[-2000:]
    assert "error: no item was scored: 2 failed for infrastructure reasons" in down.stderr
    assert "Traceback" not in down.stderr
    m = json.loads((dead / "metrics.json").read_text())
    assert m["items_failed"] == 2 and m["items_ok"] == 0 and "FAILED" in (dead / "report.html").read_text()

    # A dead knowledge base is named before the run, with how to start one.
    gone = f"http://127.0.0.1:{free_port()}"
    no_kb = run(
        *("--dataset", "sample", "--limit", "1", "--agent-config", str(cfg), "--max-length", "1024"),
        *("--out", str(tmp_path / "no-kb"), "--kb-url", gone, "--hf-model", str(tiny_model)),
    )
    assert f"warning: no knowledge-base server answers at {gone}" in no_kb.stderr
    assert "asearcher kb serve runs/sample-kb --port 5005" in no_kb.stderr


def test_eval_bad_input_is_named(tmp_path):
    bad = run("--dataset", "nope", "--hf-model", "x")
    assert bad.returncode == 2 and "built-ins are: sample" in bad.stderr
    both = run("--dataset", "sample", "--limit", "1")
    assert (
        both.returncode == 2 and "exactly one of --hf-model, --base-url or --scripted-reference-policy" in both.stderr
    )
