"""report.html in a real headless Chromium: it loads, shows the metrics and every trajectory."""

import json
import subprocess

import pytest

from asearcher_plugin.eval.runner import write_reports
from tests.helpers import CHROMIUM, CHROMIUM_FLAGS

pytestmark = [pytest.mark.browser]


def rows():
    out = []
    for i in range(3):
        for seed in range(2):
            out.append(
                {
                    "id": f"q{i}",
                    "dataset": "sample",
                    "seed": seed,
                    "question": f"Question <{i}> & more?",
                    "golden_answers": ["Luanda"],
                    "status": "ok",
                    "answer": "Luanda" if i else "Lisbon",
                    "reward": 1.0 if i else 0.0,
                    "truncated": False,
                    "tokens": 120,
                    "text": f"<think>look it up</think><search>capital {i}</search>\n\n"
                    "<information>Doc 1(Title: Angola) "
                    "The capital is Luanda.</information>\n\n<answer>Luanda</answer>",
                    "logs": {
                        "turns": 2.0,
                        "searches": 1.0,
                        "accesses": 0.0,
                        "invalid_actions": 0.0,
                        "tool_errors": 0.0,
                    },
                    "scores": {"f1": 1.0 if i else 0.0, "em": 1.0 if i else 0.0},
                }
            )
    out.append(
        {
            "id": "q9",
            "dataset": "sample",
            "seed": 0,
            "question": "x",
            "golden_answers": ["y"],
            "status": "failed",
            "error": "EngineUnavailable: no completion server answered",
        }
    )
    return out


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is installed by scripts/test.sh")
def test_report_renders_in_headless_chromium(tmp_path):
    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows()))
    metrics = write_reports(tmp_path, k=2)
    assert metrics["items_ok"] == 6 and metrics["items_failed"] == 1
    url = (tmp_path / "report.html").resolve().as_uri()
    profile = tmp_path / "profile"
    dom = subprocess.run(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-1500:]
    html = dom.stdout
    assert 'id="metrics"' in html and html.count('class="traj"') == 6 and "FAILED" in html
    assert "Question &lt;1&gt; &amp; more?" in html  # text is escaped, not injected
    assert "Uncaught" not in dom.stderr and "Failed to load resource" not in dom.stderr
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            "--window-size=1200,1600",
            url,
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
