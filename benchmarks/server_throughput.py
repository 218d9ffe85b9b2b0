"""Server throughput: 64 concurrent clients sending single-query requests, ours vs a global-lock baseline.

One command: `python benchmarks/server_throughput.py [--passages 200000] [--clients 64] [--seconds 20]`.
The index holds random unit vectors (one per passage) and the rows repeat sample-KB passages:
throughput depends on index size and encoder, not on what the text says. Both servers run the
same knowledge-base folder with the same encoder (all-MiniLM-L6-v2) and index, one after the other,
under the same load; memory (RSS) is recorded for each.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import faiss
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme_table import publish  # noqa: E402
from local_retriever.build import BuildOptions, build_kb, ensure_sample_kb  # noqa: E402
from local_retriever.manifest import MANIFEST_FILE, Manifest  # noqa: E402
from local_retriever.sample import load_sample_questions  # noqa: E402
from local_retriever.server_process import wait_healthy  # noqa: E402


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


async def load(url: str, clients: int, seconds: float, queries: list[str]) -> dict:
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
            q = queries[(c * 997 + i) % len(queries)]
            t = time.perf_counter()
            async with http.post(f"{url}/retrieve", json={"queries": [q], "topk": 5, "return_scores": True}) as r:
                await r.read()
                if r.status != 200:
                    errors += 1
                    continue
            latencies.append(time.perf_counter() - t)

    conn = aiohttp.TCPConnector(limit=clients + 8)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as http:
        await asyncio.gather(*(client(c, http) for c in range(clients)))
    lat = np.array(latencies) * 1000
    return {
        "queries": len(lat),
        "errors": errors,
        "qps": len(lat) / seconds,
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
    }


def run_server(cmd: list[str], url: str, clients: int, seconds: float, queries: list[str]) -> dict:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    try:
        wait_healthy(url, proc, timeout=300)
        asyncio.run(load(url, clients, 3, queries))  # warm-up
        result = asyncio.run(load(url, clients, seconds, queries))
        result["rss_mb"] = psutil.Process(proc.pid).memory_info().rss / 2**20
        return result
    finally:
        proc.terminate()
        proc.wait(timeout=30)


CONFIGS = {
    # name: (FAISS factory, extra serve flags shared by both servers)
    "Flat, fp32 encoder": ("Flat", []),
    "Flat, int8 query encoder": ("Flat", ["--int8-queries"]),
    "HNSW32 (efSearch 128), int8 query encoder": ("HNSW32", ["--ef-search", "128", "--int8-queries"]),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--passages", type=int, default=200_000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    queries = [q["question"] for q in load_sample_questions()]
    py = sys.executable
    rows, payload = [], {"args": vars(args), "configs": {}}
    for name, (factory, flags) in CONFIGS.items():
        kb = make_kb(Path(f"runs/bench-kb-{args.passages}-{factory}") / "kb", args.passages, factory)
        manifest = Manifest.load(kb)
        index_mb = Path(manifest.dense_index).stat().st_size / 2**20
        corpus_mb = Path(manifest.corpus).stat().st_size / 2**20
        ours = run_server(
            [py, "-m", "local_retriever.cli", "serve", str(kb), "--port", "5107", *flags],
            "http://127.0.0.1:5107",
            args.clients,
            args.seconds,
            queries,
        )
        base = run_server(
            [py, str(ROOT / "benchmarks" / "baseline_server.py"), str(kb), "--port", "5108", *flags],
            "http://127.0.0.1:5108",
            args.clients,
            args.seconds,
            queries,
        )
        ratio = ours["qps"] / base["qps"]
        payload["configs"][name] = {
            "ours": ours,
            "baseline": base,
            "ratio": ratio,
            "index_mb": index_mb,
            "corpus_mb": corpus_mb,
        }
        for label, r in (("ours (micro-batched)", ours), ("baseline (global lock)", base)):
            rows.append(
                [
                    name,
                    label,
                    f"{r['qps']:.1f}",
                    f"{r['p50_ms']:.0f}",
                    f"{r['p99_ms']:.0f}",
                    r["errors"],
                    f"{r['rss_mb']:.0f}",
                    f"{index_mb:.0f} / {corpus_mb:.0f}",
                ]
            )
        rows.append([name, "**ratio ours / baseline**", f"**{ratio:.1f}x**", "", "", "", "", ""])
    note = (
        f"{args.clients} concurrent clients sending single-query requests (topk 5) "
        f"for {args.seconds:.0f} s per server, "
        f"{args.passages:,} passages, all-MiniLM-L6-v2 on CPU; the baseline searches each request alone under one "
        "global lock, as ASearcher's server does, on the same index and encoder; RSS = server resident memory after "
        "the run; the corpus file stays on disk and is read by offset"
    )
    print(
        publish(
            "server_throughput",
            [
                "index / encoder",
                "server",
                "queries/s",
                "p50 ms",
                "p99 ms",
                "errors",
                "RSS MB",
                "index / corpus file MB",
            ],
            rows,
            note,
            payload,
        )
    )


if __name__ == "__main__":
    main()
