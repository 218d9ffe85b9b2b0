"""Web tools against local HTTP servers speaking Serper's and Jina's wire formats, plus real HTML pages."""

import asyncio
from urllib.parse import parse_qs

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)

from asearcher_plugin.tools.base import ToolError
from asearcher_plugin.tools.config import ToolsConfig
from asearcher_plugin.tools.url_guard import BlockedURL, check_url
from asearcher_plugin.tools.web import WebToolBox, html_to_markdown
from tests.helpers import serve_app

PAGE = """<html><head><title>Luanda</title><script>var x = 1;</script></head><body>
<nav>Home | About</nav><article><h1>Luanda</h1><p>Luanda is the capital and largest city of Angola.</p>
<p>It lies on the Atlantic coast and is the country's chief seaport.</p></article><footer>(c) 2026</footer></body></html>"""  # noqa: E501


def web_app():
    app = FastAPI()
    app.state.hits = {"search": 0, "flaky": 0, "jina": 0}

    @app.post("/search")
    async def search(request: Request):
        app.state.hits["search"] += 1
        if request.headers.get("x-api-key") != "test-key":
            return JSONResponse({"message": "Unauthorized"}, status_code=403)
        body = await request.json()
        organic = [
            {"title": f"Result {i} for {body['q']}", "link": f"https://example.org/{i}", "snippet": f"snippet {i}"}
            for i in range(body["num"])
        ]
        return {"searchParameters": {"q": body["q"]}, "organic": organic}

    @app.get("/page")
    async def page():
        return HTMLResponse(PAGE)

    @app.get("/latin1")
    async def latin1():
        return Response(
            "<html><body><p>São Tomé e Príncipe é um país.</p></body></html>".encode("latin-1"),
            media_type="text/html; charset=latin-1",
        )

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

    @app.get("/drip")
    async def drip():
        return StreamingResponse(dribble(b"<html><body>" + b"x" * 1000), media_type="text/html")

    @app.get("/to-bad-port")
    async def to_bad_port():
        return RedirectResponse("http://127.0.0.1:99999/x")

    # Raw Location headers: RedirectResponse would percent-encode them.
    @app.get("/to-bad-ipv6")
    async def to_bad_ipv6():
        return Response(status_code=302, headers={"location": "http://[::1/x"})

    @app.get("/to-bad-idn")
    async def to_bad_idn():
        return Response(status_code=302, headers={"location": "http://" + "ä" * 70 + ".com/"})

    # Jina Reader: POST the target as the form field `url`; the reply is text with a Title /
    # URL Source / Markdown Content header.
    async def jina_target(request: Request) -> str:
        app.state.hits["jina"] += 1
        assert request.headers["authorization"] == "Bearer jina-key"
        target = parse_qs((await request.body()).decode())["url"][0]
        app.state.jina_targets.append(target)
        return target

    @app.post("/jina/")
    async def jina(request: Request):
        target = await jina_target(request)
        return PlainTextResponse(f"Title: page\n\nURL Source: {target}\n\nMarkdown Content:\nMarkdown of {target}")

    @app.post("/jina-drip/")
    async def jina_drip(request: Request):
        target = await jina_target(request)
        return StreamingResponse(
            dribble(f"Title: page\n\nURL Source: {target}\n\nMarkdown Content:\n".encode()), media_type="text/plain"
        )

    @app.post("/jina-endless/")
    async def jina_endless(request: Request):
        await jina_target(request)

        async def endless():
            yield b"Title: page\n\nMarkdown Content:\n"
            while True:
                yield b"y" * 10_000
                await asyncio.sleep(0)

        return StreamingResponse(endless(), media_type="text/plain")

    app.state.jina_targets = []
    return app


async def dribble(head: bytes):
    """`head` at once, then one byte every 0.2 s for a minute: each read is quick, the whole is not."""
    yield head
    for _ in range(300):
        await asyncio.sleep(0.2)
        yield b"z"


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
    target = f"{url}/page?a=1&b=x%20y#/route"
    text = asyncio.run(WebToolBox(cfg).access(target))
    assert text.startswith("Title: page") and app.state.hits["jina"] == 1
    # Query and fragment reach the reader whole, not read as the reader's own query or dropped.
    assert app.state.jina_targets == [target] and f"URL Source: {target}\n" in text


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


# --- a whole fetch has a deadline; Jina bodies are capped ---------------------------------------------


def access_error(cfg, target: str) -> str:
    async def run():
        box = WebToolBox(cfg)
        try:
            await box.access(target)
        except ToolError as exc:
            return str(exc)
        finally:
            await box.aclose()
        raise AssertionError(f"{target} did not fail")

    return asyncio.run(run())


def test_a_dripping_page_ends_at_the_fetch_deadline(web):
    """Every read arrives well within `timeout`; only the overall deadline stops the fetch."""
    url, _, cfg = web
    cfg.web.timeout, cfg.web.fetch_deadline = 3, 1.5
    assert access_error(cfg, f"{url}/drip") == "access failed: no complete reply within the 1.5 s deadline"


