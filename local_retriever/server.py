"""`asearcher kb serve`: the knowledge base over HTTP.

Wire formats: Search-R1's `POST /retrieve` and ASearcher's `POST /access`, unchanged, so their
clients (and verl's search tool) work against this server as they are. Handlers are async and
never hold a lock: searches go through the micro-batcher, page reads through SQLite per thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, StrictBool, StrictInt, StrictStr
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import Response

from .batcher import MicroBatcher
from .kb import KnowledgeBase


class ServerLimits(BaseModel):
    default_topk: int = Field(3, ge=1, description="topk when a request leaves it out (Search-R1's default)")
    max_topk: int = Field(100, ge=1)
    max_queries: int = Field(512, ge=1, description="queries in one /retrieve request")
    max_urls: int = Field(64, ge=1, description="urls in one /access request")
    max_query_chars: int = Field(2048, ge=16, description="longer queries are truncated, not refused")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    max_batch: int = Field(128, ge=1, description="queries searched together by the micro-batcher")
    max_wait_ms: float = Field(5.0, ge=0, description="how long the micro-batcher waits to fill a batch")


class RetrieveRequest(BaseModel):
    queries: list[StrictStr]
    topk: StrictInt | None = None
    return_scores: StrictBool = False


class AccessRequest(BaseModel):
    urls: list[StrictStr]


class ApiError(HTTPException):
    # An HTTPException, so FastAPI re-raises it from body parsing instead of turning it into a 400.
    def __init__(self, status: int, code: str, message: str):
        super().__init__(status_code=status, detail=message)
        self.status, self.code, self.message = status, code, message


def _json(payload: Any, status: int = 200, headers: dict | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json", headers=headers)


def _error(status: int, code: str, message: str) -> Response:
    # `detail` mirrors FastAPI's own error shape for clients that only read that key.
    return _json({"error": {"code": code, "message": message}, "detail": message}, status)


class BodyLimit:
    """Refuses request bodies over `max_bytes`, whether announced by Content-Length or streamed."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await _error(413, "body_too_large", f"request body of {int(length)} bytes exceeds {self.max_bytes}")(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise ApiError(413, "body_too_large", f"request body exceeds {self.max_bytes} bytes")
            return message

        return await self.app(scope, limited, send)


def create_app(kb: KnowledgeBase, limits: ServerLimits | None = None) -> FastAPI:
    limits = limits or ServerLimits()
    batcher = MicroBatcher(kb.search, limits.max_batch, limits.max_wait_ms)
    started = time.time()
    counters = {"retrieve_requests": 0, "queries": 0, "access_requests": 0, "errors_4xx": 0, "errors_5xx": 0}
    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        batcher.close()

    app = FastAPI(title="asearcher local knowledge base", version="1", lifespan=lifespan)
    app.state.kb, app.state.batcher, app.state.limits = kb, batcher, limits

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError):
        counters["errors_4xx" if exc.status < 500 else "errors_5xx"] += 1
        return _error(exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError):
        counters["errors_4xx"] += 1
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
            parts.append(f"{loc}: {err.get('msg')}")
        return _error(422, "invalid_request", "; ".join(parts))

    @app.exception_handler(Exception)
    async def _crash(_: Request, exc: Exception):
        counters["errors_5xx"] += 1
        return _error(500, "internal_error", f"{type(exc).__name__}: {exc}")

    @app.post("/retrieve")
    async def retrieve(req: RetrieveRequest):
        topk = limits.default_topk if req.topk is None else req.topk
        if not req.queries:
            raise ApiError(422, "empty_queries", "queries must be a non-empty list of strings")
        if len(req.queries) > limits.max_queries:
            raise ApiError(413, "too_many_queries", f"{len(req.queries)} queries in one request; the limit is {limits.max_queries}")
        if not 1 <= topk <= limits.max_topk:
            raise ApiError(422, "topk_out_of_range", f"topk must be between 1 and {limits.max_topk}, got {topk}")
        empty = [i for i, q in enumerate(req.queries) if not q.strip()]
        if empty:
            raise ApiError(422, "empty_query", f"queries[{empty[0]}] is empty or whitespace")
        queries = [q[: limits.max_query_chars] for q in req.queries]
        truncated = sum(len(q) > limits.max_query_chars for q in req.queries)
        hits = await asyncio.wrap_future(batcher.submit(queries, topk))
        counters["retrieve_requests"] += 1
        counters["queries"] += len(queries)
        rows = kb.rows
        if req.return_scores:
            result = [[{"document": doc, "score": score} for doc, score in rows(h)] for h in hits]
        else:
            result = [[doc for doc, _ in rows(h)] for h in hits]
        return _json({"result": result}, headers={"X-Truncated-Queries": str(truncated)} if truncated else None)

    @app.post("/access")
    async def access(req: AccessRequest):
        if not req.urls:
            raise ApiError(422, "empty_urls", "urls must be a non-empty list of strings")
        if len(req.urls) > limits.max_urls:
            raise ApiError(413, "too_many_urls", f"{len(req.urls)} urls in one request; the limit is {limits.max_urls}")
        counters["access_requests"] += 1
        pages = await run_in_threadpool(lambda: [kb.access(u) for u in req.urls])
        return _json({"result": pages})

    @app.get("/health")
    async def health():
        return _json({
            "status": "ok",
            **kb.describe(),
            "uptime_s": round(time.time() - started, 1),
            "batches": batcher.batches,
            "mean_batch": round(batcher.queries / batcher.batches, 2) if batcher.batches else 0.0,
            **counters,
            "limits": limits.model_dump(),
        })

    return app


def serve(kb: KnowledgeBase, host: str = "127.0.0.1", port: int = 5005, limits: ServerLimits | None = None,
          threads: int | None = None, log_level: str = "warning") -> None:
    import os

    import faiss
    import torch
    import uvicorn

    threads = threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    limits = limits or ServerLimits()
    app = BodyLimit(create_app(kb, limits), limits.max_body_bytes)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
