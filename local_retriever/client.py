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

The rule is implemented once, in `local_retriever.endpoints`, which every endpoint client of the project shares.
"""

from __future__ import annotations

from collections.abc import Sequence

from .endpoints import (
    EndpointError,
    EndpointRefused,
    EndpointServerError,
    EndpointUnavailable,
    MultiURLClient,
    normalize_urls,
)

# The retrieval names of the shared client's errors: callers catch these, and the shared rule raises them.
RetrievalError = EndpointError
RetrievalRequestError = EndpointRefused  # 4xx: retrying would not help
RetrievalServerError = EndpointServerError  # a 500 on two replicas, or twice on the only one
RetrievalUnavailable = EndpointUnavailable  # no replica answered after all retries


def parse_urls(urls: str | Sequence[str]) -> list[str]:
    try:
        return normalize_urls(urls, ("/retrieve", "/access", "/health"))
    except ValueError:
        raise ValueError("no retrieval server URL given") from None


class RetrievalClient:
    """The Search-R1 /retrieve and ASearcher /access calls over `local_retriever.endpoints.MultiURLClient`."""

    def __init__(
        self,
        urls: str | Sequence[str],
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        cooldown: float = 5.0,
        max_connections: int = 256,
    ):
        self._client = MultiURLClient(
            parse_urls(urls),
            "retrieval server",
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            cooldown=cooldown,
            max_connections=max_connections,
        )
        self.urls = self._client.urls
        self.counters = self._client.counters
        self.errors = self._client.pool.errors

    async def __aenter__(self) -> RetrievalClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def retrieve(self, queries: list[str], topk: int = 5, return_scores: bool = True) -> list[list[dict]]:
        payload = {"queries": list(queries), "topk": topk, "return_scores": return_scores}
        data = await self._client.post_json("/retrieve", payload)
        return checked_result(data, len(queries), "/retrieve")

    async def access(self, urls: list[str]) -> list[dict | None]:
        data = await self._client.post_json("/access", {"urls": list(urls)})
        return checked_result(data, len(urls), "/access")

    async def health(self, url: str | None = None) -> dict:
        resp = await self._client.http.get((url or self.urls[0]).rstrip("/") + "/health")
        resp.raise_for_status()
        return resp.json()

    def down(self) -> list[str]:
        """Replicas in cooldown now."""
        return self._client.pool.down()

    def stats(self) -> dict:
        return self._client.stats()


def checked_result(data: dict, n: int, path: str) -> list:
    """The `result` list of a `/retrieve` or `/access` reply, one entry per item asked for; else RetrievalError."""
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list) or len(result) != n:
        got = len(result) if isinstance(result, list) else type(result).__name__
        raise RetrievalError(f"malformed {path} reply: expected 'result' with {n} entries, got {got}")
    return result
