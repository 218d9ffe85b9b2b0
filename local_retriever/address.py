"""The address file by which ASearcher's clients find KB servers.

ASearcher's training client globs `$RAG_SERVER_ADDR_DIR/Host*_IP*.txt` and takes every line of every
file as an `ip:port` to send requests to, so the file is `Host{ip}_IP{port}.txt` holding exactly
`ip:port`, no newline (it would end up inside the URL). ASearcher writes it before its server listens
and never removes it; here it appears only once `/health` answers, is written under a name the glob
does not match and then renamed (a client never reads half a file), and is removed at shutdown, so a
stopped server is not picked by the next run.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from pathlib import Path

WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def advertised_ip(host: str) -> str:
    """The address other nodes reach a server listening on `host` by (ASearcher: the host name's IP)."""
    if host in WILDCARD_HOSTS:
        return socket.gethostbyname(socket.gethostname())
    return host


class AddressFile:
    """`with AddressFile(folder, host, port):` around a blocking server writes the file once it is up."""

    def __init__(self, folder: Path | str, host: str, port: int, poll_seconds: float = 0.2):
        self.folder = Path(folder)
        ip = advertised_ip(host)
        self.content = f"{ip}:{port}"
        self.path = self.folder / f"Host{ip}_IP{port}.txt"
        probe_host = "127.0.0.1" if host in ("", "0.0.0.0") else ("::1" if host == "::" else host)
        self._health = f"http://{_bracket(probe_host)}:{port}/health"
        self._poll = poll_seconds
        self._wildcard = host in WILDCARD_HOSTS
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._publish_when_up, name="address-file", daemon=True)
        self._old_sigterm = None

    def __enter__(self) -> AddressFile:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._wildcard and self.content.startswith("127."):
            # Debian maps the host name to 127.0.1.1 in /etc/hosts: other nodes cannot use that.
            sys.stderr.write(
                f"warning: this machine's host name resolves to {self.content.split(':')[0]}, which "
                "other nodes cannot reach; pass --host with its network address\n"
            )
        if threading.current_thread() is threading.main_thread():
            # uvicorn shuts down gracefully on SIGTERM and then raises it again under the handler found
            # at start; with the default one the process would die before removing the file.
            self._old_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.path.unlink(missing_ok=True)
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)

    def _publish_when_up(self) -> None:
        import httpx

        while not self._stop.is_set():
            try:
                if httpx.get(self._health, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            self._stop.wait(self._poll)
        else:
            return
        tmp = self.folder / f".{self.path.name}.tmp"
        tmp.write_text(self.content, encoding="utf-8")
        tmp.replace(self.path)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
