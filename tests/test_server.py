"""The retrieval server on a real socket: wire formats, limits, micro-batching, staying up."""

import asyncio
import json
import logging
import shutil
import socket
import time

import httpx
import pytest


def post(url, path, payload=None, **kw):
    return httpx.post(f"{url}{path}", json=payload, timeout=30, **kw)


def test_retrieve_search_r1_wire_format(kb_server):
    r = post(
        kb_server,
        "/retrieve",
        {"queries": ["capital of Angola", "theory of relativity"], "topk": 4, "return_scores": True},
    )
    assert r.status_code == 200
    result = r.json()["result"]
    assert len(result) == 2 and all(len(hits) == 4 for hits in result)
    hit = result[1][0]
    assert set(hit) == {"document", "score"} and isinstance(hit["score"], float)
    doc = hit["document"]
    assert {"id", "contents", "title", "url"} <= set(doc)
    assert doc["contents"].startswith(f'"{doc["title"]}"\n')
    assert result[1][0]["score"] >= result[1][1]["score"]


def test_return_scores_false_returns_rows(kb_server):
    # Search-R1's own server crashes here; rows alone is the format its clients expect.
    for n in (1, 2, 3):
        r = post(kb_server, "/retrieve", {"queries": ["Atlantic Ocean"] * n, "topk": 2, "return_scores": False})
        assert r.status_code == 200
        result = r.json()["result"]
        assert len(result) == n and "contents" in result[0][0] and "document" not in result[0][0]


def test_topk_defaults_to_three(kb_server):
    r = post(kb_server, "/retrieve", {"queries": ["Algorithm"], "return_scores": True})
    assert len(r.json()["result"][0]) == 3


def test_access_by_url_title_and_redirect(kb_server):
    r = post(
        kb_server,
        "/access",
        {
            "urls": [
                "https://en.wikipedia.org/wiki/Albert_Einstein",
                "Albert Einstein",
                "albert_Einstein",
                "https://en.wikipedia.org/wiki/No_Such_Page_Here",
                "https://example.com/x",
            ]
        },
    )
    assert r.status_code == 200
    pages = r.json()["result"]
    assert pages[0]["title"] == "Albert Einstein" and "relativity" in pages[0]["contents"]
    assert pages[1] == pages[0] and pages[2] == pages[0]
    assert pages[3] is None and pages[4] is None


def test_health(kb_server):
    h = httpx.get(f"{kb_server}/health").json()
    assert h["status"] == "ok" and h["corpus_size"] > 1000 and h["retriever"] == "hybrid"
    assert h["index_type"] == "IndexFlat" or h["index_type"].startswith("IndexFlat")
    assert h["encoder"]["dim"] == 384 and h["uptime_s"] >= 0


@pytest.mark.parametrize(
    "payload,status,code",
    [
        ({"queries": []}, 422, "empty_queries"),
        ({"queries": [""]}, 422, "empty_query"),
        ({"queries": ["ok", "   "]}, 422, "empty_query"),
        ({"queries": [1, 2]}, 422, "invalid_request"),
        ({"queries": "not a list"}, 422, "invalid_request"),
        ({"topk": 3}, 422, "invalid_request"),
        ({"queries": ["x"] * 65}, 413, "too_many_queries"),
        ({"queries": ["x"], "topk": 0}, 422, "topk_out_of_range"),
        ({"queries": ["x"], "topk": 101}, 422, "topk_out_of_range"),
        ({"queries": ["x"], "topk": "5"}, 422, "invalid_request"),
        ({"urls": []}, 422, "empty_urls"),
        ({"urls": ["u"] * 65}, 413, "too_many_urls"),
        ({"urls": [None]}, 422, "invalid_request"),
    ],
)
def test_bad_requests_get_clear_4xx(kb_server, payload, status, code):
    path = "/access" if "urls" in payload else "/retrieve"
    r = post(kb_server, path, payload)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["message"]
    if code == "invalid_request":
        assert ("queries" in err["message"]) or ("urls" in err["message"]) or ("topk" in err["message"])


