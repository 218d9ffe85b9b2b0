"""Web tools against local HTTP servers speaking Serper's and Jina's wire formats, plus real HTML pages."""

import asyncio

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response

from asearcher_plugin.config import ToolsConfig
from asearcher_plugin.tools.base import ToolError
from asearcher_plugin.tools.url_guard import BlockedURL, check_url
from asearcher_plugin.tools.web import WebToolBox, html_to_markdown
from tests.http_helpers import serve_app

PAGE = """<html><head><title>Luanda</title><script>var x = 1;</script></head><body>
<nav>Home | About</nav><article><h1>Luanda</h1><p>Luanda is the capital and largest city of Angola.</p>
<p>It lies on the Atlantic coast and is the country's chief seaport.</p></article><footer>(c) 2026</footer></body></html>"""


def web_app():
    app = FastAPI()
    app.state.hits = {"search": 0, "flaky": 0, "jina": 0}

    @app.post("/search")
    async def search(request: Request):
        app.state.hits["search"] += 1
        if request.headers.get("x-api-key") != "test-key":
            return JSONResponse({"message": "Unauthorized"}, status_code=403)
        body = await request.json()
        organic = [{"title": f"Result {i} for {body['q']}", "link": f"https://example.org/{i}", "snippet": f"snippet {i}"}
                   for i in range(body["num"])]
        return {"searchParameters": {"q": body["q"]}, "organic": organic}

    @app.get("/page")
    async def page():
        return HTMLResponse(PAGE)

    @app.get("/latin1")
    async def latin1():
        return Response("<html><body><p>São Tomé e Príncipe é um país.</p></body></html>".encode("latin-1"),
                        media_type="text/html; charset=latin-1")

    @app.get("/flaky")
    async def flaky():
        app.state.hits["flaky"] += 1
        if app.state.hits["flaky"] < 3:
            return PlainTextResponse("slow down", status_code=429)
        return PlainTextResponse("finally", media_type="text/plain")

    @app.get("/huge")
    async def huge():
        return PlainTextResponse("x" * 200_000)

    @app.get("/to-metadata")
    async def to_metadata():
        return RedirectResponse("http://169.254.169.254/latest/meta-data/")

    @app.get("/missing")
    async def missing():
        return PlainTextResponse("no", status_code=404)

    @app.get("/jina/{url:path}")
    async def jina(url: str, request: Request):
        app.state.hits["jina"] += 1
        assert request.headers["authorization"] == "Bearer jina-key"
        return PlainTextResponse(f"Title: page\n\nMarkdown of {url}")

    return app


@pytest.fixture()
def web(tmp_path, monkeypatch):
    app = web_app()
    with serve_app(app) as url:
        cfg = ToolsConfig(backend="web")
        cfg.web.serper_url = f"{url}/search"
        cfg.web.jina_url = f"{url}/jina/"
        cfg.web.cache_dir = str(tmp_path / "cache")
        cfg.web.allow_private_hosts = ["127.0.0.1"]
        cfg.web.max_page_bytes = 50_000
        cfg.web.per_host_rps = 1000
        monkeypatch.setenv("SERPER_API_KEY", "test-key")
        monkeypatch.delenv("JINA_API_KEY", raising=False)
        yield url, app, cfg


def test_serper_search_and_cache(web):
    url, app, cfg = web

    async def run():
        box = WebToolBox(cfg)
        docs = await box.search("capital of Angola", 3)
        again = await box.search("capital of Angola", 3)
        await box.aclose()
        return docs, again

    docs, again = asyncio.run(run())
    assert [d["url"] for d in docs] == [f"https://example.org/{i}" for i in range(3)]
    assert docs == again and app.state.hits["search"] == 1  # the second call came from the disk cache


def test_search_without_key_is_a_tool_error(web, monkeypatch):
    _, _, cfg = web
    monkeypatch.delenv("SERPER_API_KEY")
    with pytest.raises(ToolError, match="SERPER_API_KEY"):
        asyncio.run(WebToolBox(cfg).search("q", 3))


def test_direct_fetch_cleans_html_and_handles_encodings_retries_and_caps(web):
    url, app, cfg = web

    async def run():
        box = WebToolBox(cfg)
        out = {name: await box.access(f"{url}/{name}") for name in ("page", "latin1", "flaky", "huge", "missing")}
        await box.aclose()
        return out

    out = asyncio.run(run())
    assert "capital and largest city of Angola" in out["page"] and "var x" not in out["page"]
    assert "São Tomé" in out["latin1"]
    assert out["flaky"] == "finally" and app.state.hits["flaky"] == 3  # two 429s retried
    assert len(out["huge"]) == 50_000  # response size capped
    assert out["missing"] is None


def test_jina_reader_is_used_with_a_key(web, monkeypatch):
    url, app, cfg = web
    monkeypatch.setenv("JINA_API_KEY", "jina-key")
    text = asyncio.run(WebToolBox(cfg).access(f"{url}/page"))
    assert text.startswith("Title: page") and app.state.hits["jina"] == 1


def test_url_guard_blocks_internal_targets(web):
    url, _, cfg = web

    async def blocked(target, allow=frozenset()):
        with pytest.raises(BlockedURL) as err:
            await check_url(target, allow)
        return str(err.value)

    async def run():
        assert "only http(s)" in await blocked("file:///etc/passwd")
        assert "non-public" in await blocked("http://127.0.0.1:8080/admin")
        assert "non-public" in await blocked("http://169.254.169.254/latest/meta-data/")
        assert "non-public" in await blocked("http://[::1]/")
        assert "non-public" in await blocked("http://10.0.0.7/")
        assert "metadata" in await blocked("http://metadata.google.internal/computeMetadata/v1/")
        assert await check_url("http://127.0.0.1:1/x", {"127.0.0.1"}) == "http://127.0.0.1:1/x"
        # A redirect from an allowed host to the metadata address is re-checked and refused.
        box = WebToolBox(cfg)
        with pytest.raises(ToolError, match="non-public address 169.254.169.254"):
            await box.access(f"{url}/to-metadata")
        await box.aclose()

    asyncio.run(run())


def test_html_to_markdown_falls_back_when_extraction_finds_nothing():
    md = html_to_markdown("<html><body><table><tr><td>only a cell</td></tr></table></body></html>")
    assert "only a cell" in md
