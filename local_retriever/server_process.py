"""Servers in their own processes: a free loopback port, the KB server started, and waiting until one answers.

The quickstarts, the tests and the benchmarks all run real servers this way.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def serve_command(kb_dir="runs/sample-kb", port: int = 5005, retriever: str = "hybrid") -> str:
    """The command that serves a knowledge base again, as the quickstarts and the errors about a dead server say it."""
    return f"asearcher kb serve {kb_dir} --port {port} --retriever {retriever}"


class PortInUse(OSError):
    """Another process listens on the address a server was asked to bind."""


def check_port_free(host: str, port: int) -> None:
    """Raises PortInUse, naming the address, when `host:port` cannot be bound: checked before a server loads
    anything, so the error comes first and not after a "serving" line and seconds of loading."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a port in TIME_WAIT is free
        try:
            s.bind((host, port))
        except OSError as exc:
            raise PortInUse(
                f"port {port} on {host} is in use ({exc.strerror}): another server runs there; "
                "stop it or pass --port with another number"
            ) from None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 at the time of asking."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(kb_dir: Path, port: int, retriever: str, extra: list[str] = (), log=None) -> subprocess.Popen:
    """`asearcher kb serve` for `kb_dir` in a child process; its output goes to `log`, else its stderr to a
    temporary file whose tail `wait_until_up` shows if the server exits before answering."""
    cmd = [
        sys.executable,
        "-m",
        "local_retriever.cli",
        "serve",
        str(kb_dir),
        "--port",
        str(port),
        "--retriever",
        retriever,
        *extra,
    ]
    if log is not None:
        return subprocess.Popen(cmd, stdout=log, stderr=log)
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    proc.stderr_file = err  # closed with the object; read back only when the server dies early
    return proc


def _stderr_tail(proc: subprocess.Popen, chars: int = 2000) -> str:
    err = getattr(proc, "stderr_file", None)
    if err is None:
        return ""
    err.seek(0)
    text = err.read().decode("utf-8", "replace").strip()
    return f": {text[-chars:]}" if text else ""


def wait_until_up(proc: subprocess.Popen, probe, what: str, timeout: float = 120.0):
    """`probe()`'s result once it stops raising httpx errors; fails fast if `proc` exits first."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = _stderr_tail(proc)
            raise RuntimeError(f"{what} exited with code {proc.returncode} before becoming healthy{tail}")
        try:
            return probe()
        except httpx.HTTPError:
            time.sleep(0.3)
    raise TimeoutError(f"{what} not healthy after {timeout:.0f}s")


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> dict:
    """The KB server's /health once it answers."""
    import httpx

    return wait_until_up(proc, lambda: httpx.get(f"{url}/health", timeout=2).json(), f"server at {url}", timeout)


@contextlib.contextmanager
def serving(
    kb_dir: Path, retriever: str = "hybrid", extra: list[str] = (), log: Path | None = None, timeout: float = 120.0
):
    """`asearcher kb serve` on a free port until the block ends, its output in the file `log` if given;
    yields (url, process)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if log is None:
        proc = start_server(kb_dir, port, retriever, list(extra))
    else:
        with open(log, "wb") as out:
            proc = start_server(kb_dir, port, retriever, list(extra), out)
    try:
        wait_healthy(url, proc, timeout)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt in the main thread until the block ends, so the `finally` that stops a
    child server runs: Python's default for SIGTERM ends the process at once and leaves the child serving."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
