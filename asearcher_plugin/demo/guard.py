"""Who may use the demo: requests for a host it serves, from its own page's origin, holding the launch's token.

Three checks, in front of every HTTP request and WebSocket handshake:

- **Host**: the `Host` header must name a host the server was bound for (loopback names for a loopback bind, plus
  `--allow-host` names). A page on `attacker.example`, re-resolved to 127.0.0.1 (DNS rebinding), is refused.
- **Origin**: a browser names the page that made a request; a request from another origin (another site, or another
  port of this machine) is refused, so no other page can open the socket or post a file.
- **Token**: a secret made at each launch and printed in the page's URL (`/?token=...`), as Jupyter does. Opening that
  URL stores it in a cookie for this port (HttpOnly, SameSite=Strict) and drops it from the address bar; scripts can
  send it as `?token=` or `Authorization: token ...`. Static files (the page's script and style) need none.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
OPEN_PATHS = ("/static/",)  # the page's own script and style: no data, no state


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The host of a `Host` header, without its port: `[::1]:8000` -> `::1`, `Example.org:80` -> `example.org`."""
    try:
        return (urlsplit("//" + header).hostname or "").lower()
    except ValueError:  # an unbalanced bracket or a bad port: no host we serve
        return ""


@dataclass(frozen=True)
class Access:
    token: str
    hosts: frozenset[str]

    @classmethod
    def for_bind(cls, bind: str, allow_hosts: tuple[str, ...] = (), token: str | None = None) -> Access:
        """The hosts a server bound on `bind` answers to: loopback names always; the bound address itself; for a
        wildcard bind, this machine's names; and whatever the operator allowed."""
        hosts = set(LOOPBACK_NAMES) | {h.lower().strip("[]") for h in allow_hosts}
        if bind in ("0.0.0.0", "::", ""):
            hosts |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        elif not is_loopback(bind):
            hosts.add(bind.lower().strip("[]"))
        return cls(token or secrets.token_urlsafe(24), frozenset(hosts))

    def cookie(self, port: int | None) -> str:
        return f"asearcher_demo_{port or 0}"

    def holds_token(self, scope, headers: Headers) -> bool:
        offered = [
            *parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", []),
            headers.get("authorization", "").removeprefix("token ").strip(),
            _cookie(headers.get("cookie", ""), self.cookie(_port(scope))),
        ]
        return any(t and hmac.compare_digest(t.encode(), self.token.encode()) for t in offered)


def _port(scope) -> int | None:
    server = scope.get("server")
    return server[1] if server else None


def _cookie(header: str, name: str) -> str:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


class Guard:
    """ASGI middleware applying `Access` to HTTP requests and WebSocket handshakes alike."""

    def __init__(self, app, access: Access):
        self.app, self.access = app, access

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        refusal = self.refusal(scope, headers)
        if refusal is not None:
            status, text = refusal
            if scope["type"] == "websocket":  # closing before accepting answers the handshake with HTTP 403
                return await send({"type": "websocket.close", "code": 1008, "reason": text[:120]})
            response = (PlainTextResponse if scope["path"] == "/" else JSONResponse)(
                text if scope["path"] == "/" else {"error": text}, status_code=status
            )
            return await response(scope, receive, send)
        if scope["type"] == "http" and scope["path"] == "/" and b"token=" in scope.get("query_string", b""):
            # The token moves from the URL (history, screen shares) into a cookie only this port's pages send.
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(
                self.access.cookie(_port(scope)), self.access.token, httponly=True, samesite="strict", path="/"
            )
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)

    def refusal(self, scope, headers: Headers) -> tuple[int, str] | None:
        host = headers.get("host", "")
        if host_name(host) not in self.access.hosts:
            return 400, (
                f"Host {host[:100]!r} is not one this demo serves ({', '.join(sorted(self.access.hosts))}); "
                "start it with --allow-host NAME to serve another"
            )
        origin = headers.get("origin")
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            return 403, f"requests from another origin ({origin[:100]}) are refused: use the demo's own page"
        if scope["path"].startswith(OPEN_PATHS) or self.access.holds_token(scope, headers):
            return None
        return 403, (
            "this demo needs its access token: open the URL `asearcher demo` printed when it started "
            "(http://HOST:PORT/?token=...)"
        )
