"""Web tools: Serper (Google) search, Jina Reader, or a direct fetch turned into clean markdown.

Every call goes through the on-disk cache, a per-host rate limit, and retries with backoff on
429, 5xx and timeouts. Direct fetches pass the URL guard at every redirect hop and stop reading
at `max_page_bytes`. Queries and URLs are written by a model: whatever they hold, and whatever
the services reply, a call returns or raises ToolError. Cache calls and HTML extraction block,
so they run in worker threads, off the event loop every trajectory of a rollout actor shares.
"""

from __future__ import annotations

import asyncio
import os
from urllib.parse import urljoin, urlsplit

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from ..agent.actions import scrub
from .base import ToolBox, ToolError
from .cache import DiskCache
from .ratelimit import HostRateLimiter
from .url_guard import BlockedURL, check_url

MAX_REDIRECTS = 5


class _Transient(Exception):
    pass


class WebToolBox(ToolBox):
    def __init__(self, tools_config):
        self.cfg = tools_config.web
        self.http = httpx.AsyncClient(timeout=self.cfg.timeout, follow_redirects=False,
                                      headers={"User-Agent": "asearcher-plugin/0.1 (+research agent)"})
        self.limiter = HostRateLimiter(self.cfg.per_host_rps)
        cache_dir = self.cfg.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "asearcher")
        self.cache = DiskCache(os.path.join(cache_dir, "web.sqlite"))
        self.allow = frozenset(h.lower() for h in self.cfg.allow_private_hosts)

    async def aclose(self) -> None:
        await self.http.aclose()

    def _retrying(self) -> AsyncRetrying:
        return AsyncRetrying(stop=stop_after_attempt(self.cfg.retries + 1), reraise=True,
                             wait=wait_random_exponential(multiplier=0.5, max=10), retry=retry_if_exception_type(_Transient))

    async def _request(self, method: str, url: str, **kw) -> httpx.Response:
        async for attempt in self._retrying():
            with attempt:
                await self.limiter.wait(urlsplit(url).hostname or "")
                try:
                    resp = await self.http.request(method, url, **kw)
                except (httpx.TimeoutException, httpx.TransportError) as exc:
                    raise _Transient(f"{type(exc).__name__} for {url}") from None
                except (httpx.HTTPError, httpx.InvalidURL) as exc:
                    raise ToolError(f"{type(exc).__name__} for {url}: {exc}") from None
                if resp.status_code == 429 or resp.status_code >= 500:
                    raise _Transient(f"HTTP {resp.status_code} from {urlsplit(url).hostname}")
                return resp
        raise AssertionError("unreachable")

    async def search(self, query: str, topk: int) -> list[dict]:
        key = os.environ.get(self.cfg.serper_api_key_env)
        if not key:
            raise ToolError(f"web search needs ${self.cfg.serper_api_key_env}")
        query = scrub(query)
        cache_key = f"serper:{topk}:{query}"
        cached = await self.cache.aget(cache_key)
        if cached is not None:
            return cached
        try:
            resp = await self._request("POST", self.cfg.serper_url, json={"q": query, "num": topk},
                                       headers={"X-API-KEY": key, "Content-Type": "application/json"})
        except _Transient as exc:
            raise ToolError(f"search failed after retries: {exc}") from None
        if resp.status_code != 200:
            raise ToolError(f"search failed: HTTP {resp.status_code}: {resp.text[:200]}")
        docs = serper_docs(resp, topk)
        await self.cache.aset(cache_key, docs)
        return docs

    async def access(self, url: str) -> str | None:
        url = scrub(url)
        cached = await self.cache.aget(f"page:{url}")
        if cached is not None:
            return cached
        jina = os.environ.get(self.cfg.jina_api_key_env)
        try:
            await check_url(url, self.allow)
            text = await (self._jina(url, jina) if jina else self._direct(url))
        except BlockedURL as exc:
            raise ToolError(f"access refused: {exc}") from None
        except _Transient as exc:
            raise ToolError(f"access failed after retries: {exc}") from None
        if text is not None:
            await self.cache.aset(f"page:{url}", text)
        return text

    async def _jina(self, url: str, key: str) -> str | None:
        resp = await self._request("GET", self.cfg.jina_url + url, headers={"Authorization": f"Bearer {key}"})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise ToolError(f"reader failed: HTTP {resp.status_code}")
        return resp.text

    async def _direct(self, url: str) -> str | None:
        for _ in range(MAX_REDIRECTS + 1):
            body, resp = await self._fetch_capped(url)
            if resp.status_code in (301, 302, 303, 307, 308) and "location" in resp.headers:
                try:
                    target = urljoin(url, resp.headers["location"])
                except ValueError as exc:
                    raise BlockedURL(f"malformed redirect to {resp.headers['location'][:200]!r}: {exc}") from None
                url = await check_url(target, self.allow)
                continue
            if resp.status_code == 404:
                return None
            if resp.status_code != 200:
                raise ToolError(f"access failed: HTTP {resp.status_code}")
            if _is_html(resp):
                return await asyncio.to_thread(html_to_markdown, _decode(body, resp), url)
            return _decode(body, resp)
        raise ToolError(f"access failed: more than {MAX_REDIRECTS} redirects")

    async def _fetch_capped(self, url: str) -> tuple[bytes, httpx.Response]:
        async for attempt in self._retrying():
            with attempt:
                await self.limiter.wait(urlsplit(url).hostname or "")
                try:
                    async with self.http.stream("GET", url) as resp:
                        if resp.status_code == 429 or resp.status_code >= 500:
                            raise _Transient(f"HTTP {resp.status_code} from {urlsplit(url).hostname}")
                        chunks, size = [], 0
                        async for chunk in resp.aiter_bytes():
                            chunks.append(chunk)
                            size += len(chunk)
                            if size >= self.cfg.max_page_bytes:
                                break
                        return b"".join(chunks)[: self.cfg.max_page_bytes], resp
                except (httpx.TimeoutException, httpx.TransportError) as exc:
                    raise _Transient(f"{type(exc).__name__} for {url}") from None
                except (httpx.HTTPError, httpx.InvalidURL) as exc:
                    raise ToolError(f"{type(exc).__name__} for {url}: {exc}") from None
        raise AssertionError("unreachable")


