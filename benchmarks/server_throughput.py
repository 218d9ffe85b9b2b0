"""Server throughput at 1, 8 and 64 closed-loop clients: ours vs one-at-a-time, against the in-process ceiling.

One command: `python benchmarks/server_throughput.py [--passages 200000] [--clients 1,8,64] [--seconds 20]`.
The index holds random unit vectors (one per passage, FAISS Flat) and the rows repeat sample-KB passages:
throughput depends on index size and encoder, not on what the text says. Both servers (ours, and
benchmarks/baseline_server.py, which searches each request alone under one lock as ASearcher's server does)
open the same knowledge-base folder with the same encoder (all-MiniLM-L6-v2, fp32) and index, and are up
together; the load alternates between them, one client count at a time, so both see the same background load.
Each client sends one distinct question per request (topk 5, scores and rows returned) and the next as
soon as the answer arrives. The ceiling is what the same machine does with no HTTP at all: the 2,000
questions encoded and searched in batches of 128 inside this process (the better of encode-then-search
and the server's two overlapped stages). For our server, /health's stage timings before and after each run
split a request's time into waiting for the encoder, encoding, waiting for the search stage, searching
(with row reads), and the rest (HTTP, JSON, the load generator).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import faiss
import httpx
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme_table import publish  # noqa: E402
from local_retriever.batcher import MicroBatcher  # noqa: E402
from local_retriever.build import BuildOptions, build_kb, ensure_sample_kb  # noqa: E402
from local_retriever.kb import KnowledgeBase  # noqa: E402
from local_retriever.manifest import MANIFEST_FILE, Manifest  # noqa: E402
from local_retriever.sample import load_sample_questions  # noqa: E402
from local_retriever.server_process import free_port, wait_healthy  # noqa: E402
from local_retriever.threads import split_threads, stage_threads, use_encoder_threads, use_search_threads  # noqa: E402

TOPK = 5
HEADER = [
    "clients",
    "server",
    "queries/s",
    "vs one-at-a-time",
    "of ceiling",
    "p50 ms",
    "p99 ms",
    "errors",
    "batch",
    "queued / encode / to search / search+rows / rest ms",
    "target",
]
TARGETS = {1: ("of one-at-a-time", 1.0), 8: ("of ceiling", 0.60), 64: ("of ceiling", 0.90)}


def make_kb(out: Path, passages: int, factory: str) -> Path:
    if (out / MANIFEST_FILE).is_file() and Manifest.load(out).passages == passages:
        return out
    sample = ensure_sample_kb(Path("runs/sample-kb"))
    texts = (sample / "passages.jsonl").read_bytes().splitlines()
    out.parent.mkdir(parents=True, exist_ok=True)
    corpus = out.parent / f"corpus_{passages}.jsonl"
    with open(corpus, "wb") as fh:
        for i, line in zip(range(passages), itertools.cycle(texts)):
            row = json.loads(line)
            row["id"] = str(i)
            fh.write(json.dumps(row).encode() + b"\n")
    rng = np.random.default_rng(0)
    index = faiss.index_factory(384, factory, faiss.METRIC_INNER_PRODUCT)
    for start in range(0, passages, 50_000):
        x = rng.standard_normal((min(50_000, passages - start), 384)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        index.add(x)
    faiss.write_index(index, str(out.parent / f"index_{passages}.faiss"))
    build_kb(
        corpus, out, opts=BuildOptions(bm25=False, import_faiss=out.parent / f"index_{passages}.faiss", force=True)
    )
    return out


def distinct_questions(n: int) -> list[str]:
    """The sample questions, then the opening words of sample passages: `n` distinct queries of question length."""
    out = dict.fromkeys(q["question"] for q in load_sample_questions())
    sample = ensure_sample_kb(Path("runs/sample-kb"))
    for line in (sample / "passages.jsonl").read_bytes().splitlines():
        if len(out) >= n:
            break
        text = json.loads(line)["contents"].split("\n", 1)[-1]
        words = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].split()[:12]
        if len(words) >= 4:
            out.setdefault(" ".join(words))
    return list(out)[:n]


async def load(url: str, clients: int, seconds: float, queries: list[str], offset: int = 0) -> dict:
    # aiohttp rather than httpx: the load generator shares the machine's cores with the server,
    # and the lighter client leaves more of them to the server being measured.
    import aiohttp

    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def client(c: int, http: aiohttp.ClientSession):
        nonlocal errors
        for i in itertools.count():
            if time.perf_counter() > stop:
                return
            q = queries[(offset + c * 997 + i * 31) % len(queries)]
            t = time.perf_counter()
            try:
                async with http.post(
                    f"{url}/retrieve", json={"queries": [q], "topk": TOPK, "return_scores": True}
                ) as r:
                    body = await r.read()
                    ok = r.status == 200 and len(json.loads(body)["result"][0]) == TOPK
            except (aiohttp.ClientError, asyncio.TimeoutError):
                ok = False
            if not ok:
                errors += 1
                continue
            latencies.append(time.perf_counter() - t)

    conn = aiohttp.TCPConnector(limit=clients + 8)
    start = time.perf_counter()
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as http:
        await asyncio.gather(*(client(c, http) for c in range(clients)))
    wall = time.perf_counter() - start
    lat = np.array(latencies or [float("nan")]) * 1000
    return {
        "queries": len(latencies),
        "errors": errors,
        "seconds": wall,
        "qps": len(latencies) / wall,
        "mean_ms": float(np.mean(lat)),
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
    }


def ceiling(kb_dir: Path, queries: list[str], batch: int = 128) -> dict:
    """Queries/s with no HTTP: encode + search (+ row reads) in batches inside this process, two ways."""
    kb = KnowledgeBase(kb_dir, "dense")
    out = {}

    def sequential():
        threads = os.cpu_count() or 1
        use_encoder_threads(threads)
        use_search_threads(threads)
        for part in (queries[:batch], queries):  # the first pass warms up
            start = time.perf_counter()
            for i in range(0, len(part), batch):
                [kb.rows(h) for h in kb.search(part[i : i + batch], TOPK)]
            out["encode_then_search"] = len(part) / (time.perf_counter() - start)

    worker = threading.Thread(target=sequential)  # torch and FAISS thread counts are per thread
    worker.start()
    worker.join()
    batcher = MicroBatcher(kb, batch, finish=kb.rows, stage_threads=stage_threads())
    for part in (queries[:batch], queries):
        start = time.perf_counter()
        for fut in [batcher.submit([q], TOPK) for q in part]:
            fut.result()
        out["two_stages"] = len(part) / (time.perf_counter() - start)
    batcher.close()
    kb.close()
    out["ceiling"] = max(out["encode_then_search"], out["two_stages"])
    return out


def start_server(cmd: list[str], url: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    wait_healthy(url, proc, timeout=300)
    return proc


def stage_split(before: dict, after: dict, result: dict) -> dict:
    """Mean ms per request in each stage during the run (from /health), and how busy each stage was."""
    t0, t1 = before["stage_timings"], after["stage_timings"]
    n = t1["requests"] - t0["requests"]
    if not n:
        return {}
    per = {k: 1000 * (t1[k] - t0[k]) / n for k in ("queued_s", "prepare_s", "handover_s", "search_s")}
    split = {
        "queued_ms": per["queued_s"],
        "encode_ms": per["prepare_s"],
        "to_search_ms": per["handover_s"],
        "search_rows_ms": per["search_s"],
        "http_ms": result["mean_ms"] - sum(per.values()),
        "encoder_busy": (t1["prepare_busy_s"] - t0["prepare_busy_s"]) / result["seconds"],
        "search_busy": (t1["search_busy_s"] - t0["search_busy_s"]) / result["seconds"],
        "mean_search_batch": (after["queries"] - before["queries"]) / max(1, after["batches"] - before["batches"]),
        "mean_encoder_batch": (after["queries"] - before["queries"])
        / max(1, after["encoder_batches"] - before["encoder_batches"]),
    }
    return split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--passages", type=int, default=200_000)
    ap.add_argument("--clients", default="1,8,64", help="comma-separated client counts")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--print-only", action="store_true", help="print the table; leave README/docs and results alone")
    args = ap.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    queries = distinct_questions(args.questions)
    kb = make_kb(Path(f"runs/bench-kb-{args.passages}-Flat") / "kb", args.passages, "Flat")
    manifest = Manifest.load(kb)
    index_mb = Path(manifest.dense_index).stat().st_size / 2**20
    load_before = os.getloadavg()
    print(f"load average {load_before[0]:.2f}; measuring the in-process ceiling", flush=True)
    ceil = ceiling(kb, queries)
    print(f"ceiling {ceil}", flush=True)

    py = sys.executable
    ours_port = free_port()
    ours_url = f"http://127.0.0.1:{ours_port}"
    ours = start_server([py, "-m", "local_retriever.cli", "serve", str(kb), "--port", str(ours_port)], ours_url)
    runs: dict[int, dict] = {}
    base = None
    try:
        base_port = free_port()
        base_url = f"http://127.0.0.1:{base_port}"
        base = start_server(
            [py, str(ROOT / "benchmarks" / "baseline_server.py"), str(kb), "--port", str(base_port)], base_url
        )
        for n in counts:
            runs[n] = {}
            for name, url in (("ours", ours_url), ("one_at_a_time", base_url)):
                asyncio.run(load(url, n, 3, queries, offset=500))  # warm-up
                before = httpx.get(f"{url}/health").json()
                load_avg = os.getloadavg()[0]
                result = asyncio.run(load(url, n, args.seconds, queries))
                after = httpx.get(f"{url}/health").json()
                result["load_avg_1m"] = load_avg
                if name == "ours":
                    result["stages"] = stage_split(before, after, result)
                runs[n][name] = result
                print(n, name, json.dumps(result), flush=True)
        rss = {
            "ours": psutil.Process(ours.pid).memory_info().rss / 2**20,
            "one_at_a_time": psutil.Process(base.pid).memory_info().rss / 2**20,
        }
    finally:
        for proc in (p for p in (ours, base) if p is not None):
            proc.terminate()
            proc.wait(timeout=30)
    load_after = os.getloadavg()

    rows, met = [], {}
    for n in counts:
        o, b = runs[n]["ours"], runs[n]["one_at_a_time"]
        vs_base, vs_ceil = o["qps"] / b["qps"], o["qps"] / ceil["ceiling"]
        label, goal = TARGETS.get(n, ("", 0))
        value = vs_base if label == "of one-at-a-time" else vs_ceil
        met[n] = bool(label) and value >= goal and o["errors"] == 0
        target = f"{goal:.0%} {label}: {'met' if met[n] else 'missed'}" if label else ""
        s = o.get("stages", {})
        split = (
            " / ".join(f"{s[k]:.1f}" for k in ("queued_ms", "encode_ms", "to_search_ms", "search_rows_ms", "http_ms"))
            if s
            else ""
        )
        rows.append(
            [
                n,
                "ours (two stages, no idle wait)",
                f"**{o['qps']:.1f}**",
                f"{vs_base:.2f}x",
                f"{vs_ceil:.0%}",
                f"{o['p50_ms']:.0f}",
                f"{o['p99_ms']:.0f}",
                o["errors"],
                f"{s.get('mean_encoder_batch', 0):.1f} / {s.get('mean_search_batch', 0):.1f}",
                split,
                target,
            ]
        )
        rows.append(
            [
                n,
                "one at a time (global lock)",
                f"{b['qps']:.1f}",
                "1.00x",
                f"{b['qps'] / ceil['ceiling']:.0%}",
                f"{b['p50_ms']:.0f}",
                f"{b['p99_ms']:.0f}",
                b["errors"],
                "1 / 1",
                "",
                "",
            ]
        )
    rows.append(
        [
            "–",
            "in-process ceiling (no HTTP)",
            f"{ceil['ceiling']:.1f}",
            "",
            "100%",
            "",
            "",
            "",
            "128",
            "",
            f"encode then search {ceil['encode_then_search']:.1f}, two stages {ceil['two_stages']:.1f}",
        ]
    )
    enc, search = split_threads()
    note = (
        f"Closed-loop clients, one distinct question per request (topk 5, scores and rows), {args.seconds:.0f} s "
        f"per server and client count, both servers up together and loaded in turn; {args.passages:,} passages, "
        f"FAISS Flat ({index_mb:.0f} MB), all-MiniLM-L6-v2 fp32 on CPU. Ours runs a stage on every core while the "
        f"other is idle, its encoder on {enc} and its search on {search} thread(s) while both run; the one-at-a-time "
        "server encodes and searches each request under one lock with every core, as ASearcher's server does. "
        "Ceiling: the same questions encoded and searched in batches of 128 in one process with no HTTP "
        "(the better of encode-then-search and the two stages). "
        "Batch = mean queries per encoder pass / per index search. Time per request (ms, means): waiting for the "
        "encoder / encoding / waiting for the search stage / searching with row reads / the rest (HTTP, JSON and "
        f"the load generator on the same cores). Load average (1 min) {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; RSS ours {rss['ours']:.0f} MB, one-at-a-time {rss['one_at_a_time']:.0f} MB"
    )
    payload = {
        "args": vars(args),
        "ceiling": ceil,
        "runs": {str(n): r for n, r in runs.items()},
        "targets_met": {str(n): m for n, m in met.items()},
        "threads_while_both_run": {"encoder": enc, "search": search},
        "load_avg": {"before": load_before, "after": load_after},
        "rss_mb": rss,
        "index_mb": index_mb,
    }
    if args.print_only:
        from benchmarks.readme_table import markdown_table

        print(markdown_table(HEADER, rows), "\n\n", note, "\n", json.dumps(payload["targets_met"]))
        return
    print(
        publish(
            "server_throughput",
            HEADER,
            rows,
            note,
            payload,
        )
    )


if __name__ == "__main__":
    main()
