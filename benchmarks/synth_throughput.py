"""Synthesis throughput against the scripted chat server with a fixed delay per call.

One command: `python benchmarks/synth_throughput.py [--delay 0.1] [--seeds 32]`. The scripted server
(data_synth/scripted_chat.py, in its own process) answers every chat call after `delay` seconds and the sample KB
server (its own process too) serves the injection searches. Each seed takes about a dozen sequential
model calls (seed check, two injections with their validation), so one seed in flight is bounded by
latency; the table shows how the speed grows with the seeds in flight.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme_table import publish  # noqa: E402

KB = Path("runs/sample-kb")


def _serve(port: int, seeds_file: str, delay: float) -> None:
    import uvicorn

    from data_synth.scripted_chat import ScriptedChat

    gold = {json.loads(line)["question"]: json.loads(line)["answer"] for line in open(seeds_file)}
    uvicorn.run(
        ScriptedChat(gold=gold, delay=delay).app, host="127.0.0.1", port=port, log_level="warning", access_log=False
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delay", type=float, default=0.1)
    ap.add_argument("--seeds", type=int, default=32)
    ap.add_argument("--serve", nargs=2, default=None, help=argparse.SUPPRESS)  # internal: PORT SEEDS_FILE
    args = ap.parse_args()
    if args.serve:
        _serve(int(args.serve[0]), args.serve[1], args.delay)
        return

    import httpx

    from data_synth.config import load_synth_config
    from data_synth.run import run_synth
    from local_retriever.build import ensure_sample_kb
    from local_retriever.sample import load_sample_questions
    from local_retriever.server_process import free_port, start_server, wait_healthy, wait_until_up

    ensure_sample_kb(KB)
    questions = load_sample_questions()
    seeds = [
        {
            "id": q["id"],
            "question": q["question"],
            "answer": q["golden_answers"][0],
            "aliases": q["golden_answers"][1:],
        }
        for q in questions[: args.seeds]
    ]
    work = Path(tempfile.mkdtemp())
    seeds_file = work / "seeds.jsonl"
    seeds_file.write_text("".join(json.dumps(s) + "\n" for s in seeds))
    kb_port, llm_port = free_port(), free_port()
    kb_url, llm_url = f"http://127.0.0.1:{kb_port}", f"http://127.0.0.1:{llm_port}"
    kb = start_server(KB, kb_port, "hybrid")
    llm = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(llm_port), str(seeds_file), "--delay", str(args.delay)]
    )
    rows, payload = [], {}
    try:
        wait_healthy(kb_url, kb)
        wait_until_up(llm, lambda: httpx.get(llm_url, timeout=2), "scripted chat server", timeout=20)
        base = None
        for conc in (1, 8, 32):
            n = 8 if conc == 1 else args.seeds
            cfg = load_synth_config(
                None,
                {
                    "generator.base_urls": [llm_url + "/v1"],
                    "judge.base_urls": [llm_url + "/v1"],
                    "tools.local.urls": [kb_url],
                    "k": 4,
                    "rounds": 4,
                    "concurrency": conc,
                },
            )
            out = work / f"c{conc}"
            start = time.perf_counter()
            stats = run_synth(seeds[:n], cfg, out, progress=False)
            seconds = time.perf_counter() - start
            calls = sum(v["calls"] for v in stats["tokens"]["by_stage"].values())
            rate = n / seconds * 60
            base = base or rate
            payload[conc] = {
                "seeds": n,
                "seconds": seconds,
                "seeds_per_min": rate,
                "calls": calls,
                "emitted": stats["emitted"],
            }
            rows.append([conc, n, calls, stats["emitted"], f"{seconds:.1f}", f"{rate:.1f}", f"{rate / base:.1f}x"])
    finally:
        llm.terminate()
        kb.terminate()
        shutil.rmtree(work)
    note = (
        f"every chat call answers after {args.delay * 1000:.0f} ms (scripted server, own process); injection "
        "searches go to the sample KB server (hybrid, own process); k = 4 tool-free answers, up to 4 rounds; "
        "all on the same 2 cores"
    )
    print(
        publish(
            "synth_throughput",
            ["seeds in flight", "seeds", "model calls", "emitted", "seconds", "seeds/min", "speed-up"],
            rows,
            note,
            payload,
        )
    )


if __name__ == "__main__":
    main()