def serper_docs(resp: httpx.Response, topk: int) -> list[dict]:
    """Serper's `organic` results as documents; a reply that is not Serper's JSON is a ToolError."""
    try:
        data = resp.json()
    except ValueError:
        raise ToolError(f"search failed: the reply is not JSON ({resp.headers.get('content-type', '?')}): "
                        f"{resp.text[:200]!r}") from None
    if not isinstance(data, dict):
        raise ToolError(f"search failed: expected a JSON object, got {type(data).__name__}: {resp.text[:200]!r}")
    organic = data.get("organic") or []  # absent when nothing matched
    if not isinstance(organic, list):
        raise ToolError(f"search failed: 'organic' is a {type(organic).__name__}, not a list")
    rows = [r for r in organic if isinstance(r, dict)][:topk]
    return [{"title": _field(r, "title"), "url": _field(r, "link"), "text": _field(r, "snippet")} for r in rows]


def _field(row: dict, name: str) -> str:
    value = row.get(name)
    return "" if value is None else scrub(value if isinstance(value, str) else str(value))


def _is_html(resp: httpx.Response) -> bool:
    return "html" in resp.headers.get("content-type", "html").lower()


def _decode(body: bytes, resp: httpx.Response) -> str:
    encoding = resp.charset_encoding or "utf-8"
    try:
        return body.decode(encoding, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def html_to_markdown(html: str, url: str = "") -> str:
    """Main content as markdown (trafilatura); the whole page via markdownify when extraction finds nothing."""
    import trafilatura

    text = trafilatura.extract(html, url=url or None, output_format="markdown", include_links=True,
                               include_tables=True, favor_recall=True)
    if text and text.strip():
        return text.strip()
    from bs4 import BeautifulSoup
    from markdownify import markdownify

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["script", "style", "noscript", "nav", "footer", "header"]):
        tag.decompose()
    return " ".join(markdownify(str(soup)).split(" ")).strip()
