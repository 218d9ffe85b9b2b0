"""Which `Host` a local server answers: a guard against DNS rebinding.

A web page on `attacker.example` whose name the attacker re-resolves to 127.0.0.1 reaches a loopback server from the
user's browser, with `Host: attacker.example`. A server that answers only the names it was started for refuses it.
Rebinding needs a name the attacker controls, so an IP address as `Host` is never one: cluster nodes that reach the
KB server by its address pass.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from starlette.responses import JSONResponse

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The host of a `Host` header, without its port: `[::1]:8000` -> `::1`, `Example.org:80` -> `example.org`."""
    try:
        return (urlsplit("//" + header).hostname or "").lower()
    except ValueError:  # an unbalanced bracket or a bad port: no host we serve
        return ""


def served_names(bind: str, allow_hosts: tuple[str, ...] | list[str] = ()) -> frozenset[str]:
    """The names a server bound on `bind` answers to: loopback names always; the bound address itself; for a
    wildcard bind, this machine's names; and whatever the operator allowed."""
    hosts = set(LOOPBACK_NAMES) | {h.lower().strip("[]") for h in allow_hosts}
    if bind in ("0.0.0.0", "::", ""):
        hosts |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    elif not is_loopback(bind):
        hosts.add(bind.lower().strip("[]"))
    return frozenset(hosts)


class HostCheck:
    """ASGI middleware: a request whose `Host` is neither an IP address nor one of `names` gets 400 (JSON)."""

    def __init__(self, app, names: frozenset[str]):
        self.app, self.names = app, names

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            raw = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            host = host_name(raw)
            if host not in self.names and not is_ip(host):
                allowed = ", ".join(sorted(self.names))
                message = (
                    f"Host {raw[:100]!r} is not one this server answers (an IP address, or {allowed}); start it "
                    "with --allow-host NAME to answer another"
                )
                response = JSONResponse({"error": {"code": "unknown_host", "message": message}}, status_code=400)
                return await response(scope, receive, send)
        return await self.app(scope, receive, send)
