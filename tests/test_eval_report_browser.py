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
    # the 6 trajectories, and above the plots one of them open: a right answer (q1 seed 0, the first of the best)
    assert 'id="metrics"' in html and html.count('class="traj"') == 7 and "FAILED" in html
    assert html.count('class="traj" open') == 1 and html.index('id="example"') < html.index("<h2>Distributions")
    assert "<b>sample/q1</b> seed 0" in html[html.index('id="example"') : html.index("<h2>Distributions")]
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


def test_the_example_is_the_best_scored_then_the_busiest_trajectory():
    from asearcher_plugin.eval.report import example
    from asearcher_plugin.records import EvalRow

    table = rows()
    table[4]["logs"] = {**table[4]["logs"], "accesses": 2.0}  # q2 seed 0: right, and read two pages
    table[1]["logs"] = {**table[1]["logs"], "accesses": 5.0}  # q0 seed 1: busier, but wrong
    chosen = example([EvalRow.from_json(r) for r in table])
    assert (chosen.id, chosen.seed) == ("q2", 0)
    failed_only = [EvalRow.from_json(table[-1])]
    assert example(failed_only) is None
