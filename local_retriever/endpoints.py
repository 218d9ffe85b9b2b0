"""One async client for every HTTP endpoint the project calls: KB servers, OpenAI-compatible servers, web APIs.

It lives in `local_retriever`, the bottom layer: `asearcher_plugin` and `data_synth` both import it already, and it
imports neither, so every caller can share this module without a cycle (the top-level package names are fixed, so
it is not a package of its own). Nothing here knows a wire format beyond "JSON in, JSON out"; callers pass a
`check` that reads the reply.

A request goes to the URL not cooling down with the fewest requests in flight (round-robin on ties). What a
failure says decides what happens next:

- connection error, timeout, 429, 502, 503, 504, or a reply that is not JSON: the URL cannot serve now. It is
  put in cooldown for `cooldown` seconds and the request is retried elsewhere with exponential backoff
  (tenacity's random exponential wait), up to `retries` times.
- any other 5xx (500): the URL is up, but this request failed on it. It is retried once, on another URL if
  there is one, and nothing is put in cooldown; a second 500 raises `EndpointServerError`, so a request that
  breaks servers cannot take healthy ones out of rotation.
- a reply the caller's `check` rejects (`BadReply`, e.g. a judge reply with no verdict): retried like the
  first kind, but nothing is put in cooldown.
- 4xx (other than 429): the request is wrong; `EndpointRefused` is raised at once.

When every URL is cooling down the one that failed longest ago is tried rather than giving up untried.
Exhausted retries raise `EndpointUnavailable`, naming each URL's last failure.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from .log_throttle import throttled

log = throttled(__name__)  # one WARNING per URL a minute: a dead replica must not bury the rest of the log

T = TypeVar("T")
UNAVAILABLE = {429, 502, 503, 504}  # statuses that say the URL cannot serve now, whatever the request
_JSON = {"content-type": "application/json"}


class EndpointError(RuntimeError):
    """Base of every error this client raises."""


class EndpointRefused(EndpointError, ValueError):
    """The server refused the request (4xx other than 429): retrying would not help."""

    def __init__(self, url: str, status: int, message: str):
        super().__init__(f"{url} answered HTTP {status}: {message}")
        self.url, self.status, self.message = url, status, message


class EndpointUnavailable(EndpointError):
    """No URL gave a usable answer within the retries; `bad_reply` when the last failure was a reply the
    caller's `check` rejected (the server answered), not a transport or server error."""

    def __init__(self, message: str, bad_reply: bool = False):
        super().__init__(message)
        self.bad_reply = bad_reply


class EndpointServerError(EndpointUnavailable):
    """The request failed with a server error (500) on two URLs, or twice on the only one.

    A kind of `EndpointUnavailable`: callers that count infrastructure failures catch both as one.
    """

    def __init__(self, url: str, status: int, message: str):
        super().__init__(f"{url} answered HTTP {status}: {message}")
        self.url, self.status, self.message = url, status, message


class Retryable(Exception):
    """Raised by an attempt: this URL cannot serve now (cooldown, then retry elsewhere)."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"{url}: {reason}")
        self.url, self.reason = url, reason


class ServerFault(Retryable):
    """Raised by an attempt: a 500; retried once, and the URL stays in rotation."""

    def __init__(self, url: str, status: int, message: str):
        super().__init__(url, f"HTTP {status}: {message}")
        self.status, self.message = status, message


class BadReply(Retryable):
    """Raised by a `check`: the reply cannot be used; asked again, and the URL stays in rotation."""

    def __init__(self, reason: str, url: str = ""):
        super().__init__(url, reason)


def normalize_urls(urls: str | Sequence[str], strip_suffixes: Sequence[str] = ()) -> list[str]:
    """URLs from a list or a comma-separated string: trimmed, no trailing slash or `strip_suffixes`, with a scheme."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = []
    for u in items:
        u = str(u).strip().rstrip("/")
        for suffix in strip_suffixes:
            if u.endswith(suffix):
                u = u[: -len(suffix)]
        if u:
            out.append(u if "://" in u else f"http://{u}")
    if not out:
        raise ValueError("no endpoint URL given")
    return out


