"""Evaluation throughput against a local OpenAI-compatible server that answers after a fixed delay.

One command: `python benchmarks/eval_throughput.py [--delay 0.25] [--items 128]`. The server replies
to every /v1/completions call with `<answer>...</answer>` after `delay` seconds, so the ideal rate
at concurrency c is c / delay questions per second; the table shows how close the harness gets
(agent loop, tokenization, scoring, JSONL writes and the report included).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme_table import publish  # noqa: E402


def fake_server(delay: float):
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(body: dict):
        await asyncio.sleep(delay)
        return {
            "id": "x",
            "choices": [{"index": 0, "text": "<think>known</think> <answer>Luanda</answer>", "finish_reason": "stop"}],
        }

    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delay", type=float, default=0.25)
    ap.add_argument("--items", type=int, default=512)
    ap.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)  # internal: run the fake server
    args = ap.parse_args()
    if args.serve:
        import uvicorn

        uvicorn.run(fake_server(args.delay), host="127.0.0.1", port=args.serve, log_level="warning", access_log=False)
        return

    import subprocess

    import httpx
    from transformers import AutoTokenizer

    from asearcher_plugin.engines.openai import OpenAIEngine
    from asearcher_plugin.engines.tiny_model import ensure_tiny_model
    from asearcher_plugin.eval.datasets import load_dataset
    from asearcher_plugin.eval.runner import run_eval
    from asearcher_plugin.settings.config import AgentConfig
    from local_retriever.server_process import free_port, wait_until_up

    model = ensure_tiny_model("runs/tiny-model")
    tok = AutoTokenizer.from_pretrained(model)
    base = load_dataset("sample")
    items = [dict(base[i % len(base)], id=f"{base[i % len(base)]['id']}-{i}") for i in range(args.items * 4)]
    config = AgentConfig(agent_type="search-r1", max_turns=2)
    rows, payload = [], {}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The fake model server runs in its own process, as a real one would, not on the harness's event loop.
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--delay", str(args.delay)])
    try:
        wait_until_up(
            server, lambda: httpx.post(f"{url}/v1/completions", json={}, timeout=5), "fake model server", timeout=20
        )
        for conc in (1, 8, 64):
            n = {1: 16, 8: args.items}.get(conc, args.items * 4)  # enough waves to amortise the fixed report cost
            out = Path(tempfile.mkdtemp())
            engine = OpenAIEngine(f"{url}/v1", "fake", tok)
            start = time.perf_counter()
            asyncio.run(run_eval(items[:n], config, engine, tok, out, k=1, concurrency=conc, progress=False))
            seconds = time.perf_counter() - start
            shutil.rmtree(out)
            qpm, ideal = n / seconds * 60, conc / args.delay * 60
            payload[conc] = {"items": n, "seconds": seconds, "questions_per_min": qpm, "ideal_per_min": ideal}
            rows.append([conc, n, f"{qpm:.0f}", f"{ideal:.0f}", f"{qpm / ideal:.0%}"])
    finally:
        server.terminate()
    note = (
        f"each model call answers after {args.delay * 1000:.0f} ms; one call per question (the answer comes on the "
        "first turn); the fake server is a separate process on the same 2 cores; wall time includes writing "
        "trajectories, metrics.json, summary.md and report.html"
    )
    print(
        publish(
            "eval_throughput",
            ["concurrency", "questions", "questions/min", "ideal/min", "of ideal"],
            rows,
            note,
            payload,
        )
    )


if __name__ == "__main__":
    main()
