"""The shared endpoint client (local_retriever.endpoints) against real HTTP servers on loopback: failover,
cooldown, backoff, error classes; the one endpoint config shape and its `base_url` alias; the judge on it."""

import asyncio

import pytest
import yaml
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import ValidationError

from asearcher_plugin.settings.config import JudgeConfig, load_config
from data_synth.config import load_synth_config
from local_retriever.endpoints import (
    BadReply,
    EndpointConfig,
    EndpointRefused,
    EndpointServerError,
    EndpointUnavailable,
    MultiURLClient,
    URLPool,
)
from tests.helpers import free_port, serve_app


def scripted(name: str, replies: list = ()):
    """POST /v1/echo: serves `replies` first (a status code, or "text" for a reply that is not JSON), then 200."""
    app = FastAPI()
    app.state.hits = 0
    queue = list(replies)

    @app.post("/v1/echo")
    async def echo(body: dict):
        app.state.hits += 1
        reply = queue.pop(0) if queue else 200
        if reply == "text":
            return PlainTextResponse("<html>busy</html>")
        if reply != 200:
            return JSONResponse({"error": {"message": f"{name} says {reply}"}}, status_code=reply)
        return {"served_by": name, "echo": body}

    return app


def run(coro):
    return asyncio.run(coro)


async def post(client: MultiURLClient, n: int = 1, **kw):
    return [await client.post_json("/echo", {"i": i}, **kw) for i in range(n)]


def test_failover_across_two_servers_and_cooldown():
    a, b = scripted("a", [503] * 100), scripted("b")
    with serve_app(a) as ua, serve_app(b) as ub:

        async def go():
            async with MultiURLClient([f"{ua}/v1", f"{ub}/v1/"], "test", backoff=0.01, cooldown=60) as client:
                replies = await post(client, 6)
                return replies, client.pool.down(), client.stats()

        replies, down, stats = run(go())
    assert {r["served_by"] for r in replies} == {"b"} and [r["echo"]["i"] for r in replies] == list(range(6))
    # a answered 503 once, went into cooldown, and got nothing more while it lasted
    assert a.state.hits == 1 and down == [f"{ua}/v1"] and stats["errors"] == {f"{ua}/v1": 1}
    assert stats["failovers"] == 1


def test_failovers_are_logged_once_per_url(caplog):
    # a replica that keeps failing is one WARNING (then rate-limited), not one per request
    a, b = scripted("a", [503] * 100), scripted("b")
    with serve_app(a) as ua, serve_app(b) as ub:

        async def go():
            # no cooldown: a is tried again by every other request, however fast or slow the machine
            async with MultiURLClient([f"{ua}/v1", f"{ub}/v1"], "test", backoff=0.01, cooldown=0.0) as client:
                return await post(client, 8)

        with caplog.at_level("WARNING", logger="local_retriever.endpoints"):
            replies = run(go())
    assert {r["served_by"] for r in replies} == {"b"} and a.state.hits >= 2
    warned = [r for r in caplog.records if r.name == "local_retriever.endpoints"]
    assert len(warned) == 1 and f"{ua}/v1" in warned[0].getMessage() and "503" in warned[0].getMessage()


def test_load_is_shared_by_healthy_servers():
    a, b = scripted("a"), scripted("b")
    with serve_app(a) as ua, serve_app(b) as ub:

        async def go():
            async with MultiURLClient([f"{ua}/v1", f"{ub}/v1"], "test") as client:
                return await asyncio.gather(*(client.post_json("/echo", {"i": i}) for i in range(20)))

        replies = run(go())
    assert {r["served_by"] for r in replies} == {"a", "b"} and a.state.hits + b.state.hits == 20


