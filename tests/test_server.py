"""The retrieval server on a real socket: wire formats, limits, micro-batching, staying up."""

import asyncio

import httpx
import pytest


def post(url, path, payload=None, **kw):
    return httpx.post(f"{url}{path}", json=payload, timeout=30, **kw)


def test_retrieve_search_r1_wire_format(kb_server):
    r = post(kb_server, "/retrieve", {"queries": ["capital of Angola", "theory of relativity"], "topk": 4, "return_scores": True})
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
    r = post(kb_server, "/access", {"urls": [
        "https://en.wikipedia.org/wiki/Albert_Einstein", "Albert Einstein", "albert_Einstein",
        "https://en.wikipedia.org/wiki/No_Such_Page_Here", "https://example.com/x"]})
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


@pytest.mark.parametrize("payload,status,code", [
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
])
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


def test_long_queries_are_truncated_not_refused(kb_server):
    r = post(kb_server, "/retrieve", {"queries": ["Angola " * 200], "topk": 1})
    assert r.status_code == 200 and r.headers["x-truncated-queries"] == "1"


def test_concurrent_requests_are_micro_batched(kb_server):
    before = httpx.get(f"{kb_server}/health").json()

    async def fire():
        async with httpx.AsyncClient(timeout=60) as client:
            reqs = [client.post(f"{kb_server}/retrieve", json={"queries": [f"ocean number {i}"], "topk": 2, "return_scores": True})
                    for i in range(48)]
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
