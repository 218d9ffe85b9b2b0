"""`asearcher kb serve`: the knowledge base over HTTP.

Wire formats: Search-R1's `POST /retrieve` and ASearcher's `POST /access`, unchanged, so their
clients (and verl's search tool) work against this server as they are. Handlers are async and
never hold a lock: searches (and their row reads) go through the micro-batcher's two stages, page
reads through SQLite per thread.

Every error, from a route, FastAPI's body parsing, routing or the connection guards, is answered
as `{"error": {"code", "message"}}`. A bad item in a request fails that request alone (422 naming
the item); a 500 is logged with its traceback and never reaches requests that merely shared a batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import h11
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, StrictBool, StrictInt, StrictStr
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import Response
from uvicorn.protocols.http.h11_impl import H11Protocol

from . import memory
from .batcher import MicroBatcher
from .hosts import HostCheck, served_names
from .kb import KnowledgeBase
from .threads import stage_threads

logger = logging.getLogger(__name__)


class ServerLimits(BaseModel):
    default_topk: int = Field(3, ge=1, description="topk when a request leaves it out (Search-R1's default)")
    max_topk: int = Field(100, ge=1)
    max_queries: int = Field(512, ge=1, description="queries in one /retrieve request")
    max_urls: int = Field(64, ge=1, description="urls in one /access request")
    max_query_chars: int = Field(2048, ge=16, description="longer queries are truncated, not refused")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    max_batch: int = Field(128, ge=1, description="queries the micro-batcher's first stage prepares together")
    overlap_stages: bool = Field(
        False,
        description="encode the next batch while this one is searched, each stage on a share of the cores (slower "
        "than serial under load on 2 cores: see benchmarks/server_throughput.py)",
    )
    header_timeout_s: float = Field(10.0, gt=0, description="request line and headers must arrive within this")
    body_timeout_s: float = Field(30.0, gt=0, description="the whole body must arrive within this after the headers")
    keep_alive_s: float = Field(5.0, gt=0, description="an idle keep-alive connection is closed after this")
    max_connections: int = Field(
        1000, ge=1, description="open connections (or requests in progress) beyond which a request is answered 503"
    )
    max_header_bytes: int = Field(64 * 1024, ge=1024, description="request line plus headers")
    max_reply_bytes: int = Field(
        16 * 1024 * 1024,
        ge=64 * 1024,
        description="a reply's body: /retrieve beyond it is refused (413), /access cuts its pages to fit, marked",
    )
    write_timeout_s: float = Field(
        30.0, gt=0, description="a client that stops reading a reply is cut off this long after it fell behind"
    )


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


_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "body_too_large",
    503: "unavailable",
}


def _json(payload: Any, status: int = 200, headers: dict | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json", headers=headers)


def _printable(text: str) -> str:
    # orjson refuses lone surrogates; a message quoting bad input must still be sendable.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _error(status: int, code: str, message: str, headers: dict | None = None) -> Response:
    if status in (408, 413):  # the rest of the body was not read: the connection cannot carry another request
        headers = {**(headers or {}), "Connection": "close"}
    return _json({"error": {"code": code, "message": _printable(message)}}, status, headers)


def _check_text(field: str, items: list[str]) -> None:
    """422 naming the first item that is not valid Unicode (a lone surrogate sent as a JSON escape)."""
    for i, text in enumerate(items):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ApiError(
                422,
                "invalid_text",
                f"{field}[{i}] contains a lone surrogate "
                f"(U+{ord(text[exc.start]):04X} at position {exc.start}); "
                "send valid Unicode",
            ) from None


LINGER_S = 2.0  # how long a refused client may go on sending before its connection is dropped
READ_GRACE_S = 0.05  # what receive() gets past the body deadline to hand over a body already received


class BodyLimit:
    """Refuses request bodies over `max_bytes` (413), whether announced by Content-Length or streamed,
    and bodies not complete within `timeout` seconds of the headers (408), such as a Content-Length
    larger than what is sent."""

    def __init__(self, app, max_bytes: int, timeout: float = 30.0):
        self.app, self.max_bytes, self.timeout = app, max_bytes, timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._drain(receive, 0, deadline)
            return await _error(
                413, "body_too_large", f"request body of {int(length)} bytes exceeds {self.max_bytes}"
            )(scope, receive, send)
        seen, complete = 0, False

        async def limited():
            nonlocal seen, complete
            if complete:  # later reads only wait for a disconnect: no deadline applies
                return await receive()
            try:
                # past the deadline receive() still gets a moment: a body that came with its headers is waiting there
                # even when the handler reads it late (queued behind other requests), and is no lie
                message = await asyncio.wait_for(receive(), max(READ_GRACE_S, deadline - loop.time()))
            except asyncio.TimeoutError:
                raise ApiError(
                    408, "body_timeout", f"request body not complete within {self.timeout:g} s ({seen} bytes received)"
                ) from None
            seen += len(message.get("body", b""))
            complete = not message.get("more_body", False)
            if seen > self.max_bytes:
                if not complete:
                    await self._drain(receive, seen, deadline)
                raise ApiError(413, "body_too_large", f"request body exceeds {self.max_bytes} bytes")
            return message

        return await self.app(scope, limited, send)

    async def _drain(self, receive, seen: int, deadline: float) -> None:
        """Reads and drops what is left of a refused body, up to 4x the limit and within the deadline: a server
        that answers while the client is still sending makes the client's socket see a reset instead of the 413."""
        loop = asyncio.get_running_loop()
        while seen <= 4 * self.max_bytes:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return
            seen += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body", False):
                return