def test_429_is_retried_with_backoff_on_the_only_server():
    busy = scripted("busy", [429, 429])
    with serve_app(busy) as url:

        async def go():
            async with MultiURLClient(f"{url}/v1", "test", retries=3, backoff=0.01) as client:
                return (await post(client))[0], client.stats()

        reply, stats = run(go())
    assert reply["served_by"] == "busy" and busy.state.hits == 3
    assert stats["retries"] == 2 and stats["backoff_seconds"] > 0  # tenacity waited before each retry


def test_a_4xx_raises_at_once_and_cools_nothing_down():
    strict, good = scripted("strict", [422]), scripted("good")
    with serve_app(strict) as us, serve_app(good) as ug:

        async def go():
            # a fresh pool breaks the first tie towards its first URL: the strict server
            async with MultiURLClient([f"{us}/v1", f"{ug}/v1"], "test", backoff=0.01) as client:
                with pytest.raises(EndpointRefused) as err:
                    await post(client)
                return err.value, client.pool.down(), client.stats()

        err, down, stats = run(go())
    assert err.status == 422 and "strict says 422" in err.message and isinstance(err, ValueError)
    assert strict.state.hits == 1 and good.state.hits == 0 and down == [] and stats["errors"] == {}


@pytest.mark.parametrize(
    "replies,error,hits,cooled",
    [
        ([500, 500], EndpointServerError, 2, False),  # a 500 is retried once and marks nothing down
        ([502] * 9, EndpointUnavailable, 3, True),
        ([504] * 9, EndpointUnavailable, 3, True),
        (["text"] * 9, EndpointUnavailable, 3, True),  # a reply that is not JSON: the server cannot serve now
    ],
)
def test_error_classes(replies, error, hits, cooled):
    app = scripted("s", replies)
    with serve_app(app) as url:

        async def go():
            async with MultiURLClient(f"{url}/v1", "test server", retries=2, backoff=0.01) as client:
                with pytest.raises(error) as err:
                    await post(client)
                return err.value, client.stats()

        err, stats = run(go())
    assert type(err) is error and app.state.hits == hits and isinstance(err, EndpointUnavailable)
    assert bool(stats["errors"]) is cooled and err.bad_reply is False
    if error is EndpointUnavailable:
        assert str(err).startswith("no test server answered /echo after 3 attempts") and url in str(err)


def test_dead_server_and_rejected_replies():
    dead = f"http://127.0.0.1:{free_port()}"

    async def go_dead():
        async with MultiURLClient(dead, "test", retries=1, backoff=0.01) as client:
            with pytest.raises(EndpointUnavailable, match="ConnectError"):
                await post(client)
            return client.pool.down()

    assert run(go_dead()) == [dead]

    def check(data):
        raise BadReply("no verdict in it")

    app = scripted("s")
    with serve_app(app) as url:

        async def go():
            async with MultiURLClient(url + "/v1", "test", retries=2, backoff=0.01) as client:
                with pytest.raises(EndpointUnavailable, match="no verdict in it") as err:
                    await post(client, check=check)
                return err.value, client.pool.down(), client.stats()

        err, down, stats = run(go())
    # a reply the caller rejects is asked again, but the server that sent it stays in rotation
    assert err.bad_reply and app.state.hits == 3 and down == [] and stats["bad_replies"] == 3


def test_a_shared_pool_keeps_cooldowns_across_clients_and_event_loops():
    good = scripted("good")
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with serve_app(good) as url:
        pool = URLPool([dead, f"{url}/v1"], cooldown=60)

        async def once():
            async with MultiURLClient(pool.urls, "test", pool=pool, backoff=0.01) as client:
                return (await post(client))[0]["served_by"]

        assert [run(once()) for _ in range(4)] == ["good"] * 4
    assert pool.errors == {dead: 1}  # the dead URL was tried once, then skipped by later clients