def test_invalid_json_and_oversized_bodies(kb_server):
    r = httpx.post(f"{kb_server}/retrieve", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    big = {"queries": ["a" * 2000] * 40}
    r = post(kb_server, "/retrieve", big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

    def chunks():  # no Content-Length: the limit must hold for streamed bodies too
        yield b'{"queries": ["'
        for _ in range(100):
            yield b"b" * 1024
        yield b'"]}'

    r = httpx.post(f"{kb_server}/retrieve", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert httpx.get(f"{kb_server}/health").json()["status"] == "ok"


def test_an_oversized_body_gets_its_413_not_a_reset(kb_server):
    # The server once answered at the first byte over the limit and closed while the client was still sending,
    # so under load clients saw a connection reset instead of the 413. Up to 4x the limit is read and dropped.
    body = b'{"queries": ["' + b"c" * (3 * 64 * 1024) + b'"]}'

    def chunks():
        for i in range(0, len(body), 8192):
            yield body[i : i + 8192]

    with httpx.Client(timeout=30) as client:
        for announced in (True, False):
            for _ in range(10):
                r = client.post(
                    f"{kb_server}/retrieve",
                    content=body if announced else chunks(),
                    headers={"content-type": "application/json"},
                )
                assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    assert httpx.get(f"{kb_server}/health").json()["status"] == "ok"


def test_long_queries_are_truncated_not_refused(kb_server):
    r = post(kb_server, "/retrieve", {"queries": ["Angola " * 200], "topk": 1})
    assert r.status_code == 200 and r.headers["x-truncated-queries"] == "1"


def test_concurrent_requests_are_micro_batched(kb_server):
    before = httpx.get(f"{kb_server}/health").json()

    async def fire():
        async with httpx.AsyncClient(timeout=60) as client:
            reqs = [
                client.post(
                    f"{kb_server}/retrieve", json={"queries": [f"ocean number {i}"], "topk": 2, "return_scores": True}
                )
                for i in range(48)
            ]
            return await asyncio.gather(*reqs)

    responses = asyncio.run(fire())
    assert all(r.status_code == 200 and len(r.json()["result"][0]) == 2 for r in responses)
    after = httpx.get(f"{kb_server}/health").json()
    batches = after["batches"] - before["batches"]
    assert after["retrieve_requests"] - before["retrieve_requests"] == 48
    assert batches < 48  # several requests shared an encoder pass and an index search
    # Each request got the answer for its own query, not a neighbour's.
    single = post(kb_server, "/retrieve", {"queries": ["ocean number 7"], "topk": 2, "return_scores": True}).json()
    assert responses[7].json()["result"] == single["result"]


# --- Faults: bad items fail alone, slow clients are cut off, every error has one shape ---------------------------

from local_retriever.server import ServerLimits, build_app, create_app, uvicorn_options  # noqa: E402
from tests.helpers import serve_app  # noqa: E402

POISON = b'{"queries": ["Angola", "x\\ud800y"], "topk": 2}'  # a lone surrogate, sent as its JSON escape


def _guarded(kb, **limits):
    lim = ServerLimits(**limits)
    return serve_app(build_app(kb, lim), **uvicorn_options(lim))


@pytest.fixture(scope="module")
def guarded_server(hybrid_kb):
    """The server as `kb serve` runs it, with short read timeouts."""
    with _guarded(hybrid_kb, header_timeout_s=1, body_timeout_s=1, keep_alive_s=1) as url:
        yield url


def test_surrogate_query_is_refused_alone_under_load(hybrid_kb):
    with _guarded(hybrid_kb) as url:
        _surrogates_under_load(url)


def _surrogates_under_load(guarded_server):
    before = httpx.get(f"{guarded_server}/health").json()

    async def run():
        # Pooled connections are dropped before the server's keep-alive runs out, as RetrievalClient does.
        limits = httpx.Limits(max_connections=64, keepalive_expiry=2.0)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:

            async def good(i):
                return await client.post(f"{guarded_server}/retrieve", json={"queries": [f"ocean {i}"], "topk": 2})

            async def bad():
                return await client.post(
                    f"{guarded_server}/retrieve", content=POISON, headers={"content-type": "application/json"}
                )

            tasks = [bad() if i % 21 == 0 else good(i) for i in range(630)]
            return await asyncio.gather(*tasks)

    responses = asyncio.run(run())
    good = [r for i, r in enumerate(responses) if i % 21]
    bad = [r for i, r in enumerate(responses) if i % 21 == 0]
    assert len(good) == 600 and len(bad) == 30
    assert [r.status_code for r in good] == [200] * len(good)
    assert all(len(r.json()["result"][0]) == 2 for r in good)
    for r in bad:
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_text"
        assert "queries[1]" in r.json()["error"]["message"]
    after = httpx.get(f"{guarded_server}/health").json()
    assert after["errors_5xx"] == before["errors_5xx"]


def test_access_with_bad_urls_is_refused_alone(guarded_server):
    r = post(guarded_server, "/access", {"urls": ["Albert Einstein", "http://[::1"]})
    # Refused naming the item, or answered as no such page; never a 500.
    if r.status_code == 422:
        assert r.json()["error"]["code"] == "invalid_url" and "urls[1]" in r.json()["error"]["message"]
    else:
        assert r.status_code == 200 and r.json()["result"][1] is None, r.text
    r = httpx.post(
        f"{guarded_server}/access",
        content=b'{"urls": ["Angola", "\\udfff"]}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and "urls[1]" in r.json()["error"]["message"]
    assert (
        post(guarded_server, "/access", {"urls": ["Albert Einstein"]}).json()["result"][0]["title"]
        == "Albert Einstein"
    )


def _raw_exchange(url: str, request: bytes, wait: float = 30.0) -> bytes:
    """Sends raw bytes and reads until the server closes the connection; fails if it never does."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):  # socket.timeout here means the server held the connection open
            data += chunk
        return data


def _body(raw: bytes) -> dict:
    return json.loads(raw.split(b"\r\n\r\n", 1)[1])


@pytest.mark.parametrize(
    "method,path,content,status,code",
    [
        ("GET", "/no-such-path", None, 404, "not_found"),
        ("GET", "/retrieve", None, 405, "method_not_allowed"),
        ("POST", "/retrieve", b'{"queries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "invalid_json"),
        ("POST", "/retrieve", b'{"queries": ["a", }', 422, "invalid_request"),
        ("POST", "/retrieve", b"\xff\xfe not utf-8", 422, "invalid_request"),
        ("POST", "/retrieve", b'{"queries": [' + b'"x",' * 1_200_000 + b'"x"]}', 413, "body_too_large"),
    ],
)
def test_every_error_has_the_error_shape(guarded_server, method, path, content, status, code):
    r = httpx.request(
        method, f"{guarded_server}{path}", content=content, headers={"content-type": "application/json"}, timeout=60
    )
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"} and r.json()["error"]["code"] == code and r.json()["error"]["message"]


def test_content_length_lie_gets_408_and_the_connection_is_closed(guarded_server):
    head = (
        b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    raw = _raw_exchange(guarded_server, head + b'{"queries"')
    assert raw.startswith(b"HTTP/1.1 408 ")
    assert _body(raw)["error"]["code"] == "body_timeout"
    # A route that never reads the body: answered, then the connection is dropped once the body is overdue.
    raw = _raw_exchange(guarded_server, head.replace(b"/retrieve", b"/nowhere") + b"{")
    assert raw.startswith(b"HTTP/1.1 404 ") and _body(raw)["error"]["code"] == "not_found"


def test_slow_loris_connections_are_closed_by_the_server(guarded_server):
    host, port = guarded_server.removeprefix("http://").split(":")

    async def loris(kind: str) -> bytes:
        # Connected and the partial headers sent in one blocking step: the header deadline runs from the server's
        # accept, and a client loop still opening the other connections (sharing the GIL with this in-process
        # server) could otherwise send them after it, when the server rightly treats the connection as silent.
        sock = socket.create_connection((host, int(port)))
        if kind != "silent":
            sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        reader, writer = await asyncio.open_connection(sock=sock)

        async def drip():  # one header byte every 0.2 s, never finishing the headers
            while kind == "drip":
                await asyncio.sleep(0.2)
                writer.write(b"X")
                await writer.drain()

        dripping = asyncio.create_task(drip())
        try:
            return await asyncio.wait_for(reader.read(), 30)  # TimeoutError: the server kept it open
        finally:
            dripping.cancel()
            writer.close()

    async def run():
        return await asyncio.gather(
            *(loris(("silent", "partial", "drip")[i % 3]) for i in range(600)), return_exceptions=True
        )

    results = asyncio.run(run())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    silent, partial = results[0::3], results[1::3] + results[2::3]
    assert all(r == b"" for r in silent)
    assert all(r.startswith(b"HTTP/1.1 408 ") and _body(r)["error"]["code"] == "header_timeout" for r in partial)
    assert post(guarded_server, "/retrieve", {"queries": ["Angola"]}).status_code == 200


@pytest.mark.parametrize(
    "sent, answer",
    [
        (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"HTTP/1.1 408 "),  # headers unfinished past the deadline
        (b"POST /retrieve HTTP/1.1\r\nX-Big: " + b"a" * 70_000, b"HTTP/1.1 400 "),  # headers over max_header_bytes
    ],
    ids=["header-timeout", "headers-too-large"],
)
def test_a_client_still_sending_when_refused_reads_its_answer_and_a_clean_end(guarded_server, sent, answer):
    """Bytes that reach the server after it refused a request must not turn its close into a reset: a reset can
    arrive before the answer is read, and the client then sees 'connection reset' instead (as 1 in 200 dripping
    clients did under load)."""
    host, port = guarded_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.settimeout(30)
        sock.sendall(sent)
        head = sock.recv(4096)
        assert head.startswith(answer), head
        for _ in range(3):  # bytes the client sent before it saw the answer; the server has closed its side
            sock.sendall(b"X")
            time.sleep(0.1)
        rest = b""
        while chunk := sock.recv(4096):  # ConnectionResetError here: the server answered the bytes with a reset
            rest += chunk
        assert b'"error"' in head + rest


def test_connection_limit_answers_503_in_the_error_shape(hybrid_kb):
    with _guarded(hybrid_kb, max_connections=8, header_timeout_s=60) as url:
        host, port = url.removeprefix("http://").split(":")
        idle = [socket.create_connection((host, int(port))) for _ in range(12)]
        try:
            r = httpx.post(f"{url}/retrieve", json={"queries": ["Angola"]}, timeout=30)
            assert r.status_code == 503 and r.json()["error"]["code"] == "too_many_connections"
        finally:
            for sock in idle:
                sock.close()
        for _ in range(100):  # the server notices the closed sockets on its next loop turns
            r = httpx.post(f"{url}/retrieve", json={"queries": ["Angola"]}, timeout=30)
            if r.status_code == 200:
                break
            time.sleep(0.05)
        assert r.status_code == 200


def test_a_500_is_logged_with_its_traceback(sample_kb, tmp_path, caplog):
    from local_retriever.kb import KnowledgeBase

    kb_dir = tmp_path / "kb"
    shutil.copytree(sample_kb, kb_dir)
    kb = KnowledgeBase(kb_dir, "bm25")
    try:
        with serve_app(create_app(kb)) as url:
            assert post(url, "/retrieve", {"queries": ["Angola"]}).status_code == 200
            kb.manifest.corpus_path(kb_dir).write_bytes(b"")  # the corpus damaged under a running server
            with caplog.at_level(logging.ERROR, logger="local_retriever.server"):
                r = post(url, "/retrieve", {"queries": ["Angola"]})
            assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
            assert httpx.get(f"{url}/health").json()["errors_5xx"] == 1
    finally:
        kb.close()
    records = [rec for rec in caplog.records if rec.name == "local_retriever.server"]
    assert records and records[0].exc_info and "POST /retrieve" in records[0].getMessage()


# --- Who may ask, and how much a reply may hold ---------------------------------------------------------------------


def test_a_host_the_server_was_not_started_for_is_refused(hybrid_kb):
    """DNS rebinding: a page on a name its author controls, re-resolved to 127.0.0.1, sends its own name as Host."""
    from local_retriever.hosts import served_names

    with serve_app(create_app(hybrid_kb, hosts=served_names("127.0.0.1", ("kb.internal",)))) as url:
        for host in ("rebind.evil.example", "rebind.evil.example:5005", "127.0.0.1.nip.io", "["):
            health = httpx.get(f"{url}/health", headers={"Host": host})
            page = httpx.post(f"{url}/access", json={"urls": ["Angola"]}, headers={"Host": host})
            for reply in (health, page):
                assert reply.status_code == 400 and reply.json()["error"]["code"] == "unknown_host", (host, reply.text)
                assert "source" not in reply.text  # nothing of the KB (its corpus path) in the refusal
        for host in ("127.0.0.1:5005", "localhost", "[::1]:80", "10.0.0.7:5005", "kb.internal:5005"):
            assert httpx.get(f"{url}/health", headers={"Host": host}).status_code == 200, host  # IPs: cluster nodes


def test_a_reply_is_bounded_in_bytes(hybrid_kb, long_page):
    limit = 64 * 1024
    with _guarded(hybrid_kb, max_reply_bytes=limit) as url:
        many = post(url, "/retrieve", {"queries": [f"ocean {i}" for i in range(100)], "topk": 20})
        assert many.status_code == 413 and many.json()["error"]["code"] == "reply_too_large", many.text[:300]
        assert post(url, "/retrieve", {"queries": ["Angola"], "topk": 3}).status_code == 200
        page_url, whole = long_page
        reply = post(url, "/access", {"urls": [page_url] * 8})
        assert reply.status_code == 200 and len(reply.content) <= limit
        pages = reply.json()["result"]
        assert all(p["contents"].startswith(whole[:1000]) for p in pages)
        assert all(f"the page is {len(whole):,} characters" in p["contents"] for p in pages)  # marked as cut


def test_a_client_that_stops_reading_is_cut_off_at_the_write_deadline(hybrid_kb, long_page):
    """A reply is held in memory while a client does not read it; 20 such clients held 1 GB for 40 s+ before."""
    import socket

    page_url, whole = long_page
    # a reply (15 MB) larger than what the kernel's socket buffers take in (a few MB on loopback)
    with _guarded(hybrid_kb, write_timeout_s=1, max_urls=512, max_reply_bytes=256 << 20) as url:
        port = int(url.rsplit(":", 1)[1])
        body = json.dumps({"urls": [page_url] * 512}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(
                b"POST /access HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            time.sleep(4)  # never reading, past the deadline
            received = b""
            try:
                while chunk := conn.recv(1 << 16):
                    received += chunk
            except ConnectionResetError:
                pass
        # what the kernel's buffers held arrives, then the end: the rest was dropped, not held until read
        assert 0 < len(received) < 512 * len(whole) / 2
        assert post(url, "/retrieve", {"queries": ["Angola"]}).status_code == 200


def test_a_body_that_arrived_in_time_is_read_even_when_the_app_reads_it_late():
    """The body timeout is for bytes that never come: a request whose body came with its headers, read only after
    the timeout (its handler queued behind other work), is served; one whose body never comes is still refused."""
    from local_retriever.server import ApiError, BodyLimit

    async def late_reader(scope, receive, send):
        await asyncio.sleep(0.3)  # past the 0.1 s timeout before the body is read
        message = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": message["body"]})

    async def run(receive) -> list:
        sent = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "headers": [(b"content-length", b"2")]}
        await BodyLimit(late_reader, 1000, timeout=0.1)(scope, receive, send)
        return sent

    async def buffered():  # what the server hands over when the body came with the headers
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def never():
        await asyncio.sleep(60)

    sent = asyncio.run(run(buffered))
    assert sent[0]["status"] == 200 and sent[1]["body"] == b"{}"
    with pytest.raises(ApiError) as refused:
        asyncio.run(run(never))
    assert (refused.value.status, refused.value.code) == (408, "body_timeout")
