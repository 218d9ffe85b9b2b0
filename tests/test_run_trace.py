"""benchmarks/run_trace.py on a run folder whose numbers are worked out by hand."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_trace_of_a_run_folder(tmp_path):
    run = tmp_path / "streaming"
    _write(run / "ckpt" / "cpu_harness_fits.jsonl", [{"started": 110, "time": 120}, {"started": 130, "time": 140}])
    _write(run / "engines" / "engine-1.jsonl", [[100, 110], [110, 130]])
    _write(run / "engines" / "engine-2.jsonl", [[100, 105]])
    group = {"index": 3, "admitted_version": 1, "turn_versions": [[0, 0], [0]]}
    _write(run / "trace.jsonl", [{"time": 125, "train_version": 1, "groups": [group]}])
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run_trace.py"), str(run)], capture_output=True, text=True
    ).stdout.splitlines()
    # span 100-140 s; the engines busy 30 + 5 of 80 engine-seconds; during the updates (110-120, 130-140) engine 1
    # idles 10 s and engine 2 20 s; the trainer 20 of 40 s
    assert out[0].endswith("span 40 s, 2 updates")
    assert out[1] == "  updates (s from the first request): 10-20, 30-40"
    assert out[2] == "  engines idle 56% of the span, 15 s an engine during updates; the trainer busy 50% of it"
    # tenths of 4 s: both busy; engine 2 busy 1 of 4 s (3 of 8 idle); engine 1 alone to 30 s; then 2 of 8 s; none
    assert out[3] == "  engines idle by tenth of the span: 0% 38% 50% 50% 50% 50% 50% 75% 100% 100%"
    # group 3 entered at version 1 (the first update's end, 20 s) and its batch left at 25 s after 2 calls
    assert out[4] == (
        "  longest trajectory: 2 model calls, group 3 admitted at version 1 (~20 s), "
        "its batch handed over at 25 s: 2.50 s a call"
    )
    # engine 2 is done at 5 s; engine 1's call from 10 to 30 s ran alone
    assert out[5] == "  1 model calls with the other engines done: median 20.00 s"
