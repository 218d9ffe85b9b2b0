"""Property: arbitrary text, lone surrogates and huge inputs, fed to every entry point that takes model output or
request bodies, raise nothing and leave a good request sent alongside exactly as it would be alone.

Entry points: `parse_action`, `AgentInstance.step` over a real local KB toolbox, and the KB server's `/retrieve`
and `/access` (the app `kb serve` runs, behind its guards, over loopback). The URL guard has its own property in
tests/test_url_guard.py (`test_guard_property`); `step` with the web backend is in tests/test_env_faults.py.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asearcher_plugin.agent.actions import parse_action
from asearcher_plugin.env import AgentInstance
from asearcher_plugin.settings.config import AgentConfig
from asearcher_plugin.tools import make_toolbox
from local_retriever.server import ServerLimits, build_app, uvicorn_options
from tests.helpers import serve_app

SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
CHAR = st.one_of(st.characters(), SURROGATE, st.sampled_from(list('<>/[]:. \n\\"')))
TAGS = [f"<{t}>" for t in ("search", "access", "answer", "think", "information")]
TAGS += [t.replace("<", "</") for t in TAGS]
MALFORMED_URLS = [
    "http://[::1",
    "http://[::1]:99999/",
    "http://x:abc/",
    "http://a..b/",
    "http://" + "a" * 64 + ".com/",
    "http://",
    "https://en.wikipedia.org/wiki/\ud800",
    "https://de.wikipedia.org/wiki/Angola",
]

short_text = st.text(CHAR, max_size=80)
huge_text = st.builds(lambda unit, n: unit * n, st.text(CHAR, min_size=1, max_size=6), st.integers(20_000, 120_000))
model_text = st.one_of(
    short_text,
    huge_text,
    st.lists(st.one_of(short_text, st.sampled_from(TAGS), st.sampled_from(MALFORMED_URLS)), max_size=10).map("".join),
    st.builds(
        lambda tag, arg: f"<{tag}>{arg}</{tag}>",
        st.sampled_from(["search", "access", "answer"]),
        st.one_of(short_text, huge_text, st.sampled_from(MALFORMED_URLS)),
    ),
)
GOOD_QUERIES = ["capital of Angola", "Albert Einstein Nobel Prize", "largest ocean"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(model_text)
def test_parse_action_never_raises(text):
    action = parse_action(text)
    assert action.kind in ("search", "access", "answer", "invalid")
    assert len(action.argument) <= 2000 and len(action.error) < 2000
    (action.argument + action.error).encode("utf-8")  # no lone surrogate survives into what the model sees next


# --- the KB server as `kb serve` runs it, on loopback -------------------------------------------------------------

LIMITS = ServerLimits(max_body_bytes=256 * 1024, max_query_chars=512, max_queries=16)


@pytest.fixture(scope="module")
def server(hybrid_kb):
    with serve_app(build_app(hybrid_kb, LIMITS), **uvicorn_options(LIMITS)) as url:
        yield url


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _escaped(payload) -> bytes:
    # What a client escaping non-ASCII JSON sends: a lone surrogate travels as `\ud800`.
    return json.dumps(payload, ensure_ascii=True).encode("ascii")


json_value = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(allow_nan=False), short_text)
retrieve_bodies = st.one_of(
    st.binary(max_size=2000),
    st.builds(lambda q: _escaped({"queries": q}), st.lists(st.one_of(short_text, huge_text), max_size=4)),
    st.builds(
        lambda q, k, s: _escaped({"queries": q, "topk": k, "return_scores": s}),
        st.lists(short_text, min_size=1, max_size=3),
        json_value,
        json_value,
    ),
    st.builds(lambda v: _escaped({"queries": v}), json_value),
    st.builds(lambda n: b'{"queries": ' + b"[" * n + b"]" * n + b"}", st.integers(1, 200_000)),
    st.builds(
        lambda n: b'{"queries": ["' + b"x" * n + b'"]}',
        st.integers(LIMITS.max_body_bytes - 200, LIMITS.max_body_bytes + 2000),
    ),
)
access_bodies = st.one_of(
    st.binary(max_size=2000),
    st.builds(
        lambda u: _escaped({"urls": u}),
        st.lists(st.one_of(short_text, huge_text, st.sampled_from(MALFORMED_URLS)), max_size=4),
    ),
    st.builds(lambda v: _escaped({"urls": v}), json_value),
)


async def _pair(client: httpx.AsyncClient, url: str, path: str, bad: bytes, good: dict):
    """The bad request and a good one, sent at the same moment so that they can share a micro-batch."""
    return await asyncio.gather(
        client.post(f"{url}{path}", content=bad, headers={"content-type": "application/json"}),
        client.post(f"{url}{path}", json=good),
        return_exceptions=True,
    )


def _check_bad(response: httpx.Response | BaseException, body: bytes) -> None:
    if isinstance(response, httpx.TransportError) and len(body) > LIMITS.max_body_bytes:
        # Refused with 413 and closed before the rest was read: the client may see the reset before the answer.
        return
    assert isinstance(response, httpx.Response), repr(response)
    assert response.status_code < 500, response.text[:500]
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"error"} and body["error"]["code"] and body["error"]["message"]


@pytest.mark.parametrize(
    "path,bodies,good",
    [
        ("/retrieve", retrieve_bodies, lambda i: {"queries": [GOOD_QUERIES[i % 3]], "topk": 3}),
        ("/access", access_bodies, lambda i: {"urls": [("Albert Einstein", "Angola", "Atlantic Ocean")[i % 3]]}),
    ],
    ids=["retrieve", "access"],
)
def test_server_answers_any_body_and_a_good_request_alongside_is_unaffected(server, loop, path, bodies, good):
    client = httpx.AsyncClient(timeout=120)
    alone = [loop.run_until_complete(client.post(f"{server}{path}", json=good(i))).json() for i in range(3)]
    counter = iter(range(10**9))

    @SETTINGS
    @given(bodies)
    def check(bad):
        i = next(counter) % 3
        bad_response, good_response = loop.run_until_complete(_pair(client, server, path, bad, good(i)))
        _check_bad(bad_response, bad)
        assert isinstance(good_response, httpx.Response), repr(good_response)
        assert good_response.status_code == 200 and good_response.json() == alone[i]

    try:
        check()
        assert httpx.get(f"{server}/health").json()["errors_5xx"] == 0
    finally:
        loop.run_until_complete(client.aclose())


async def _toolbox(config):
    return make_toolbox(config.tools)


def test_step_never_raises_and_a_good_step_alongside_is_unaffected(server, loop):
    config = AgentConfig(agent_type="asearcher", max_turns=1000)
    config.tools.local.urls = [server]
    box = loop.run_until_complete(_toolbox(config))
    good_text = "<think>look it up</think><search>capital of Angola</search>"

    async def good_step():
        return await AgentInstance(config, box).turn(good_text, label='["Luanda"]')

    alone = loop.run_until_complete(good_step())
    assert "<information>" in alone.feedback

    async def both(text):
        agent = AgentInstance(config, box)
        agent.question = "Who wrote Animal \ud800 Farm?"
        return await asyncio.gather(agent.turn(text, label="x\ud800"), good_step())

    @SETTINGS
    @given(model_text)
    def check(text):
        result, good = loop.run_until_complete(both(text))
        assert isinstance(result.done, bool) and isinstance(result.feedback, str)
        result.feedback.encode("utf-8")
        assert good.feedback == alone.feedback and not good.done

    try:
        check()
    finally:
        loop.run_until_complete(box.aclose())
