"""The async client against real HTTP servers on loopback: balancing, failover, retries, errors."""

import asyncio
import time

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from local_retriever.client import (
    RetrievalClient,
    RetrievalError,
    RetrievalRequestError,
    RetrievalServerError,
    RetrievalUnavailable,
    parse_urls,
)
from tests.helpers import free_port, serve_app


def fake_kb(name: str, fail_first: int = 0, status: int = 503, delay: float = 0.0, wrong_len: bool = False):
    """A server speaking the /retrieve and /access wire formats that counts its hits."""
    app = FastAPI()
    app.state.hits = 0

    @app.post("/retrieve")
    async def retrieve(body: dict):
        app.state.hits += 1
        if app.state.hits <= fail_first:
            return JSONResponse({"error": {"code": "x", "message": f"{name} refuses"}}, status_code=status)
        await asyncio.sleep(delay)
        n = len(body["queries"]) + (1 if wrong_len else 0)
        row = {"id": "0", "contents": f'"{name}"\ntext', "title": name}
        hits = [{"document": row, "score": 1.0} if body["return_scores"] else row for _ in range(body["topk"])]
        return {"result": [hits for _ in range(n)]}

    @app.post("/access")
    async def access(body: dict):
        app.state.hits += 1
        return {
            "result": [{"url": u, "title": name, "contents": "page"} if u != "missing" else None for u in body["urls"]]
        }

    @app.get("/health")
    async def health():
        return {"status": "ok", "name": name}

    return app


def test_parse_urls():
    assert parse_urls("http://a:1/retrieve, b:2/") == ["http://a:1", "http://b:2"]
    with pytest.raises(ValueError):
        parse_urls(" , ")


@pytest.mark.asyncio
async def test_round_trip_and_balancing():
    a, b = fake_kb("a", delay=0.02), fake_kb("b", delay=0.02)
    with serve_app(a) as ua, serve_app(b) as ub:
        async with RetrievalClient([ua, ub]) as client:
            res = await client.retrieve(["q1", "q2"], topk=2)
            assert len(res) == 2 and res[0][0]["document"]["contents"].endswith("text")
            rows = await client.retrieve(["q"], topk=1, return_scores=False)
            assert "contents" in rows[0][0]
            pages = await client.access(["https://x", "missing"])
            assert pages[0]["contents"] == "page" and pages[1] is None
            assert (await client.health())["status"] == "ok"
            await asyncio.gather(*(client.retrieve([f"q{i}"], 1) for i in range(40)))
    # Least-in-flight with round-robin ties spreads concurrent load over both replicas.
    assert a.state.hits >= 12 and b.state.hits >= 12


@pytest.mark.asyncio
async def test_failover_from_a_dead_replica():
    good = fake_kb("good")
    dead = f"http://127.0.0.1:{free_port()}"
    with serve_app(good) as url:
        async with RetrievalClient([dead, url], backoff=0.01) as client:
            results = await asyncio.gather(*(client.retrieve([f"q{i}"], 1) for i in range(10)))
            assert all(r[0][0]["document"]["title"] == "good" for r in results)
            stats = client.stats()
    assert stats["failovers"] >= 1 and stats["errors"][dead] >= 1


@pytest.mark.asyncio
async def test_5xx_is_retried_and_4xx_is_not():
    flaky = fake_kb("flaky", fail_first=2, status=503)
    with serve_app(flaky) as url:
        async with RetrievalClient(url, backoff=0.01, cooldown=0) as client:
            assert (await client.retrieve(["q"], 1))[0][0]["document"]["title"] == "flaky"
    assert flaky.state.hits == 3

    refusing = fake_kb("strict", fail_first=10, status=422)
    with serve_app(refusing) as url:
        async with RetrievalClient(url, backoff=0.01) as client:
            with pytest.raises(RetrievalRequestError) as err:
                await client.retrieve(["q"], 1)
    assert refusing.state.hits == 1 and err.value.status == 422 and "strict refuses" in str(err.value)


@pytest.mark.asyncio
async def test_all_replicas_down_names_them():
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    start = time.monotonic()
    async with RetrievalClient(dead, retries=2, backoff=0.01, timeout=2) as client:
        with pytest.raises(RetrievalUnavailable) as err:
            await client.retrieve(["q"], 1)
    assert time.monotonic() - start < 10
    assert all(u in str(err.value) for u in dead)


@pytest.mark.asyncio
async def test_timeout_moves_to_another_replica():
    slow, fast = fake_kb("slow", delay=3), fake_kb("fast")
    with serve_app(slow) as us, serve_app(fast) as uf:
        async with RetrievalClient([us, uf], timeout=0.5, backoff=0.01) as client:
            for _ in range(3):
                assert (await client.retrieve(["q"], 1))[0][0]["document"]["title"] == "fast"


