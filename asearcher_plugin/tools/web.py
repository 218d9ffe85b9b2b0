"""Web tools: Serper (Google) search, Jina Reader, or a direct fetch turned into clean markdown.

Every call goes through the on-disk cache, a per-host rate limit, and retries with backoff on
429, 5xx and timeouts (the shared endpoint client's rule, `local_retriever.endpoints`), all within
`fetch_deadline` seconds. Page URLs pass the URL guard before
the cache is read, direct fetches connect only to the addresses the guard checked and are checked
again at every redirect hop, and bodies (direct or from Jina) stop being read at `max_page_bytes`.
Queries and URLs are written by a model: whatever they hold, and whatever
the services reply, a call returns or raises ToolError. Cache calls and HTML extraction block,
so they run in worker threads, off the event loop every trajectory of a rollout actor shares.
"""

from __future__ import annotations

import asyncio
import os
from urllib.parse import urljoin, urlsplit

import httpx

from local_retriever.endpoints import (
    EndpointError,
    EndpointUnavailable,
    MultiURLClient,
    Retryable,
    URLPool,
    raise_if_retryable,
)

from ..utils.disk_cache import DiskCache
from ..utils.text import scrub
from .base import ToolBox, ToolError, ToolUnavailable
from .ratelimit import HostRateLimiter
from .url_guard import BlockedURL, PinnedBackend, Target, guard

MAX_REDIRECTS = 5


class WebToolBox(ToolBox):
    def __init__(self, tools_config):
        self.cfg = tools_config.web
        headers = {"User-Agent": "asearcher-plugin/0.1 (+research agent)"}
        # Serper and Jina are the operator's endpoints; pages are the model's choice and go through
        # a client that can connect only to addresses the URL guard checked (and takes no proxy
        # from the environment, which would resolve the host again).
        self.http = httpx.AsyncClient(timeout=self.cfg.timeout, follow_redirects=False, headers=headers)
        transport, self.pins = pinned_transport()
        self.pages = httpx.AsyncClient(
            timeout=self.cfg.timeout, follow_redirects=False, headers=headers, transport=transport, trust_env=False
        )
        self.limiter = HostRateLimiter(self.cfg.per_host_rps)
        cache_dir = self.cfg.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "asearcher")
        self.cache = DiskCache(os.path.join(cache_dir, "web.sqlite"))
        self.allow = frozenset(h.lower() for h in self.cfg.allow_private_hosts)

    async def aclose(self) -> None:
        await self.http.aclose()
        await self.pages.aclose()

    def _endpoint(self, url: str, name: str, http: httpx.AsyncClient) -> MultiURLClient:
        """The shared retry rule for one URL, taken as written (no trailing-slash or scheme normalising)."""
        return MultiURLClient(
            url, name, http=http, pool=URLPool([url]), retries=self.cfg.retries, backoff=0.5, max_backoff=10
        )

    async def _within_deadline(self, what: str, call, service: bool = True):
        """`call` bounded in total: httpx's timeout is per read, and a server may send one byte per read. `service`:
        the call goes to a service of the run (Serper, Jina), whose silence is the infrastructure's failure; a page
        fetched directly is the model's choice of site."""
        try:
            return await asyncio.wait_for(call, self.cfg.fetch_deadline)
        except asyncio.TimeoutError:
            error = ToolUnavailable if service else ToolError
            deadline = self.cfg.fetch_deadline
            raise error(f"{what} failed: no complete reply within the {deadline:g} s deadline") from None

    async def _request(self, method: str, url: str, **kw) -> httpx.Response:
        async def attempt(u: str) -> httpx.Response:
            await self.limiter.wait(urlsplit(u).hostname or "")
            try:
                return await endpoint.send(u, method, **kw)
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise ToolError(f"{type(exc).__name__} for {u[:200]}: {exc}") from None

        endpoint = self._endpoint(url, "search API", self.http)
        return await endpoint.call(attempt)

    async def _search(self, query: str, topk: int) -> list[dict]:
        return await self._within_deadline("search", self._serper(query, topk))

    async def _serper(self, query: str, topk: int) -> list[dict]:
        key = os.environ.get(self.cfg.serper_api_key_env)
        if not key:
            raise ToolUnavailable(f"web search needs ${self.cfg.serper_api_key_env}")
        cache_key = f"serper:{topk}:{query}"
        cached = await self.cache.aget(cache_key)
        if cached is not None:
            return cached
        try:
            resp = await self._request(
                "POST",
                self.cfg.serper_url,
                json={"q": query, "num": topk},
                headers={"X-API-KEY": key, "Content-Type": "application/json"},
            )
        except EndpointUnavailable as exc:  # 429, 5xx, timeouts after the retries
            raise ToolUnavailable(f"search failed: {exc}") from None
        except EndpointError as exc:
            raise ToolError(f"search failed: {exc}") from None
        if resp.status_code != 200:
            raise ToolError(f"search failed: HTTP {resp.status_code}: {resp.text[:200]}")
        docs = serper_docs(resp, topk)
        await self.cache.aset(cache_key, docs)
        return docs

    async def _access(self, url: str) -> str | None:
        reader = bool(os.environ.get(self.cfg.jina_api_key_env))
        return await self._within_deadline("access", self._page(url), service=reader)

    async def _page(self, url: str) -> str | None:
        jina = os.environ.get(self.cfg.jina_api_key_env)
        try:
            # The guard before the cache: a page cached while a host was allowed must not reach a
            # config that does not allow it.
            target = await guard(url, self.allow)
            cache_key = f"page:{target.url}"
            cached = await self.cache.aget(cache_key)
            if cached is not None:
                return cached
            text = await (self._jina(target.url, jina) if jina else self._direct(target))
        except BlockedURL as exc:
            raise ToolError(f"access refused: {exc}") from None
        except EndpointUnavailable as exc:
            # the reader service is the run's; a site that does not answer is the page the model chose
            raise (ToolUnavailable if jina else ToolError)(f"access failed: {exc}") from None
        except EndpointError as exc:
            raise ToolError(f"access failed: {exc}") from None
        if text is not None:
            await self.cache.aset(cache_key, text)
        return text

    async def _jina(self, url: str, key: str) -> str | None:
        # Jina Reader takes the target in a POST body; appended to the path, its fragment would be
        # dropped and its query read as the reader's own.
        body, resp = await self._fetch_capped(
            self.http,
            "POST",
            self.cfg.jina_url,
            "reader API",
            data={"url": url},
            headers={"Authorization": f"Bearer {key}"},
        )
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise ToolError(f"reader failed: HTTP {resp.status_code}")
        return _decode(body, resp)

    async def _direct(self, target: Target) -> str | None:
        for _ in range(MAX_REDIRECTS + 1):
            self.pins.pin(target)
            body, resp = await self._fetch_capped(self.pages, "GET", target.url, "page server")
            if resp.status_code in (301, 302, 303, 307, 308) and "location" in resp.headers:
                try:
                    hop = urljoin(target.url, resp.headers["location"])
                except ValueError as exc:
                    raise BlockedURL(f"malformed redirect to {resp.headers['location'][:200]!r}: {exc}") from None
                target = await guard(hop, self.allow)
                continue
            if resp.status_code == 404:
                return None
            if resp.status_code != 200:
                raise ToolError(f"access failed: HTTP {resp.status_code}")
            if _is_html(resp):
                return await asyncio.to_thread(html_to_markdown, _decode(body, resp), target.url)
            return _decode(body, resp)
        raise ToolError(f"access failed: more than {MAX_REDIRECTS} redirects")

    async def _fetch_capped(
        self, client: httpx.AsyncClient, method: str, url: str, name: str, **kw
    ) -> tuple[bytes, httpx.Response]:
        """The body streamed up to `max_page_bytes` (the rest is never read), with the shared retry rule."""
        return await self._endpoint(url, name, client).call(lambda u: self._read_capped(client, method, u, **kw))

    async def _read_capped(
        self, client: httpx.AsyncClient, method: str, url: str, **kw
    ) -> tuple[bytes, httpx.Response]:
        await self.limiter.wait(urlsplit(url).hostname or "")
        try:
            async with client.stream(method, url, **kw) as resp:
                raise_if_retryable(urlsplit(url).hostname or url[:200], resp)
                chunks, size = [], 0
                async for chunk in resp.aiter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size >= self.cfg.max_page_bytes:
                        break
                return b"".join(chunks)[: self.cfg.max_page_bytes], resp
        except httpx.RemoteProtocolError as exc:
            # httpx parses a redirect's Location even when it does not follow it; a malformed one
            # is the page's fault, and asking again would get the same.
            if str(exc).startswith("Invalid URL in location header"):
                raise BlockedURL(f"malformed redirect from {url[:200]}: {exc}") from None
            raise Retryable(url[:200], type(exc).__name__) from None
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise Retryable(url[:200], f"{type(exc).__name__}: {exc}") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ToolError(f"{type(exc).__name__} for {url[:200]}: {exc}") from None