def create_app(
    kb: KnowledgeBase,
    limits: ServerLimits | None = None,
    threads: int | None = None,
    hosts: frozenset[str] | None = None,
) -> FastAPI:
    """`threads`: CPU threads shared by the encoder and search stages (default: every core); `hosts`: the names a
    request's `Host` may carry besides an IP address (default: the loopback names; see `hosts.HostCheck`)."""
    limits = limits or ServerLimits()
    encoder_threads, search_threads = stage_threads(threads)
    batcher = MicroBatcher(
        kb,
        limits.max_batch,
        finish=kb.rows,
        stage_threads=(encoder_threads, search_threads),
        overlap=limits.overlap_stages,
    )
    started = time.time()
    counters = {"retrieve_requests": 0, "queries": 0, "access_requests": 0, "errors_4xx": 0, "errors_5xx": 0}

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        served = lambda: counters["retrieve_requests"] + counters["access_requests"]  # noqa: E731
        trimmer = asyncio.create_task(memory.trim_after_traffic(served))
        try:
            yield
        finally:
            trimmer.cancel()
            batcher.close()

    app = FastAPI(title="asearcher local knowledge base", version="1", lifespan=lifespan)
    app.state.kb, app.state.batcher, app.state.limits = kb, batcher, limits
    app.add_middleware(HostCheck, names=served_names("127.0.0.1") if hosts is None else hosts)

    def internal(request: Request, exc: BaseException) -> ApiError:
        # Logged here and answered as an ApiError, so Starlette does not re-raise it into uvicorn's log as well.
        counters["errors_5xx"] += 1
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return ApiError(500, "internal_error", f"{type(exc).__name__}: {exc}")

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException):
        # ApiError, and Starlette's own 404/405 and FastAPI's 400 for a body it cannot parse.
        if isinstance(exc, ApiError):
            status, code, message = exc.status, exc.code, exc.message
        else:
            status, code, message = exc.status_code, _CODES.get(exc.status_code, "http_error"), str(exc.detail)
            cause = exc.__cause__
            if isinstance(cause, RecursionError):
                code, message = "invalid_json", "request body is JSON nested too deeply"
            elif status == 400 and cause is not None:
                code, message = "invalid_json", f"request body could not be parsed: {type(cause).__name__}: {cause}"
        if status < 500:
            counters["errors_4xx"] += 1
        return _error(status, code, message, dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError):
        counters["errors_4xx"] += 1
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
            parts.append(f"{loc}: {err.get('msg')}")
        return _error(422, "invalid_request", "; ".join(parts))

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception):
        # Last resort for errors raised outside the routes' own guard.
        counters["errors_5xx"] += 1
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(500, "internal_error", f"{type(exc).__name__}: {exc}")

    @app.post("/retrieve")
    async def retrieve(req: RetrieveRequest, request: Request):
        topk = limits.default_topk if req.topk is None else req.topk
        if not req.queries:
            raise ApiError(422, "empty_queries", "queries must be a non-empty list of strings")
        if len(req.queries) > limits.max_queries:
            raise ApiError(
                413,
                "too_many_queries",
                f"{len(req.queries)} queries in one request; the limit is {limits.max_queries}",
            )
        if not 1 <= topk <= limits.max_topk:
            raise ApiError(422, "topk_out_of_range", f"topk must be between 1 and {limits.max_topk}, got {topk}")
        empty = [i for i, q in enumerate(req.queries) if not q.strip()]
        if empty:
            raise ApiError(422, "empty_query", f"queries[{empty[0]}] is empty or whitespace")
        _check_text("queries", req.queries)
        queries = [q[: limits.max_query_chars] for q in req.queries]
        truncated = sum(len(q) > limits.max_query_chars for q in req.queries)
        try:
            rows = await asyncio.wrap_future(batcher.submit(queries, topk))
            if req.return_scores:
                result = [[{"document": doc, "score": score} for doc, score in hits] for hits in rows]
            else:
                result = [[doc for doc, _ in hits] for hits in rows]
        except Exception as exc:  # noqa: BLE001 - answered as a logged 500
            raise internal(request, exc) from None
        body = orjson.dumps({"result": result})
        if len(body) > limits.max_reply_bytes:
            raise ApiError(
                413,
                "reply_too_large",
                f"the reply to {len(queries)} queries x topk {topk} is {len(body):,} bytes; the limit is "
                f"{limits.max_reply_bytes:,}: ask fewer queries or a smaller topk per request",
            )
        counters["retrieve_requests"] += 1
        counters["queries"] += len(queries)
        headers = {"X-Truncated-Queries": str(truncated)} if truncated else None
        return Response(body, media_type="application/json", headers=headers)

    @app.post("/access")
    async def access(req: AccessRequest, request: Request):
        if not req.urls:
            raise ApiError(422, "empty_urls", "urls must be a non-empty list of strings")
        if len(req.urls) > limits.max_urls:
            raise ApiError(
                413, "too_many_urls", f"{len(req.urls)} urls in one request; the limit is {limits.max_urls}"
            )
        _check_text("urls", req.urls)

        def lookup() -> list:
            pages = []
            for i, url in enumerate(req.urls):
                try:
                    pages.append(kb.access(url))
                except ValueError as exc:  # urllib's verdict on a malformed URL, e.g. `http://[::1`
                    raise ApiError(422, "invalid_url", f"urls[{i}] is not a valid URL or title: {exc}") from None
            return pages

        try:
            pages = await run_in_threadpool(lookup)
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001 - answered as a logged 500
            raise internal(request, exc) from None
        counters["access_requests"] += 1
        return _json({"result": cut_pages(pages, limits.max_reply_bytes)})

    @app.get("/health")
    async def health():
        return _json(
            {
                "status": "ok",
                **kb.describe(),
                "uptime_s": round(time.time() - started, 1),
                "batches": batcher.batches,
                "mean_batch": round(batcher.queries / batcher.batches, 2) if batcher.batches else 0.0,
                "encoder_batches": batcher.prepare_batches,
                "threads": {
                    "encoder": [encoder_threads.alone, encoder_threads.shared],
                    "search": [search_threads.alone, search_threads.shared],
                },
                "stage_timings": {k: round(v, 4) for k, v in batcher.timings.items()},
                "failed_batches": batcher.failed_batches,
                **counters,
                "limits": limits.model_dump(),
            }
        )

    return app


