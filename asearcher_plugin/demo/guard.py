"""Who may use the demo: requests for a host it serves, from its own page's origin, holding the launch's token.

Three checks, in front of every HTTP request and WebSocket handshake:

- **Host**: the `Host` header must name a host the server was bound for (loopback names for a loopback bind, plus
  `--allow-host` names). A page on `attacker.example`, re-resolved to 127.0.0.1 (DNS rebinding), is refused.
- **Origin**: a browser names the page that made a request; a request from another origin (another site, or another
  port of this machine) is refused, so no other page can open the socket or post a file.
- **Token**: a secret made at each launch and printed in the page's URL (`/#token=...`; a fragment is never sent to
  a server). The page keeps it in this tab's `sessionStorage`, which belongs to this origin (scheme, host and port),
  drops it from the address bar, and sends it as `Authorization: token ...` (and, for the WebSocket, whose handshake
  takes no header from a page, as the subprotocol `token.<token>`). It is never a cookie: cookies are scoped by host,
  not port, so a browser would send one to every other server on 127.0.0.1. Scripts send the header or `?token=`.
  The page itself (`/`) and its script and style need none: they hold no data and no state.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse

from local_retriever.hosts import host_name, is_loopback, served_names

__all__ = ["SUBPROTOCOL", "Access", "Guard", "host_name", "is_loopback"]

OPEN_PATHS = ("/static/",)  # the page's own script and style: no data, no state
OPEN_PAGES = ("/",)  # the page: it holds no data and no token (its script reads the token from the address bar)
SUBPROTOCOL = "asearcher-demo"  # the WebSocket subprotocol the page asks for, beside `token.<token>`


@dataclass(frozen=True)
class Access:
    token: str
    hosts: frozenset[str]

    @classmethod
    def for_bind(cls, bind: str, allow_hosts: tuple[str, ...] = (), token: str | None = None) -> Access:
        """The hosts a server bound on `bind` answers to (`local_retriever.hosts.served_names`): loopback names, the
        bound address, this machine's names for a wildcard bind, and whatever the operator allowed."""
        return cls(token or secrets.token_urlsafe(24), served_names(bind, allow_hosts))

    def holds_token(self, scope, headers: Headers) -> bool:
        offered = [
            *parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", []),
            headers.get("authorization", "").removeprefix("token ").strip(),
            *(p.removeprefix("token.") for p in offered_subprotocols(headers) if p.startswith("token.")),
        ]
        return any(t and hmac.compare_digest(t.encode(), self.token.encode()) for t in offered)


def offered_subprotocols(headers: Headers) -> list[str]:
    return [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",") if p.strip()]


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
        if (
            scope["path"] in OPEN_PAGES
            or scope["path"].startswith(OPEN_PATHS)
            or self.access.holds_token(scope, headers)
        ):
            return None
        return 403, (
            "this demo needs its access token: open the URL `asearcher demo` printed when it started "
            "(http://HOST:PORT/#token=...)"
        )
