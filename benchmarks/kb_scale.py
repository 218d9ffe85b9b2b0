"""Which FAISS index keeps up at scale: Flat, HNSW and IVF-PQ over 1M passages, on this machine's CPU.

One command: `python benchmarks/kb_scale.py` (options: --n 1000000 --queries 1024 --batch 64).

Workload: no 1M-passage corpus can be encoded offline on 2 cores, so each vector is a random mix (Dirichlet weights)
of three of the sample KB's 4,366 real passage embeddings (all-MiniLM-L6-v2, d = 384) plus Gaussian noise of norm
0.1, normalised: 1M distinct vectors in the real embeddings' span. (Copies of the 4,366 with noise made 4,366 tight
clusters of near-ties, where HNSW's recall@5 against Flat fell to 0.71-0.75: a workload no corpus has.) Queries: the
sample questions, encoded with the same encoder. Ground truth: the Flat index's top 5 (exact inner product). Each
index is built with the same vectors, searched with the same queries in batches of `--batch` (what the server
searches when 64 clients each wait on one query: `local_retriever/batcher.py` joins them), on every core FAISS sees.
Reported: build time (training included), the serialised index's size, recall@5 against Flat, and index-only
queries/s (the encoder's own rate at the same batch is reported once: it is the same for every index). At wiki-18
scale (21M x 768) a query's Flat cost grows with N x d (42x); HNSW's with d and, slowly, with N.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import faiss
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme_table import publish  # noqa: E402
from local_retriever.build import ensure_sample_kb  # noqa: E402
from local_retriever.encoder import Encoder  # noqa: E402
from local_retriever.manifest import Manifest  # noqa: E402
from local_retriever.sample import load_sample_questions  # noqa: E402

TOPK = 5
MIX = 3  # real embeddings mixed into each vector
NOISE = 0.1  # norm of the noise added to a mix (before it is normalised)
# (factory, search parameter, its values)
INDEXES = [
    ("Flat", None, [None]),
    ("HNSW32", "efSearch", [64, 128]),
    ("HNSW32,SQ8", "efSearch", [128]),
    ("IVF4096,SQ8", "nprobe", [16, 64]),
    ("IVF4096,PQ64", "nprobe", [16, 64]),
]
HEADER = ["index", "knob", "recall@5 vs Flat", "queries/s", "vs Flat", "build s", "MB", "bytes/passage"]


def vectors(kb: Path, n: int, seed: int = 0) -> tuple[np.ndarray, Manifest]:
    """`n` unit vectors, each a random mix of three of the KB's real passage embeddings plus a little noise."""
    manifest = Manifest.load(kb)
    flat = faiss.read_index(str(kb / manifest.dense_index))
    base = flat.reconstruct_n(0, flat.ntotal)
    rng = np.random.default_rng(seed)
    out = np.empty((n, base.shape[1]), dtype=np.float32)
    for start in range(0, n, 100_000):  # in chunks: 1M x 384 of temporaries at once is GBs more
        rows = min(start + 100_000, n) - start
        picks = rng.integers(0, len(base), size=(rows, MIX))
        weights = rng.dirichlet(np.ones(MIX), size=rows).astype(np.float32)
        chunk = np.einsum("rm,rmd->rd", weights, base[picks])
        noise = rng.standard_normal(chunk.shape).astype(np.float32)
        chunk += noise * (NOISE / np.sqrt(base.shape[1]))
        out[start : start + rows] = chunk / np.linalg.norm(chunk, axis=1, keepdims=True)
    return out, manifest


def timed_search(index, queries: np.ndarray, batch: int) -> tuple[np.ndarray, float]:
    index.search(queries[:batch], TOPK)  # warm-up: first-touch of the index pages
    ids, start = [], time.perf_counter()
    for i in range(0, len(queries), batch):
        ids.append(index.search(queries[i : i + batch], TOPK)[1])
    return np.concatenate(ids), len(queries) / (time.perf_counter() - start)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / TOPK for f, t in zip(found, truth)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--kb", type=Path, default=ROOT / "runs" / "sample-kb")
    ap.add_argument("--no-publish", action="store_true")
    args = ap.parse_args()

    kb = ensure_sample_kb(args.kb)
    t0 = time.perf_counter()
    xb, manifest = vectors(kb, args.n)
    print(f"{args.n:,} vectors of d = {xb.shape[1]} in {time.perf_counter() - t0:.0f} s", flush=True)
    encoder = Encoder(manifest.encoder, device="cpu")
    questions = [q["question"] for q in load_sample_questions()]
    questions = (questions * (args.queries // len(questions) + 1))[: args.queries]
    start = time.perf_counter()
    xq = np.concatenate(
        [encoder.encode(questions[i : i + args.batch], "query") for i in range(0, len(questions), args.batch)]
    ).astype(np.float32)
    encoder_qps = len(questions) / (time.perf_counter() - start)
    print(f"encoder: {encoder_qps:.0f} queries/s at batch {args.batch}", flush=True)

    rows, results, truth, flat_qps = [], [], None, None
    for factory, knob, values in INDEXES:
        index = faiss.index_factory(xb.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
        start = time.perf_counter()
        if not index.is_trained:
            index.train(xb[np.random.default_rng(1).choice(len(xb), min(len(xb), 262_144), replace=False)])
        index.add(xb)
        build_s = time.perf_counter() - start
        size = faiss.serialize_index(index).nbytes
        print(f"{factory}: built in {build_s:.0f} s, {size / 1e6:.0f} MB", flush=True)
        for value in values:
            if knob:
                faiss.ParameterSpace().set_index_parameter(index, knob, value)
            ids, qps = timed_search(index, xq, args.batch)
            if truth is None:
                truth, flat_qps = ids, qps
            r = recall(ids, truth)
            label = f"{knob} {value}" if knob else "exact"
            print(f"  {label}: recall@5 {r:.3f}, {qps:,.0f} queries/s", flush=True)
            results.append(
                {"index": factory, "knob": label, "recall_at_5": r, "qps": qps, "build_s": build_s, "bytes": size}
            )
            rows.append(
                [
                    f"`{factory}`",
                    label,
                    f"{r:.3f}",
                    f"{qps:,.0f}",
                    f"{qps / flat_qps:.1f}x",
                    f"{build_s:.0f}",
                    f"{size / 1e6:,.0f}",
                    f"{size / len(xb):,.0f}",
                ]
            )
        del index
    note = (
        f"{args.n:,} vectors (each a random mix of 3 of the sample KB's 4,366 real passage embeddings, "
        f"d = {xb.shape[1]}, plus noise), {len(xq):,} encoded sample questions, top {TOPK}, index search only "
        f"in batches of {args.batch} on {faiss.omp_get_max_threads()} threads. The encoder adds "
        f"{encoder_qps:,.0f} queries/s of its own at that batch (all-MiniLM-L6-v2 on the CPU)"
    )
    payload = {"n": args.n, "dim": xb.shape[1], "queries": len(xq), "batch": args.batch, "results": results,
               "encoder_qps": encoder_qps}  # fmt: skip
    table = (
        publish("kb_scale", HEADER, rows, note, payload)
        if not args.no_publish
        else "\n".join(" | ".join(r) for r in rows)
    )
    print(table)


if __name__ == "__main__":
    main()