CUT_MARK = "\n[... cut: the page is {total:,} characters; this server's replies hold at most {limit:,} bytes]"


def cut_pages(pages: list[dict | None], max_bytes: int) -> list[dict | None]:
    """`pages` whose contents fit one reply of `max_bytes`: each page gets an equal share, and one cut ends with
    `CUT_MARK` saying so (a reader sees that the page goes on, as with `max_page_chunks`)."""
    share = max(1, max_bytes // 6 // max(1, len(pages)))  # characters: JSON writes one in at most 6 bytes (an escape)
    out = []
    for page in pages:
        contents = page.get("contents") if isinstance(page, dict) else None
        if isinstance(contents, str) and len(contents) > share:
            page = {**page, "contents": contents[:share] + CUT_MARK.format(total=len(contents), limit=max_bytes)}
        out.append(page)
    return out


def _raw_error(status: int, reason: str, code: str, message: str) -> bytes:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def guarded_protocol(limits: ServerLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline on request headers, a deadline on bodies the app never read,
    JSON errors for malformed requests, and its connection limit answered in the JSON error shape."""
    header_timeout, body_timeout, max_connections = (
        limits.header_timeout_s,
        limits.body_timeout_s,
        limits.max_connections,
    )
    deadlines = {"headers": header_timeout, "body": body_timeout, "write": limits.write_timeout_s, "linger": LINGER_S}

    class GuardedH11Protocol(H11Protocol):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.limit_concurrency = None  # checked in `_gate` instead, to answer in the JSON error shape
            self.app = self._gate
            self._app = self.config.loaded_app
            self._timer: asyncio.TimerHandle | None = None
            self._timer_kind: str | None = None
            self._partial = False
            self._behind = False  # the client stopped reading this response: its write deadline runs
            self._upgraded = False
            self._lingering = False

        async def _gate(self, scope, receive, send):
            if len(self.connections) > max_connections or len(self.tasks) > max_connections:
                response = _error(
                    503,
                    "too_many_connections",
                    f"the server holds {max_connections} connections; retry later or elsewhere",
                )
                return await response(scope, receive, send)
            return await self._app(scope, receive, send)

        def connection_made(self, transport):
            super().connection_made(transport)
            self._rearm()

        def data_received(self, data: bytes) -> None:
            if self._lingering:  # the rest of a request already answered: read so the close stays clean, and drop
                return
            if self.conn.their_state is h11.IDLE:
                self._partial = True
            super().data_received(data)
            self._rearm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._partial = False
            if not self.flow.write_paused:  # the reply left the buffer (a paused one is still held: see below)
                self._behind = False
            self._rearm()

        def handle_websocket_upgrade(self, event) -> None:
            # the connection now belongs to the WebSocket protocol (the demo's socket): no timer of ours stays on it
            self._upgraded = True
            self._set_timer(None)
            super().handle_websocket_upgrade(event)

        def pause_writing(self) -> None:
            # the transport holds more than its high-water mark of unsent reply: the client is not reading. The
            # reply stays in memory until it is read, after the app has finished with it too.
            super().pause_writing()
            self._behind = True
            self._rearm()

        def resume_writing(self) -> None:
            super().resume_writing()
            if self.cycle is None or self.cycle.response_complete:  # the whole reply is out
                self._behind = False
            self._rearm()

        def connection_lost(self, exc):
            self._set_timer(None)
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            self.transport.write(_raw_error(400, "Bad Request", "bad_request", msg))
            self._close_lingering()

        def _close_lingering(self) -> None:
            # The client may still be sending the request this answer refuses. Closing now would answer those bytes
            # with a reset, which can reach the client before the answer does: it would see "connection reset"
            # instead. So the answer and an end-of-stream go out first, and what still arrives is read and dropped
            # until the client closes, for at most LINGER_S (nginx's lingering close).
            self._lingering = True
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self._set_timer("linger")

        def _rearm(self) -> None:
            # The deadline runs from when the wait began; bytes trickling in do not extend it.
            if self._lingering:
                return
            if self.transport is None or self.transport.is_closing() or self._upgraded:
                return self._set_timer(None)
            if self._behind:  # from the first time it fell behind: reading a little now and then does not extend it
                return self._set_timer("write")
            idle = self.cycle is None or self.cycle.response_complete
            if idle and self.conn.their_state is h11.IDLE:
                self._set_timer("headers")
            elif idle and self.conn.their_state is h11.SEND_BODY:
                self._set_timer("body")  # answered without reading the body; the app's own deadline no longer runs
            else:
                self._set_timer(None)

        def _set_timer(self, kind: str | None) -> None:
            if kind == self._timer_kind:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer_kind = kind
            self._timer = None
            if kind is not None:
                self._timer = self.loop.call_later(deadlines[kind], self._expired, kind)

        def _expired(self, kind: str) -> None:
            self._timer, self._timer_kind = None, None
            if kind in ("write", "linger"):  # dropped: closing would wait for a reader that never reads
                return self.transport.abort()
            if self.transport.is_closing():
                return
            if kind == "headers" and self._partial:
                self.transport.write(
                    _raw_error(
                        408,
                        "Request Timeout",
                        "header_timeout",
                        f"request headers not complete within {header_timeout:g} s",
                    )
                )
                return self._close_lingering()
            self.transport.close()

    return GuardedH11Protocol


def build_app(
    kb: KnowledgeBase,
    limits: ServerLimits | None = None,
    threads: int | None = None,
    hosts: frozenset[str] | None = None,
):
    """The ASGI app `kb serve` runs: the FastAPI app behind the body size and read-time guard."""
    limits = limits or ServerLimits()
    return BodyLimit(create_app(kb, limits, threads, hosts), limits.max_body_bytes, limits.body_timeout_s)


def uvicorn_options(limits: ServerLimits) -> dict:
    """uvicorn settings that enforce the connection-level limits."""
    return {
        "http": guarded_protocol(limits),
        "timeout_keep_alive": limits.keep_alive_s,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
    }


def log_options(log_level: str = "warning", access_log: bool = False) -> dict:
    """uvicorn's log settings. Its access log writes at INFO, so turning it on lowers uvicorn's loggers to INFO."""
    if access_log and logging.getLevelName(log_level.upper()) > logging.INFO:
        log_level = "info"
    return {"log_level": log_level, "access_log": access_log}


def serve(
    kb: KnowledgeBase,
    host: str = "127.0.0.1",
    port: int = 5005,
    limits: ServerLimits | None = None,
    threads: int | None = None,
    log_level: str = "warning",
    access_log: bool = False,
    allow_hosts: tuple[str, ...] = (),
) -> None:
    """Runs the server until interrupted; `access_log`: uvicorn's line per request; `threads`: CPU threads
    for encoding and search together (default: every core), split between the two stages; `allow_hosts`: names a
    request's `Host` may carry besides an IP address, the loopback names and this machine's (`hosts.py`)."""
    import uvicorn

    limits = limits or ServerLimits()
    # uvicorn configures only its own loggers; this one carries the tracebacks of 500s.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    memory.limit_arenas(2)  # for the whole server process, before its threads allocate: see memory.py
    uvicorn.run(
        build_app(kb, limits, threads, served_names(host, allow_hosts)),
        host=host,
        port=port,
        **log_options(log_level, access_log),
        **uvicorn_options(limits),
    )
