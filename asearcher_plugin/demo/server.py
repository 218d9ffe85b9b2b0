"""The demo's HTTP server: the page, a WebSocket per open page for runs and their turns, saving and replaying lines.

Protocol on `/ws` (JSON text frames). The page sends `{"op": "start", "ref": any, "request": {...}}` (see
`requests.RunRequest`) and `{"op": "stop", "run": id}`; the server answers a start with `{"type": "accepted",
"ref", "run"}` or `{"type": "rejected", "ref", "error"}`, then streams the run's events (`status`, `notice`,
`started`, `turn`, `finished`, `stopped`, `error`), each with its `run` id. When the socket closes, its runs are
cancelled. Every frame and download passes through `redact`: no environment secret leaves the server.

Every request and handshake passes `guard.Guard` first (Host, Origin, the launch's token), and a run reaches only
the servers named at launch (`endpoints.Endpoints`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from ..rewards.reward import AGREE_NOTE, METRIC_NOTES
from ..settings.config import AgentConfig
from ..utils.template_check import TEMPLATE_FIELDS
from .endpoints import Endpoints
from .guard import SUBPROTOCOL, Access, Guard, is_loopback
from .models import Models, choices
from .redact import redact
from .replay import read_lines
from .requests import MAX_QUESTION_CHARS, RequestError, parse_request
from .runs import RunLimit, RunManager

STATIC = Path(__file__).with_name("static")
MAX_REPLAY_BYTES = 4 * 1024 * 1024  # an eval of 1,000 short trajectories; larger files are read with `asearcher eval`
MAX_FRAME_CHARS = 1024 * 1024  # a start request is small; a 100,000-character question still arrives, and is refused


def create_app(
    kb_url: str | list[str] = "http://127.0.0.1:5005",
    tiny_model: str | Path = "runs/tiny-model",
    manager=None,
    *,
    access: Access | None = None,
    model_urls: tuple[str, ...] = (),
):
    """`access`: the hosts and token requests must match (default: loopback hosts, a new token, in
    `app.state.access`); `kb_url`, `model_urls`: the only servers runs may reach."""
    manager = manager or RunManager(Models(tiny_model), Endpoints.at_launch(kb_url, model_urls))

    @asynccontextmanager
    async def lifespan(app):
        yield
        await manager.shutdown()

    app = FastAPI(title="asearcher demo", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.manager = manager
    app.state.access = access or Access.for_bind("127.0.0.1")
    app.add_middleware(Guard, access=app.state.access)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/")
    async def page():
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    @app.get("/api/options")
    async def options():
        web = AgentConfig().tools.web
        return {
            "models": choices(),
            "agent_types": list(TEMPLATE_FIELDS),
            "kb_url": manager.endpoints.default_kb_url,
            "kb_urls": list(manager.endpoints.kb_urls),
            "model_urls": list(manager.endpoints.model_urls),
            # whether the web backend's keys are set, never their values
            "web_keys": {name: bool(os.environ.get(name)) for name in (web.serper_api_key_env, web.jina_api_key_env)},
            "max_question_chars": MAX_QUESTION_CHARS,
            "metric_notes": {**METRIC_NOTES, "agree": AGREE_NOTE},
        }

    @app.get("/api/runs/{run_id}")
    async def run_state(run_id: str):
        run = manager.runs.get(run_id)
        if run is None:
            raise HTTPException(404, f"no run {run_id!r} (runs are kept while the server runs)")
        body = {"run": run.id, "status": run.status, "events": run.events}
        return Response(redact(json.dumps(body)), media_type="application/json")

    @app.get("/api/runs/{run_id}/line")
    async def run_line(run_id: str):
        run = manager.runs.get(run_id)
        if run is None:
            raise HTTPException(404, f"no run {run_id!r} (runs are kept while the server runs)")
        if run.row is None:
            raise HTTPException(409, f"run {run_id} is {run.status}: only a finished run can be saved")
        return Response(
            run.line() + "\n",
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="demo-{run.id}.jsonl"'},
        )

    @app.post("/api/replay")
    async def replay(request: Request):
        size = int(request.headers.get("content-length") or 0)
        if size > MAX_REPLAY_BYTES:
            raise HTTPException(413, f"file is {size:,} bytes; the page replays files up to {MAX_REPLAY_BYTES:,}")
        # read up to the limit and no further: a chunked upload names no size
        chunks, read = [], 0
        async for chunk in request.stream():
            read += len(chunk)
            if read > MAX_REPLAY_BYTES:
                raise HTTPException(413, f"file is over {MAX_REPLAY_BYTES:,} bytes")
            chunks.append(chunk)
        raw = b"".join(chunks)
        # Off the event loop: runs and other pages go on while a file is read (the reading is linear in its size).
        rows, problems = await asyncio.to_thread(read_lines, raw.decode("utf-8", errors="replace"))
        if not rows:
            detail = "; ".join(problems[:3]) or "the file is empty"
            raise HTTPException(400, f"no trajectory line in this file ({detail})")
        return Response(redact(json.dumps({"rows": rows, "problems": problems})), media_type="application/json")

    @app.exception_handler(HTTPException)
    async def http_error(request, exc: HTTPException):
        return JSONResponse({"error": redact(str(exc.detail))}, status_code=exc.status_code)

    @app.websocket("/ws")
    async def socket(ws: WebSocket):
        # the page offers [SUBPROTOCOL, token.<token>]: the answer must name one it offered, never the token
        await ws.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in ws.scope.get("subprotocols", []) else None)
        outbox: asyncio.Queue = asyncio.Queue()
        owner = object()  # this page

        async def sender():
            try:
                while True:
                    event = await outbox.get()
                    await ws.send_text(redact(json.dumps(event)))
            except (WebSocketDisconnect, RuntimeError, OSError):
                return  # the page went away; the receive loop below cancels its runs

        sending = asyncio.create_task(sender())
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                reply = _handle(manager, message, owner, outbox.put_nowait)
                if reply is not None:
                    outbox.put_nowait(reply)
        except WebSocketDisconnect:
            pass
        finally:
            manager.stop_owner(owner)  # a page closed mid-run: its runs are cancelled, engines stop generating
            sending.cancel()

    return app


def _handle(manager: RunManager, message: dict, owner, send) -> dict | None:
    text = message.get("text")
    if text is None or len(text) > MAX_FRAME_CHARS:
        return {"type": "rejected", "error": f"a message must be JSON text of at most {MAX_FRAME_CHARS:,} characters"}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {"type": "rejected", "error": "a message must be JSON"}
    except RecursionError:
        return {"type": "rejected", "error": "a message must be JSON nested at most a few hundred levels"}
    if not isinstance(data, dict):
        return {"type": "rejected", "error": "a message must be a JSON object"}
    ref = data.get("ref")
    if data.get("op") == "stop":
        stopped = manager.stop(str(data.get("run")))
        return None if stopped else {"type": "rejected", "ref": ref, "error": f"run {data.get('run')} is not running"}
    if data.get("op") != "start":
        return {"type": "rejected", "ref": ref, "error": "op must be start or stop"}
    try:
        run = manager.start(parse_request(data.get("request")), owner, send)
    except (RequestError, RunLimit) as exc:
        return {"type": "rejected", "ref": ref, "error": str(exc)}
    return {"type": "accepted", "ref": ref, "run": run.id}


NETWORK_WARNING = (
    "warning: --host {host} is not a loopback address: anyone on the network who gets the URL below (it holds the "
    "access token) can run questions through the model servers and knowledge bases given at launch, and the web "
    "tools, with the API keys in this server's environment (OPENAI_API_KEY, SERPER_API_KEY, JINA_API_KEY); the "
    "keys go only to the servers given at launch. Traffic is plain HTTP: the token and every run can be read on the "
    "way. Put the demo behind a reverse proxy with TLS and a login to expose it; see docs/demo.md, Security."
)


def serve(
    host: str,
    port: int,
    kb_urls: list[str],
    tiny_model: str,
    model_urls: tuple[str, ...] = (),
    allow_hosts: tuple[str, ...] = (),
) -> None:
    import uvicorn

    access = Access.for_bind(host, allow_hosts)
    app = create_app(kb_urls, tiny_model, access=access, model_urls=model_urls)
    if not is_loopback(host):
        print(NETWORK_WARNING.format(host=host), file=sys.stderr, flush=True)
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    url = f"http://{shown}:{port}/#token={access.token}"
    print(f"asearcher demo: {url}  (Ctrl-C to stop)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", **connection_options())


def connection_options(header_timeout_s: float = 10.0, max_connections: int = 100, **limits) -> dict:
    """uvicorn settings bounding connections as the KB server's are (`local_retriever.server.ServerLimits`, whose
    other fields `limits` may set): headers within `header_timeout_s`, idle keep-alive 5 s, at most
    `max_connections` open (503 beyond), WebSocket frames of at most 4x MAX_FRAME_CHARS bytes."""
    from local_retriever.server import ServerLimits, uvicorn_options

    limits = ServerLimits(
        **{"keep_alive_s": 5.0, **limits}, header_timeout_s=header_timeout_s, max_connections=max_connections
    )
    return {**uvicorn_options(limits), "ws_max_size": 4 * MAX_FRAME_CHARS}
