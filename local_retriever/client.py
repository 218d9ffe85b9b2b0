"""Async client for one or more knowledge-base servers: balancing, failover, retries.

Requests go to the healthy replica with the fewest requests in flight. What a failure says decides
what happens next:

- connection error, timeout, 429, 502, 503, 504, or a reply that is not JSON: the replica cannot serve
  now. It is marked down for `cooldown` seconds and the request is retried elsewhere with exponential
  backoff, up to `retries` times.
- any other 5xx (500): the replica is up, but this request failed on it. It is retried once, on another
  replica if there is one, and nothing is marked down; a second 500 raises `RetrievalServerError`, so
  a request that breaks servers cannot put healthy replicas in cooldown.
- 4xx (other than 429): the request is wrong; `RetrievalRequestError` is raised at once.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from typing import Sequence

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential


class RetrievalError(RuntimeError):
    pass


class RetrievalRequestError(RetrievalError):
    """The server refused the request (4xx): retrying would not help."""

    def __init__(self, url: str, status: int, message: str):
        super().__init__(f"{url} answered {status}: {message}")
        self.url, self.status, self.message = url, status, message


class RetrievalServerError(RetrievalError):
    """The request failed with a server error (500) on two replicas, or twice on the only one."""

    def __init__(self, url: str, status: int, message: str):
        super().__init__(f"{url} answered {status}: {message}")
        self.url, self.status, self.message = url, status, message


class RetrievalUnavailable(RetrievalError):
    """No replica answered after all retries."""


_JSON = {"content-type": "application/json"}
UNAVAILABLE = {429, 502, 503, 504}  # statuses that say the replica cannot serve now, whatever the request


class _Retryable(Exception):
    def __init__(self, url: str, reason: str):
        super().__init__(f"{url}: {reason}")
        self.url, self.reason = url, reason


class _ServerFault(_Retryable):
    """A 500: retried once, and the replica stays in rotation."""

    def __init__(self, url: str, status: int, message: str):
        super().__init__(url, f"HTTP {status}: {message}")
        self.status, self.message = status, message


def parse_urls(urls: str | Sequence[str]) -> list[str]:
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = []
    for u in items:
        u = u.strip().rstrip("/")
        for suffix in ("/retrieve", "/access", "/health"):
            if u.endswith(suffix):
                u = u[: -len(suffix)]
        if u:
            out.append(u if "://" in u else f"http://{u}")
    if not out:
        raise ValueError("no retrieval server URL given")
    return out


class RetrievalClient:
    def __init__(self, urls: str | Sequence[str], timeout: float = 30.0, retries: int = 3, backoff: float = 0.2,
                 max_backoff: float = 5.0, cooldown: float = 5.0, max_connections: int = 256):
        self.urls = parse_urls(urls)
        self.retries, self.backoff, self.max_backoff, self.cooldown = retries, backoff, max_backoff, cooldown
        # Idle connections are dropped well before the server's keep-alive (5 s), so a request is never sent on a
        # connection the server is closing at that moment (a ReadError that would put a healthy replica in cooldown).
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                              keepalive_expiry=2.0)
        self._http = httpx.AsyncClient(timeout=timeout, limits=limits)
        self._in_flight = Counter({u: 0 for u in self.urls})
        self._down_until = {u: 0.0 for u in self.urls}
        self._rr = itertools.count()
        self.counters = Counter()
        self.errors = Counter()

    async def __aenter__(self) -> "RetrievalClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _pick(self, tried: set[str]) -> str:
        now = time.monotonic()
        healthy = [u for u in self.urls if self._down_until[u] <= now]
        fresh = [u for u in healthy if u not in tried] or healthy
        if not fresh:
            # Every replica failed recently: try the one that failed longest ago rather than give up untried.
            return min(self.urls, key=lambda u: self._down_until[u])
        offset = next(self._rr)
        order = fresh[offset % len(fresh):] + fresh[: offset % len(fresh)]
        return min(order, key=lambda u: self._in_flight[u])

    async def _post(self, path: str, payload: dict) -> dict:
        # ASCII-escaped JSON: a lone surrogate in a query travels as `\ud800` and the server names it in a 422,
        # where encoding it as UTF-8 (what httpx's `json=` does) would raise here.
        body = json.dumps(payload, ensure_ascii=True).encode("ascii")
        tried: set[str] = set()
        last: dict[str, str] = {}
        faults = 0
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.retries + 1),
                wait=wait_random_exponential(multiplier=self.backoff, max=self.max_backoff),
                retry=retry_if_exception_type(_Retryable),
                reraise=True,
            ):
                with attempt:
                    url = self._pick(tried)
                    if tried:
                        self.counters["retries"] += 1
                        if url not in tried:
                            self.counters["failovers"] += 1
                    tried.add(url)
                    try:
                        return await self._once(url, path, body)
                    except _ServerFault as exc:
                        self.counters["server_errors"] += 1
                        faults += 1
                        if faults > 1:
                            raise RetrievalServerError(url, exc.status, exc.message) from None
                        last[url] = exc.reason
                        raise
                    except _Retryable as exc:
                        last[url] = exc.reason
                        self.errors[url] += 1
                        self._down_until[url] = time.monotonic() + self.cooldown
                        raise
        except _ServerFault as exc:  # the last attempt allowed ended in a 500
            raise RetrievalServerError(exc.url, exc.status, exc.message) from None
        except _Retryable:
            detail = "; ".join(f"{u}: {r}" for u, r in last.items())
            raise RetrievalUnavailable(f"no retrieval server answered {path} after {self.retries + 1} attempts ({detail})") from None
        raise AssertionError("unreachable")

    async def _once(self, url: str, path: str, body: bytes) -> dict:
        self._in_flight[url] += 1
        self.counters["requests"] += 1
        try:
            resp = await self._http.post(url + path, content=body, headers=_JSON)
        except httpx.TimeoutException:
            raise _Retryable(url, "timeout") from None
        except httpx.TransportError as exc:
            raise _Retryable(url, f"{type(exc).__name__}: {exc}") from None
        finally:
            self._in_flight[url] -= 1
        if resp.status_code in UNAVAILABLE:
            raise _Retryable(url, f"HTTP {resp.status_code}")
        if resp.status_code >= 500:
            raise _ServerFault(url, resp.status_code, _error_message(resp))
        if resp.status_code >= 400:
            raise RetrievalRequestError(url, resp.status_code, _error_message(resp))
        try:
            return resp.json()
        except ValueError:
            raise _Retryable(url, "reply is not JSON") from None

    async def retrieve(self, queries: list[str], topk: int = 5, return_scores: bool = True) -> list[list[dict]]:
        data = await self._post("/retrieve", {"queries": list(queries), "topk": topk, "return_scores": return_scores})
        return _checked(data, len(queries), "/retrieve")

    async def access(self, urls: list[str]) -> list[dict | None]:
        data = await self._post("/access", {"urls": list(urls)})
        return _checked(data, len(urls), "/access")

    async def health(self, url: str | None = None) -> dict:
        resp = await self._http.get((url or self.urls[0]).rstrip("/") + "/health")
        resp.raise_for_status()
        return resp.json()

    def down(self) -> list[str]:
        """Replicas in cooldown now."""
        now = time.monotonic()
        return [u for u in self.urls if self._down_until[u] > now]

    def stats(self) -> dict:
        return {**self.counters, "errors": dict(self.errors), "down": self.down()}


def _error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if "detail" in body:
            return str(body["detail"])
    return str(body)[:500]


def _checked(data: dict, n: int, path: str) -> list:
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list) or len(result) != n:
        got = len(result) if isinstance(result, list) else type(result).__name__
        raise RetrievalError(f"malformed {path} reply: expected 'result' with {n} entries, got {got}")
    return result
