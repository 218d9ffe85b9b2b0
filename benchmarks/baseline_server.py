"""The baseline for benchmarks/server_throughput.py: ASearcher's serving design on our index.

Each request is encoded and searched on its own under one global lock, inside an `async def`
handler, as ASearcher's local retrieval server does. Same knowledge base, encoder and index as
ours, so the difference measured is the serving design alone.
"""

from __future__ import annotations

import argparse
import os
import threading

import faiss
import orjson
import torch
import uvicorn
from fastapi import FastAPI, Request
from starlette.responses import Response

from local_retriever.kb import KnowledgeBase


def create_app(kb: KnowledgeBase) -> FastAPI:
    app = FastAPI()
    lock = threading.Lock()

    @app.post("/retrieve")
    async def retrieve(request: Request):
        body = await request.json()
        with lock:
            hits = kb.search(body["queries"], body.get("topk") or 3)
        result = [[{"document": doc, "score": s} for doc, s in kb.rows(h)] for h in hits]
        return Response(orjson.dumps({"result": result}), media_type="application/json")

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    return app


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("kb_dir")
    ap.add_argument("--port", type=int, default=5006)
    ap.add_argument("--ef-search", type=int, default=None)
    ap.add_argument("--int8-queries", action="store_true")
    args = ap.parse_args()
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    kb = KnowledgeBase(args.kb_dir, "dense", ef_search=args.ef_search, int8_queries=args.int8_queries)
    uvicorn.run(create_app(kb), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