class URLPool:
    """Which URLs are cooling down and how busy each is; no I/O, so it can outlive event loops and clients."""

    def __init__(self, urls: Sequence[str], cooldown: float = 5.0):
        self.urls, self.cooldown = list(urls), cooldown
        self.in_flight = Counter({u: 0 for u in self.urls})
        self.down_until = {u: 0.0 for u in self.urls}
        self.errors: Counter = Counter()
        self._rr = itertools.count()

    def pick(self, tried: set[str]) -> str:
        now = time.monotonic()
        healthy = [u for u in self.urls if self.down_until[u] <= now]
        fresh = [u for u in healthy if u not in tried] or healthy
        if not fresh:
            return min(self.urls, key=lambda u: self.down_until[u])
        offset = next(self._rr) % len(fresh)
        return min(fresh[offset:] + fresh[:offset], key=lambda u: self.in_flight[u])

    def cool(self, url: str) -> None:
        self.errors[url] += 1
        self.down_until[url] = time.monotonic() + self.cooldown

    def down(self) -> list[str]:
        now = time.monotonic()
        return [u for u in self.urls if self.down_until[u] > now]


class MultiURLClient:
    """Requests to one logical endpoint served at several URLs, with the failover rule above.

    `name` says what the endpoint is in error messages ("retrieval server", "judge"). `http` may be shared
    (it is then not closed here); `pool` may be shared by clients that should see the same cooldowns.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        name: str = "endpoint",
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        cooldown: float = 5.0,
        headers: dict | None = None,
        http: httpx.AsyncClient | None = None,
        pool: URLPool | None = None,
        max_connections: int = 256,
    ):
        self.name, self.retries, self.backoff, self.max_backoff = name, retries, backoff, max_backoff
        self.pool = pool or URLPool(normalize_urls(urls), cooldown)
        self.headers = dict(headers or {})
        self._own_http = http is None
        if http is None:
            # Idle connections are dropped well before a uvicorn server's keep-alive (5 s), so a request is never
            # sent on a connection the server is closing at that moment (a ReadError that would cool a good URL).
            limits = httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=2.0
            )
            http = httpx.AsyncClient(timeout=timeout, limits=limits)
        self.http = http
        self.counters: Counter = Counter()
        self._backoff = wait_random_exponential(multiplier=backoff, max=max_backoff)

    def _wait(self, state) -> float:
        seconds = self._backoff(state)
        self.counters["backoff_seconds"] += seconds  # time spent waiting between attempts, reported by stats()
        return seconds

    @property
    def urls(self) -> list[str]:
        return self.pool.urls

    async def __aenter__(self) -> MultiURLClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_http:
            await self.http.aclose()

    def stats(self) -> dict:
        return {**self.counters, "errors": dict(self.pool.errors), "down": self.pool.down()}

    async def call(self, attempt: Callable[[str], Awaitable[T]], what: str = "") -> T:
        """`attempt(url)` on URLs in turn until it returns; it raises `Retryable` kinds or gives up for good."""
        tried: set[str] = set()
        last: dict[str, str] = {}
        faults = 0
        try:
            async for step in AsyncRetrying(
                stop=stop_after_attempt(self.retries + 1),
                wait=self._wait,
                retry=retry_if_exception_type(Retryable),
                reraise=True,
            ):
                with step:
                    url = self.pool.pick(tried)
                    if tried:
                        self.counters["retries"] += 1
                        if url not in tried:
                            self.counters["failovers"] += 1
                    tried.add(url)
                    self.pool.in_flight[url] += 1
                    self.counters["requests"] += 1
                    try:
                        return await attempt(url)
                    except ServerFault as exc:
                        self.counters["server_errors"] += 1
                        faults += 1
                        if faults > 1:
                            raise EndpointServerError(url, exc.status, exc.message) from None
                        last[url] = exc.reason
                        log.warning(
                            "%s %s: %s; retried once elsewhere",
                            self.name,
                            url,
                            exc.reason,
                            extra={"throttle_key": ("500", url)},
                        )
                        raise
                    except BadReply as exc:
                        self.counters["bad_replies"] += 1
                        last[url] = exc.reason
                        raise
                    except Retryable as exc:
                        last[url] = exc.reason
                        self.pool.cool(url)
                        log.warning(
                            "%s %s: %s; cooling down %gs, failing over",
                            self.name,
                            url,
                            exc.reason,
                            self.pool.cooldown,
                            extra={"throttle_key": ("cool", url)},
                        )
                        raise
                    finally:
                        self.pool.in_flight[url] -= 1
        except ServerFault as exc:  # the last attempt allowed ended in a 500
            raise EndpointServerError(exc.url, exc.status, exc.message) from None
        except Retryable as exc:
            detail = "; ".join(f"{u[:200]}: {r}" for u, r in last.items())
            where = f" {what}" if what else ""
            raise EndpointUnavailable(
                f"no {self.name} answered{where} after {self.retries + 1} attempts ({detail})",
                bad_reply=isinstance(exc, BadReply),
            ) from None
        raise AssertionError("unreachable")

    async def send(self, url: str, method: str, **kw) -> httpx.Response:
        """One request; transport failures and the statuses that call for a retry raise `Retryable` kinds."""
        headers = {**self.headers, **(kw.pop("headers", None) or {})}
        try:
            resp = await self.http.request(method, url, headers=headers, **kw)
        except httpx.TimeoutException:
            raise Retryable(url, "timeout") from None
        except httpx.TransportError as exc:
            raise Retryable(url, f"{type(exc).__name__}: {exc}") from None
        raise_if_retryable(url, resp)
        return resp

    async def post_json(self, path: str, payload: Any, check: Callable[[Any], T] | None = None) -> T:
        """POST `payload` as JSON to `path` on some URL; the reply's JSON, or what `check` makes of it."""
        # ASCII-escaped JSON: a lone surrogate (model output, dataset text) travels as `\ud800` and the server
        # can name it, where encoding it as UTF-8 (what httpx's `json=` does) would raise here.
        body = json.dumps(payload, ensure_ascii=True).encode("ascii")

        async def attempt(url: str):
            resp = await self.send(url + path, "POST", content=body, headers=_JSON)
            if resp.status_code >= 400:
                raise EndpointRefused(url, resp.status_code, error_message(resp))
            try:
                data = resp.json()
            except ValueError:
                raise Retryable(url, "reply is not JSON") from None
            if check is None:
                return data
            try:
                return check(data)
            except BadReply as exc:
                raise BadReply(exc.reason, url) from None

        return await self.call(attempt, path)


