"""Async client for one or more knowledge-base servers: balancing, failover, retries.

Requests go to the healthy replica with the fewest requests in flight. A connection error,
timeout, 429 or 5xx marks that replica down for `cooldown` seconds and the request is retried
elsewhere with exponential backoff; a 4xx is the caller's mistake and is raised at once.
"""

from __future__ import annotations

import itertools
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


class RetrievalUnavailable(RetrievalError):
    """No replica answered after all retries."""


class _Retryable(Exception):
    def __init__(self, url: str, reason: str):
        super().__init__(f"{url}: {reason}")
        self.url, self.reason = url, reason


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
        self._http = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=max_connections,
                                                                             max_keepalive_connections=max_connections))
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
        tried: set[str] = set()
        last: dict[str, str] = {}
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
                        return await self._once(url, path, payload)
                    except _Retryable as exc:
                        last[url] = exc.reason
                        self.errors[url] += 1
                        self._down_until[url] = time.monotonic() + self.cooldown
                        raise
        except _Retryable:
            detail = "; ".join(f"{u}: {r}" for u, r in last.items())
            raise RetrievalUnavailable(f"no retrieval server answered {path} after {self.retries + 1} attempts ({detail})") from None
        raise AssertionError("unreachable")

    async def _once(self, url: str, path: str, payload: dict) -> dict:
        self._in_flight[url] += 1
        self.counters["requests"] += 1
        try:
            resp = await self._http.post(url + path, json=payload)
        except httpx.TimeoutException:
            raise _Retryable(url, "timeout") from None
        except httpx.TransportError as exc:
            raise _Retryable(url, f"{type(exc).__name__}: {exc}") from None
        finally:
            self._in_flight[url] -= 1
        if resp.status_code == 429 or resp.status_code >= 500:
            raise _Retryable(url, f"HTTP {resp.status_code}")
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

    def stats(self) -> dict:
        return {**self.counters, "errors": dict(self.errors)}


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