def test_a_dripping_jina_reply_ends_at_the_fetch_deadline(web, monkeypatch):
    url, app, cfg = web
    monkeypatch.setenv("JINA_API_KEY", "jina-key")
    cfg.web.jina_url = f"{url}/jina-drip/"
    cfg.web.timeout, cfg.web.fetch_deadline = 3, 1.5
    assert "1.5 s deadline" in access_error(cfg, f"{url}/page")
    assert app.state.jina_targets == [f"{url}/page"]


def test_an_endless_jina_reply_is_capped(web, monkeypatch):
    url, _, cfg = web
    monkeypatch.setenv("JINA_API_KEY", "jina-key")
    cfg.web.jina_url = f"{url}/jina-endless/"
    cfg.web.fetch_deadline = 600  # the cap, not the deadline, ends this read
    text = asyncio.run(WebToolBox(cfg).access(f"{url}/page"))
    assert len(text) == cfg.web.max_page_bytes and text.startswith("Title: page") and text.endswith("y")


# --- nothing a model writes raises out of the toolbox or the environment ---------------------------------

BAD_URLS = [
    "http://[::1",
    "http://[::1]:99999/",
    "http://example.org:99999/",
    "http://example.org:abc/",
    "http://example.org:0/",
    "http://" + "ä" * 70 + ".com/",
    "http://" + "a" * 64 + ".com/",
    "http://a..b/",
    "http://x\ud800y.com/",
    "http://exa mple.org/",
    "https://exa\x00mple.org/",
    "http://",
    "http://:80/",
    "ftp://example.org/",
    "\ud800",
    "http://" + "a." * 200_000,
]
BAD_REDIRECTS = ["to-bad-port", "to-bad-ipv6", "to-bad-idn"]


def test_malformed_urls_are_tool_errors(web):
    url, _, cfg = web

    async def run():
        box = WebToolBox(cfg)
        errors = []
        for target in BAD_URLS + [f"{url}/{r}" for r in BAD_REDIRECTS]:
            with pytest.raises(ToolError) as err:
                await box.access(target)
            errors.append(str(err.value))
        page = await box.access(f"{url}/page")
        await box.aclose()
        return errors, page

    errors, page = asyncio.run(run())
    assert all(e.startswith("access refused: ") for e in errors), errors
    assert "malformed URL" in errors[0] and "port 0" in errors[4] and "Label too long" in errors[5]
    assert "99999" in errors[-3] and "malformed redirect" in errors[-2] and "Invalid IDNA" in errors[-1]
    assert "Luanda" in page  # the toolbox still works after all of them


def test_model_written_urls_and_queries_become_feedback_in_step(web):
    """The same inputs, and lone surrogates in queries (SQLite cache key, Serper's JSON body), through step()."""
    from asearcher_plugin.env import AgentInstance
    from asearcher_plugin.settings.config import AgentConfig

    url, app, cfg = web
    config = AgentConfig(agent_type="asearcher", max_turns=1000)
    config.tools = cfg

    async def run():
        box = WebToolBox(cfg)
        agent = AgentInstance(config, box)
        turns = [f"<access>{t}</access>" for t in BAD_URLS + [f"{url}/{r}" for r in BAD_REDIRECTS]]
        failed = [await agent.turn(t, label="x") for t in turns]
        ok = [
            await agent.turn(t, label="x")
            for t in (
                "<search>x\ud800y</search>",
                "<search>x\udfffy</search>",
                f"<access>{url}/page?q=\udc80</access>",
            )
        ]
        direct = await box.search("capital \udcff of Angola", 3)  # evaluation and synthesis call the tools directly
        await box.aclose()
        return failed, ok, direct

    failed, ok, direct = asyncio.run(run())
    for i, result in enumerate(failed, 1):
        assert not result.done and result.extra_logs["tool_errors"] == i
        assert "access failed: access refused: " in result.feedback, result.feedback
    assert "Result 0 for x\ufffdy" in ok[0].feedback
    assert "Result 0 for x\ufffdy" in ok[1].feedback
    assert app.state.hits["search"] == 2  # the second x\ufffdy came from the cache; the other is the direct call
    assert "Luanda" in ok[2].feedback and ok[2].extra_logs["tool_errors"] == len(failed)
    assert direct and "\ufffd" in direct[0]["title"]


def test_the_rate_limiter_forgets_hosts_whose_slot_has_passed():
    """Hosts are model-chosen: a long run visits millions, and the limiter must not keep them all."""
    from asearcher_plugin.tools.ratelimit import MAX_HOSTS, HostRateLimiter

    async def run():
        limiter = HostRateLimiter(1e9)
        for i in range(3 * MAX_HOSTS):
            await limiter.wait(f"host-{i}.test")
        return limiter

    limiter = asyncio.run(run())
    assert len(limiter._next) <= MAX_HOSTS