def raise_if_retryable(url: str, resp: httpx.Response) -> None:
    if resp.status_code in UNAVAILABLE:
        raise Retryable(url, f"HTTP {resp.status_code}")
    if resp.status_code >= 500:
        raise ServerFault(url, resp.status_code, error_message(resp))


def error_message(resp: httpx.Response) -> str:
    """The server's own words: `{"error": {"message"}}` (OpenAI, the KB server), `{"detail"}` (FastAPI), or text."""
    try:
        body = resp.json()
    except httpx.ResponseNotRead:  # a streamed reply whose body is not read
        return f"HTTP {resp.status_code}"
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
        if "detail" in body:
            return str(body["detail"])
    return str(body)[:500]


class EndpointConfig(BaseModel):
    """The one endpoint config shape: `base_urls` (several share the load and fail over), key, timeout, retries.

    The older single `base_url` (a string, or a comma-separated list) is accepted as an alias, so configs and
    recipes written for it still load.
    """

    model_config = ConfigDict(extra="forbid")

    base_urls: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8000/v1"],
        description="OpenAI-compatible base URLs (…/v1); the old `base_url` is an alias",
    )
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key")
    timeout: float = Field(600.0, gt=0, description="seconds per connect or read")
    retries: int = Field(
        3,
        ge=0,
        description="retries of one request on connection errors, timeouts, 429 and 5xx, "
        "each on another URL when there is one, with exponential backoff",
    )

    @model_validator(mode="before")
    @classmethod
    def _base_url_alias(cls, data):
        if isinstance(data, dict) and "base_url" in data:
            if "base_urls" in data:
                raise ValueError("give base_urls, or its older alias base_url, not both")
            data = {k: v for k, v in data.items() if k != "base_url"} | {"base_urls": data["base_url"]}
        return data

    @field_validator("base_urls", mode="before")
    @classmethod
    def _urls(cls, value):
        if isinstance(value, (str, list, tuple)):
            return normalize_urls(value)
        return value

    def api_key(self) -> str:
        """The key in `$api_key_env`, or "none" (local servers take any); the one place the variable is read."""
        return os.environ.get(self.api_key_env, "none")

    def client(
        self, name: str, *, http: httpx.AsyncClient | None = None, pool: URLPool | None = None, cooldown: float = 10.0
    ) -> MultiURLClient:
        """A client for this endpoint, sending `Authorization: Bearer <api_key()>`."""
        return MultiURLClient(
            self.base_urls,
            name,
            timeout=self.timeout,
            retries=self.retries,
            cooldown=cooldown,
            headers={"Authorization": f"Bearer {self.api_key()}"},
            http=http,
            pool=pool,
        )