@pytest.mark.asyncio
async def test_malformed_reply_is_an_error():
    with serve_app(fake_kb("bad", wrong_len=True)) as url:
        async with RetrievalClient(url) as client:
            with pytest.raises(RetrievalError, match="expected 'result' with 1 entries, got 2"):
                await client.retrieve(["q"], 1)


@pytest.mark.asyncio
async def test_against_the_real_server(kb_server):
    async with RetrievalClient(kb_server) as client:
        hits = await client.retrieve(["Who wrote Animal Farm?"], topk=3)
        assert "Animal Farm" in [h["document"]["title"] for h in hits[0]]
        with pytest.raises(RetrievalRequestError, match="topk"):
            await client.retrieve(["x"], topk=0)


def poisonable_kb(name: str, poison_status: int):
    """A replica that answers `poison_status` to the query "poison" and serves everything else."""
    app = fake_kb(name)
    route = next(r for r in app.router.routes if getattr(r, "path", "") == "/retrieve")
    serve = route.endpoint
    app.state.poisoned = 0

    async def retrieve(body: dict):
        if "poison" in body["queries"]:
            app.state.poisoned += 1
            return JSONResponse({"error": {"code": "x", "message": f"{name} broke"}}, status_code=poison_status)
        return await serve(body)

    app.router.routes.remove(route)
    app.post("/retrieve")(retrieve)
    return app


@pytest.mark.asyncio
async def test_a_500_is_retried_once_elsewhere_and_marks_nothing_down():
    a, b = poisonable_kb("a", 500), poisonable_kb("b", 500)
    with serve_app(a) as ua, serve_app(b) as ub:
        async with RetrievalClient([ua, ub], retries=3, backoff=0.01) as client:
            with pytest.raises(RetrievalServerError, match="broke") as err:
                await client.retrieve(["poison"], 1)
            assert err.value.status == 500
            # Exactly two attempts, one on each replica, and both replicas stay in rotation.
            assert (a.state.poisoned, b.state.poisoned) == (1, 1)
            assert client.down() == [] and client.stats()["errors"] == {}
            results = await asyncio.gather(*(client.retrieve([f"q{i}"], 1) for i in range(20)))
    assert {r[0][0]["document"]["title"] for r in results} == {"a", "b"}


@pytest.mark.asyncio
async def test_a_500_on_one_replica_is_answered_by_the_other():
    sick, good = poisonable_kb("sick", 500), fake_kb("good")
    with serve_app(sick) as us, serve_app(good) as ug:
        async with RetrievalClient([us, ug], backoff=0.01) as client:
            for _ in range(4):
                assert (await client.retrieve(["poison"], 1))[0][0]["document"]["title"] == "good"
            assert client.down() == []


@pytest.mark.asyncio
async def test_503_still_puts_a_replica_in_cooldown():
    busy, good = fake_kb("busy", fail_first=100, status=503), fake_kb("good")
    with serve_app(busy) as ub, serve_app(good) as ug:
        async with RetrievalClient([ub, ug], backoff=0.01, cooldown=60) as client:
            results = await asyncio.gather(*(client.retrieve([f"q{i}"], 1) for i in range(10)))
            assert all(r[0][0]["document"]["title"] == "good" for r in results)
            assert client.down() == [ub]
            hits = busy.state.hits
            for i in range(5):
                await client.retrieve([f"later {i}"], 1)
    assert busy.state.hits == hits  # in cooldown, it gets no requests


@pytest.mark.asyncio
async def test_poison_requests_keep_both_real_replicas_up(hybrid_kb):
    from local_retriever.server import ServerLimits, build_app, uvicorn_options

    limits = ServerLimits()
    with (
        serve_app(build_app(hybrid_kb, limits), **uvicorn_options(limits)) as ua,
        serve_app(build_app(hybrid_kb, limits), **uvicorn_options(limits)) as ub,
    ):
        async with RetrievalClient([ua, ub], backoff=0.01) as client:

            async def good(i):
                return await client.retrieve([f"Angola {i}"], 2)

            async def poison():
                with pytest.raises(RetrievalRequestError) as err:
                    await client.retrieve(["Angola", "x\ud800y"], 2)
                return err.value

            outcomes = await asyncio.gather(*(poison() if i % 10 == 0 else good(i) for i in range(300)))
            refused = [o for o in outcomes if isinstance(o, RetrievalRequestError)]
            assert len(refused) == 30 and all(o.status == 422 and "queries[1]" in o.message for o in refused)
            assert all(len(o) == 1 and len(o[0]) == 2 for o in outcomes if not isinstance(o, RetrievalRequestError))
            stats = client.stats()
    assert stats["down"] == [] and stats["errors"] == {} and stats.get("retries", 0) == 0