def pinned_transport() -> tuple[httpx.AsyncHTTPTransport, PinnedBackend]:
    """An httpx transport whose connections go only to addresses pinned in the returned backend."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    pool = getattr(transport, "_pool", None)
    # httpx takes no network backend; its pool hands this attribute to every connection it opens.
    if not hasattr(pool, "_network_backend"):
        raise RuntimeError(
            f"httpx {httpx.__version__} keeps no httpcore pool with a network backend; "
            "the URL guard cannot pin addresses"
        )
    backend = PinnedBackend(pool._network_backend)
    pool._network_backend = backend
    return transport, backend


def serper_docs(resp: httpx.Response, topk: int) -> list[dict]:
    """Serper's `organic` results as documents; a reply that is not Serper's JSON is a ToolError."""
    try:
        data = resp.json()
    except ValueError:
        raise ToolError(
            f"search failed: the reply is not JSON ({resp.headers.get('content-type', '?')}): {resp.text[:200]!r}"
        ) from None
    if not isinstance(data, dict):
        raise ToolError(f"search failed: expected a JSON object, got {type(data).__name__}: {resp.text[:200]!r}")
    organic = data.get("organic") or []  # absent when nothing matched
    if not isinstance(organic, list):
        raise ToolError(f"search failed: 'organic' is a {type(organic).__name__}, not a list")
    rows = [r for r in organic if isinstance(r, dict)][:topk]
    return [{"title": _field(r, "title"), "url": _field(r, "link"), "text": _field(r, "snippet")} for r in rows]


def _field(row: dict, name: str) -> str:
    # JSON may escape a lone surrogate (\ud800): scrubbed here, before the disk cache (orjson refuses them), not
    # only where the documents leave the toolbox
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

    text = trafilatura.extract(
        html, url=url or None, output_format="markdown", include_links=True, include_tables=True, favor_recall=True
    )
    if text and text.strip():
        return text.strip()
    from bs4 import BeautifulSoup
    from markdownify import markdownify

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["script", "style", "noscript", "nav", "footer", "header"]):
        tag.decompose()
    return " ".join(markdownify(str(soup)).split(" ")).strip()
