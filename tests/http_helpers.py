"""Real HTTP servers on loopback for tests: uvicorn in a background thread on a free port."""

from __future__ import annotations

import contextlib
import threading
import time

import uvicorn

from local_retriever.server_process import free_port

__all__ = ["free_port", "serve_app"]


@contextlib.contextmanager
def serve_app(app, port: int | None = None, **options):
    """Serves an ASGI app until the block ends; yields its base URL. `options` go to `uvicorn.Config`."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, **options)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"test server on port {port} did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