def test_endpoint_config_shape_and_base_url_alias(tmp_path):
    assert EndpointConfig(base_url="host:8000/v1/").base_urls == ["http://host:8000/v1"]
    assert EndpointConfig(base_url="http://a/v1, http://b/v1").base_urls == ["http://a/v1", "http://b/v1"]
    assert JudgeConfig(base_urls=["http://a/v1"]).base_urls == ["http://a/v1"]
    with pytest.raises(ValidationError, match="not both"):
        JudgeConfig(base_url="http://a/v1", base_urls=["http://b/v1"])
    with pytest.raises(ValidationError, match="no endpoint URL given"):
        JudgeConfig(base_urls=[" "])
    # a recipe written with the older single base_url still loads, for the agent and for synthesis
    agent = tmp_path / "agent.yaml"
    agent.write_text(yaml.safe_dump({"agent": {"reward": {"judge": {"base_url": "http://judge:8000/v1"}}}}))
    assert load_config(agent).reward.judge.base_urls == ["http://judge:8000/v1"]
    synth = tmp_path / "synth.yaml"
    synth.write_text(yaml.safe_dump({"judge": {"base_url": "http://j/v1"}, "generator": {"base_urls": ["g/v1"]}}))
    cfg = load_synth_config(synth)
    assert cfg.judge.base_urls == ["http://j/v1"] and cfg.generator.base_urls == ["http://g/v1"]
    assert load_synth_config(None, {"judge.base_url": "http://x/v1"}).judge.base_urls == ["http://x/v1"]


def chat_server(name: str, replies: list):
    app = FastAPI()
    app.state.hits = 0

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        app.state.hits += 1
        reply = replies[min(app.state.hits, len(replies)) - 1]
        if isinstance(reply, int):
            return JSONResponse({"error": {"message": "busy"}}, status_code=reply)
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}}]}

    return app


def test_the_judge_fails_over_and_remembers_a_dead_url():
    from asearcher_plugin import judge as judge_mod

    good = chat_server("good", ['{"verdict": "correct"}'])
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with serve_app(good) as url:
        cfg = JudgeConfig(base_urls=[dead, f"{url}/v1"], retries=3)
        judge = judge_mod.Judge(cfg)

        async def three():
            try:
                return [await judge("Capital of Angola?", "Luanda", ["Luanda"]) for _ in range(3)]
            finally:
                await judge.aclose()

        verdicts = run(three())
    assert verdicts == [True] * 3
    pool = judge.pool
    # a fresh pool tries the first URL first: the dead one, once; later verdicts skip it while it cools down
    assert pool.errors == {dead: 1} and good.state.hits == 3


def test_synthesis_grades_with_the_one_judge_and_counts_its_tokens():
    from data_synth.chat import BadOutput, ChatClient, EndpointUnavailable, UsageLog
    from data_synth.config import ChatEndpointConfig as ChatEndpoint
    from data_synth.steps import QA
    from data_synth.validate import _grade

    qa = QA("Capital of Angola?", "Luanda", aliases=[], facts=[])

    async def grade(url: str, prediction: str):
        usage = UsageLog()
        chat = ChatClient("judge", ChatEndpoint(base_urls=[url], retries=1), usage)
        try:
            return await _grade(chat.for_item(usage), qa, prediction), usage.as_dict()
        finally:
            await chat.aclose()

    app = chat_server("j", ['{"verdict": "correct", "reason": "same city"}'])
    with serve_app(app) as url:
        correct, usage = run(grade(f"{url}/v1", "the city of Luanda"))
        assert correct is True and usage["judge/grade"]["calls"] == 1 and app.state.hits == 1
        assert run(grade(f"{url}/v1", "luanda"))[0] is True and app.state.hits == 1  # normalised match: no call
    with serve_app(chat_server("j", ["I cannot say"])) as url:
        with pytest.raises(BadOutput, match="no verdict"):
            run(grade(f"{url}/v1", "Lisbon"))
    with pytest.raises(EndpointUnavailable):
        run(grade(f"http://127.0.0.1:{free_port()}/v1", "Lisbon"))
