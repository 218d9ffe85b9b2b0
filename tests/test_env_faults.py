"""Nothing a model writes may raise out of the environment.

`AgentExecutor.execute()` runs under `asyncio.gather` in OpenRLHF's rollout actor: one exception
kills the generator and the training run. These tests feed the environment the inputs that used
to escape (malformed URLs, broken tool replies, a locked cache, lone surrogates, huge or unclosed
output, a judge that fails) through the real tools, the real tokenizer and OpenRLHF's own
experience batching.
"""

import asyncio
import logging
import re
import sqlite3
import threading

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asearcher_plugin.agent.actions import parse_action
from asearcher_plugin.engines.types import SamplingParams
from asearcher_plugin.env import AgentExecutor, AgentInstance
from asearcher_plugin.settings.config import AgentConfig, JudgeConfig
from asearcher_plugin.tools import make_toolbox
from asearcher_plugin.tools.url_guard import BlockedURL, check_url
from tests.helpers import ScriptedEngine, free_port, serve_app

REQUIRED = {"rewards", "scores", "environment_feedback", "done", "extra_logs"}

BAD_URLS = [
    "http://[::1",
    "http://[::1]:99999/",
    "http://example.org:99999/",
    "http://example.org:abc/",
    "http://" + "ä" * 70 + ".com/",
    "http://" + "a" * 64 + ".com/",
    "http://a..b/",
    "http://x\ud800y.com/",
    "https://exa\x00mple.org/",
    "http://",
    "http://:80/",
]


# --- stand-ins for paid APIs and for the model -----------------------------------------------------


def web_app():
    """Serper's and Jina's wire formats on loopback, plus pages that misbehave."""
    app = FastAPI()
    app.state.queries = []

    @app.post("/search")
    async def search(request: Request):
        body = await request.json()
        app.state.queries.append(body["q"])
        organic = [
            {"title": f"Result {i} for {body['q']}", "link": f"https://example.org/{i}", "snippet": f"snippet {i}"}
            for i in range(body["num"])
        ]
        return {"searchParameters": {"q": body["q"]}, "organic": organic}

    @app.post("/search-html")
    async def search_html():
        return HTMLResponse("<html><body>Service temporarily moved</body></html>")

    @app.post("/search-list")
    async def search_list():
        return JSONResponse([{"organic": "nope"}])

    @app.post("/search-odd")
    async def search_odd():
        return {"organic": [{"title": 7, "link": None, "snippet": ["a", "b"]}, "not a dict", None]}

    @app.get("/page")
    async def page():
        return HTMLResponse("<html><body><article><p>Luanda is the capital of Angola.</p></article></body></html>")

    @app.get("/to-bad-port")
    async def to_bad_port():
        return RedirectResponse("http://127.0.0.1:99999/x")

    @app.get("/to-bad-ipv6")
    async def to_bad_ipv6():
        return RedirectResponse("http://[::1/x")

    @app.get("/to-bad-idn")
    async def to_bad_idn():
        return RedirectResponse("http://" + "ä" * 70 + ".com/")

    @app.get("/jina/{url:path}")
    async def jina(url: str):
        return PlainTextResponse(f"Title: page\n\nMarkdown of {url}")

    return app


@pytest.fixture()
def web(tmp_path, monkeypatch):
    with serve_app(web_app()) as url:
        config = AgentConfig(agent_type="asearcher", max_turns=1000)
        config.tools.backend = "web"
        web_cfg = config.tools.web
        web_cfg.serper_url = f"{url}/search"
        web_cfg.jina_url = f"{url}/jina/"
        web_cfg.cache_dir = str(tmp_path / "cache")
        web_cfg.allow_private_hosts = ["127.0.0.1"]
        web_cfg.per_host_rps = 1000
        web_cfg.retries = 0
        web_cfg.timeout = 5
        monkeypatch.setenv("SERPER_API_KEY", "test-key")
        monkeypatch.delenv("JINA_API_KEY", raising=False)
        yield url, config


# --- 1. every sample carries the same extra_logs keys --------------------------------------------------


def judge_app(status: int):
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat():
        if status != 200:
            return JSONResponse({"error": "overloaded"}, status_code=status)
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": '{"verdict": "correct"}'}}]}

    return app


def test_judge_outcomes_batch_into_one_experience(tokenizer, kb_server):
    """Judge answered, judge answered 500, judge down, no answer at all: one batch, identical keys."""
    from openrlhf.trainer.ppo_utils.experience import Experience, make_experience_batch, split_experience_batch

    from tests.helpers import samples_generator_module

    answer = [("<think>Orwell wrote it.</think> <answer>George Orwell</answer>", "stop")]
    no_answer = [("<search>author of Animal Farm</search>", "stop"), ("I do not know.", "length")]

    def executor(judge_url):
        config = AgentConfig(agent_type="search-r1", max_turns=2, max_new_tokens_per_turn=64)
        config.tools.local.urls = [kb_server]
        config.reward.metric = "judge"
        config.reward.judge = JudgeConfig(base_url=judge_url, retries=1, timeout=5)
        return AgentExecutor(config)

    params = SamplingParams(temperature=1.0, max_tokens=None, logprobs=1)

    async def run(judge_url, script):
        return await executor(judge_url).execute(
            "Who wrote Animal Farm?", '["George Orwell"]', params, 1024, tokenizer, ScriptedEngine(tokenizer, script)
        )

    with serve_app(judge_app(200)) as ok, serve_app(judge_app(500)) as failing:
        down = f"http://127.0.0.1:{free_port()}/v1"
        responses = [
            asyncio.run(run(f"{ok}/v1", answer)),
            asyncio.run(run(f"{failing}/v1", answer)),
            asyncio.run(run(down, answer)),
            asyncio.run(run(f"{ok}/v1", no_answer)),
        ]

    logs = [r["extra_logs"] for r in responses]
    assert all(set(x) == set(logs[0]) for x in logs), [sorted(x) for x in logs]
    assert [x["judge_failed"] for x in logs] == [0.0, 1.0, 1.0, 0.0]
    assert [x["score_judge"] for x in logs] == [1.0, 1.0, 1.0, 0.0]  # a failed judge falls back to F1
    assert [r["reward"] for r in responses] == [1.0, 1.0, 1.0, 0.0]
    assert logs[3]["answered"] == 0.0 and logs[3]["searches"] == 1.0

    sg = samples_generator_module()
    experiences = [sg.SamplesGenerator._process_response_into_experience(None, r, max_len=1024) for r in responses]
    batch = Experience.concat_experiences(experiences, tokenizer.pad_token_id)
    items = split_experience_batch(batch)
    assert len(items) == 4
    again = make_experience_batch(items)
    assert [float(v) for v in again.info["judge_failed"]] == [0.0, 1.0, 1.0, 0.0]
    assert [float(v) for v in again.info["score_f1"]] == [1.0, 1.0, 1.0, 0.0]


def test_unanswered_trajectories_log_every_score_key():
    config = AgentConfig(agent_type="search-r1", max_turns=1)
    agent = AgentInstance(config, None)
    before = set(agent.extra_logs())
    result = asyncio.run(agent.turn("no idea", label="x"))
    assert result.done and set(result.extra_logs) == before
    assert {"score_f1", "score_em", "score_asearcher_f1", "score_cover_em", "score_substring"} <= before


# --- 2. malformed URLs, broken replies, a locked cache, lone surrogates ----------------------------------


@pytest.mark.parametrize("url", BAD_URLS)
def test_check_url_refuses_malformed_urls(url):
    with pytest.raises(BlockedURL):
        asyncio.run(check_url(url))


def test_malformed_urls_and_bad_redirects_become_feedback(web):
    url, config = web
    targets = BAD_URLS + [
        f"{url}/to-bad-port",
        f"{url}/to-bad-ipv6",
        f"{url}/to-bad-idn",
        "http://127.0.0.1:99999/",
        "http://127.0.0.1:abc/",
    ]

    async def run():
        box = make_toolbox(config.tools)
        agent = AgentInstance(config, box)
        results = [await agent.turn(f"<access>{t}</access>", label="x") for t in targets]
        page = await agent.turn(f"<access>{url}/page</access>", label="x")
        await box.aclose()
        return results, page

    results, page = asyncio.run(run())
    for i, (target, result) in enumerate(zip(targets, results), 1):
        feedback = result.feedback
        assert REQUIRED <= set(result.openrlhf()) and not result.done
        assert "access refused" in feedback or "access failed" in feedback, (target, feedback)
        assert result.extra_logs["tool_errors"] == i
    assert "Luanda" in page.feedback


def search_through(web, route: str) -> dict:
    """One search step of the web backend against the local Serper stand-in's `route`."""
    url, config = web
    config.tools.web.serper_url = f"{url}/{route}"

    async def run():
        box = make_toolbox(config.tools)
        result = await AgentInstance(config, box).turn("<search>capital of Angola</search>", label="x")
        await box.aclose()
        return result

    return asyncio.run(run())


@pytest.mark.parametrize("route", ["search-html", "search-list"])
def test_a_broken_serper_reply_becomes_feedback(web, route):
    result = search_through(web, route)
    assert "search failed" in result.feedback and result.extra_logs["tool_errors"] == 1


def test_odd_serper_rows_are_coerced(web):
    result = search_through(web, "search-odd")
    assert result.extra_logs["tool_errors"] == 0 and "Doc 1(Title: 7)" in result.feedback


def test_a_locked_cache_does_not_fail_the_tool(web, caplog):
    """Another process holds the cache's write lock: results still come back, uncached, with a warning."""
    url, config = web

    async def run():
        box = make_toolbox(config.tools)
        box.cache.busy_timeout = 0.05
        holder = sqlite3.connect(box.cache.path, timeout=0.05)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            agent = AgentInstance(config, box)
            search = await agent.turn("<search>capital of Angola</search>", label="x")
            page = await agent.turn(f"<access>{url}/page</access>", label="x")
        finally:
            holder.rollback()
            holder.close()
            await box.aclose()
        return search, page

    with caplog.at_level(logging.WARNING):
        search, page = asyncio.run(run())
    assert "Result 0 for capital of Angola" in search.feedback
    assert "Luanda" in page.feedback and page.extra_logs["tool_errors"] == 0
    assert "database is locked" in caplog.text


def test_lone_surrogates_in_queries_and_urls(web, kb_server):
    url, config = web

    async def run(cfg, texts):
        box = make_toolbox(cfg.tools)
        agent = AgentInstance(cfg, box)
        results = [await agent.turn(t, label="x\ud800") for t in texts]
        # Straight to the tools too (evaluation and synthesis call them without the parser).
        direct = await box.search("capital \udcff of Angola", 3)
        await box.aclose()
        return results, direct

    texts = ["<search>x\ud800y</search>", f"<access>{url}/page?q=\udc80</access>", "<answer>a\ud800</answer>"]
    results, direct = asyncio.run(run(config, texts))
    assert "Result 0 for x\ufffdy" in results[0].feedback
    assert results[1].extra_logs["tool_errors"] == 0 and results[2].done
    assert direct and "\ufffd" in direct[0]["title"]

    local = AgentConfig(agent_type="asearcher", max_turns=100)
    local.tools.local.urls = [kb_server]
    results, direct = asyncio.run(run(local, texts))
    assert "<information>Doc 1" in results[0].feedback and direct


def surrogate_kb():
    """A Search-R1-format KB whose rows carry lone surrogates as JSON escapes, as any server's JSON may."""
    app = FastAPI()
    doc = b'{"id": "1", "title": "Lu\\ud800anda", "contents": "\\"Lu\\ud800anda\\"\\nCapital of \\udfffAngola."}'

    @app.post("/retrieve")
    async def retrieve():
        return Response(b'{"result": [[{"document": ' + doc + b', "score": 1.0}]]}', media_type="application/json")

    @app.post("/access")
    async def access():
        return Response(b'{"result": [{"contents": "page \\ud800 text"}]}', media_type="application/json")

    return app


@pytest.mark.parametrize("observation_format", ["native", "asearcher"])
def test_lone_surrogates_in_kb_replies_never_reach_the_feedback(observation_format):
    config = AgentConfig(agent_type="asearcher", max_turns=100)
    config.tools.observation_format = observation_format

    async def run():
        box = make_toolbox(config.tools)
        agent = AgentInstance(config, box)
        results = [await agent.turn(t, label="x") for t in ("<search>Angola</search>", "<access>Luanda</access>")]
        direct = await box.search("Angola", 1), await box.access("Luanda")
        await box.aclose()
        return results, direct

    with serve_app(surrogate_kb()) as url:
        config.tools.local.urls = [url]
        results, (docs, page) = asyncio.run(run())
    for result in results:
        assert result.extra_logs["tool_errors"] == 0
        result.feedback.encode("utf-8")  # the tokenizer's input: no lone surrogate left
        result.short.encode("utf-8")
    assert "Lu\ufffdanda" in results[0].feedback
    assert docs[0]["title"] == "Lu\ufffdanda" and page == "page \ufffd text"  # evaluation and synthesis too


def test_unexpected_tool_exceptions_are_counted_and_logged(caplog):
    """A backend bug (any exception type) is feedback text, a tool_errors count and a WARNING naming the type."""
    from asearcher_plugin.tools.base import ToolBox

    class Broken(ToolBox):
        async def _search(self, query, topk):
            return {}["missing"]

        async def _access(self, url):
            raise RuntimeError("backend bug")

    agent = AgentInstance(AgentConfig(agent_type="asearcher"), Broken())
    with caplog.at_level(logging.WARNING):
        s = asyncio.run(agent.turn("<search>q</search>", label="x"))
        a = asyncio.run(agent.turn("<access>u</access>", label="x"))
    assert "search failed" in s.feedback and "access failed" in a.feedback
    assert a.extra_logs["tool_errors"] == 2
    assert "KeyError" in caplog.text and "RuntimeError" in caplog.text


# --- property: arbitrary model output through step(), both backends -----------------------------------

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ANY_CHAR = st.one_of(st.characters(), SURROGATES, st.sampled_from(list("<>/ \n")))
TAGS = ["search", "access", "answer", "think", "SEARCH", "information", "query"]


def model_outputs(urls):
    pieces = st.one_of(
        st.text(ANY_CHAR, max_size=60),
        st.sampled_from([f"<{t}>" for t in TAGS] + [f"</{t}>" for t in TAGS]),
        st.sampled_from(urls),
    )
    return st.one_of(
        st.lists(pieces, max_size=12).map("".join),
        st.builds(
            lambda t, q: f"<{t}>{q}</{t}>",
            st.sampled_from(["search", "access", "answer"]),
            st.text(ANY_CHAR, max_size=40),
        ),
        st.builds(lambda t, u: f"<{t}>{u}</{t}>", st.sampled_from(["access", "ACCESS"]), st.sampled_from(urls)),
        st.builds(
            lambda t, n: t * n,
            st.sampled_from(["<search>", "<think>", "<access>x", "<search><think>", "\ud800"]),
            st.integers(1000, 25_000),
        ),
        st.builds(
            lambda q, n: f"<search>{q * n}</search>", st.text(ANY_CHAR, min_size=1, max_size=8), st.integers(100, 5000)
        ),
    )


def check_step_never_raises(config, urls):
    loop = asyncio.new_event_loop()
    box = loop.run_until_complete(_make(config))
    label = '["George Orwell"]'

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(model_outputs(urls))
    def check(text):
        agent = AgentInstance(config, box)
        agent.question = "Who wrote Animal \ud800 Farm?"
        result = loop.run_until_complete(agent.turn(text, label=label))
        assert REQUIRED <= set(result.openrlhf())
        assert isinstance(result.feedback, str) and isinstance(result.done, bool)
        result.feedback.encode("utf-8")  # tokenizable: no lone surrogates left
        assert len(result.feedback) < 60_000
        logs = result.extra_logs
        assert logs["invalid_actions"] + logs["searches"] + logs["accesses"] + logs["answered"] == 1

    try:
        check()
    finally:
        loop.run_until_complete(box.aclose())
        loop.close()


async def _make(config):
    return make_toolbox(config.tools)


def test_step_never_raises_web_backend(web):
    url, config = web
    check_step_never_raises(
        config,
        BAD_URLS
        + [
            f"{url}/page",
            f"{url}/to-bad-port",
            f"{url}/to-bad-ipv6",
            f"{url}/missing",
            "http://127.0.0.1:99999/",
            "Albert Einstein",
        ],
    )


def test_step_never_raises_local_backend(kb_server):
    config = AgentConfig(agent_type="asearcher", max_turns=1000)
    config.tools.local.urls = [kb_server]
    check_step_never_raises(config, BAD_URLS + ["https://en.wikipedia.org/wiki/Angola", "Albert Einstein"])


# --- the parser: linear on unclosed tags, same answers as the regex grammar ----------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unit", ["<search>", "<think>", "<search><think>", "<think></search>", "<answer><search>x"])
def test_parse_action_is_linear_on_200k_chars_of_unclosed_tags(unit):
    text = (unit * (200_000 // len(unit) + 1))[:200_000]
    action = parse_action(text)
    assert action.kind == "invalid" and len(action.error) < 500
    closed = parse_action(text + "</search>")
    assert closed.kind == "invalid" and len(closed.error) < 500


def reference_parse(text, allowed=("search", "access", "answer")):
    """The grammar as regular expressions (what the parser did before it was made linear)."""
    text = re.sub(r"<think>.*?</think>", " ", text, flags=re.S | re.I)
    blocks = re.findall(r"<(search|access|answer)>(.*?)</\1>", text, re.I | re.S)
    opened = re.findall(r"<(search|access|answer)>", text, re.I)
    if not blocks:
        return ("invalid", "never closed" if opened else "")
    if len(blocks) > 1 or len(opened) > 1:
        return ("invalid", "only one action")
    tag, argument = blocks[0][0].lower(), " ".join(blocks[0][1].split())
    if tag not in allowed or re.search(r"<(search|access|answer)>", argument, re.I):
        return ("invalid", "")
    if not argument and tag != "answer":
        return ("invalid", "is empty")
    return (tag, argument[:2000])


@settings(max_examples=600, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "<search>",
                    "</search>",
                    "<ACCESS>",
                    "</access>",
                    "<answer>",
                    "</Answer>",
                    "<think>",
                    "</think>",
                    "</THINK>",
                    " ",
                    "x",
                    "\n",
                ]
            ),
            st.text(max_size=3),
        ),
        max_size=14,
    ).map("".join)
)
def test_parser_agrees_with_the_regex_grammar(text):
    kind, detail = reference_parse(text)
    action = parse_action(text)
    assert action.kind == kind, (text, action)
    if kind != "invalid":
        assert action.argument == detail
    elif detail:
        assert detail in action.error, (text, action)


# --- 3. blocking work runs off the event loop ----------------------------------------------------------


def test_extraction_and_cache_run_off_the_event_loop(web, monkeypatch):
    import asearcher_plugin.tools.web as web_mod
    import asearcher_plugin.utils.disk_cache as cache_mod

    url, config = web
    threads = {"html": set(), "cache": set()}

    def spy(name, fn):
        def wrapped(*args, **kwargs):
            threads[name].add(threading.get_ident())
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(web_mod, "html_to_markdown", spy("html", web_mod.html_to_markdown))
    monkeypatch.setattr(cache_mod.DiskCache, "get", spy("cache", cache_mod.DiskCache.get))
    monkeypatch.setattr(cache_mod.DiskCache, "set", spy("cache", cache_mod.DiskCache.set))

    async def run():
        box = make_toolbox(config.tools)
        page = await box.access(f"{url}/page")
        docs = await box.search("capital of Angola", 3)
        await box.aclose()
        return threading.get_ident(), page, docs

    loop_thread, page, docs = asyncio.run(run())
    assert "Luanda is the capital of Angola" in page and len(docs) == 3
    assert threads["html"] and threads["cache"] and loop_thread not in threads["html"] | threads["cache"]


def test_judge_cache_runs_off_the_event_loop(tmp_path, monkeypatch):
    import asearcher_plugin.utils.disk_cache as cache_mod
    from asearcher_plugin.rewards.judge import judge

    seen = set()
    original = cache_mod.DiskCache.get

    def spy(self, key):
        seen.add(threading.get_ident())
        return original(self, key)

    monkeypatch.setattr(cache_mod.DiskCache, "get", spy)
    with serve_app(judge_app(200)) as url:
        cfg = JudgeConfig(base_url=f"{url}/v1", cache_dir=str(tmp_path))

        async def run():
            return threading.get_ident(), await judge("q\ud800", "a\udfff", ["a"], cfg)

        loop_thread, verdict = asyncio.run(run())
    assert verdict is True and seen and loop_thread not in seen


# --- 4. a turn that ends with EOS and no action ends the trajectory ------------------------------------


@pytest.mark.parametrize("ending", ["eos", "eos-vllm", "eos-openai"])
def test_eos_without_an_action_ends_the_trajectory(tokenizer, kb_server, ending):
    config = AgentConfig(agent_type="asearcher", max_turns=8, max_new_tokens_per_turn=64)
    config.tools.local.urls = [kb_server]
    script = [
        ("<search>Animal Farm author</search>", "stop"),
        ("I think that is all there is to say.", ending),
        ("<answer>never reached</answer>", "stop"),
    ]
    engine = ScriptedEngine(tokenizer, script)
    params = SamplingParams(temperature=1.0, logprobs=1)
    result = asyncio.run(
        AgentExecutor(config).execute("Who wrote Animal Farm?", "George Orwell", params, 2048, tokenizer, engine)
    )
    assert len(engine.calls) == 2  # nothing was generated after the EOS
    logs = result["extra_logs"]
    assert logs["turns"] == 2 and logs["answered"] == 0 and logs["ended_without_action"] == 1.0
    assert result["reward"] == 0.0 and not result["truncated"]
    tokens, ranges = result["observation_tokens"], result["action_ranges"]
    assert (
        ranges[-1][1] == len(tokens) == len(result["rollout_log_probs"])
    )  # the trajectory ends with the model's turn
    if ending != "eos-openai":
        assert tokens[-1] == tokenizer.eos_token_id
    assert "<information>" not in tokenizer.decode(tokens[ranges[-1][0] :])


@pytest.mark.parametrize("ending", ["length", "stop-string-without-report"])
def test_turns_not_ended_by_eos_go_on(tokenizer, kb_server, ending):
    """Out of tokens mid-turn, or a stop string a server did not report: corrective feedback, then the next turn."""
    config = AgentConfig(agent_type="asearcher", max_turns=3, max_new_tokens_per_turn=64)
    config.tools.local.urls = [kb_server]
    first = (
        ("I should look this up", "length") if ending == "length" else ("<search>Animal Farm</search>", "eos-openai")
    )
    engine = ScriptedEngine(tokenizer, [first, ("<answer>George Orwell</answer>", "stop")])
    result = asyncio.run(
        AgentExecutor(config).execute(
            "Who wrote Animal Farm?", "George Orwell", SamplingParams(), 2048, tokenizer, engine
        )
    )
    assert len(engine.calls) == 2 and result["extra_logs"]["answered"] == 1.0
    assert result["extra_logs"]["ended_without_action"] == 0.0


def test_prompt_with_lone_surrogates_and_huge_turns(tokenizer, kb_server):
    config = AgentConfig(agent_type="asearcher", max_turns=3, max_new_tokens_per_turn=64)
    config.tools.local.urls = [kb_server]
    engine = ScriptedEngine(
        tokenizer,
        [
            ("<search>" * 3000 + "x</search>", "stop"),
            ("<search>" + "word " * 5000 + "</search>", "stop"),
            ("<answer>Orwell</answer>", "stop"),
        ],
    )
    result = asyncio.run(
        AgentExecutor(config).execute(
            "Who wrote \ud800 Animal Farm?" + " very" * 20_000, "Orwell", SamplingParams(), 65536, tokenizer, engine
        )
    )
    assert result["extra_logs"]["turns"] == 3 and result["extra_logs"]["searches"] == 1
    assert result["extra_logs"]["invalid_actions"] == 1 and result["extra_logs"]["answered"] == 1
    first_feedback = tokenizer.decode(
        result["observation_tokens"][result["action_ranges"][0][1] : result["action_ranges"][1][0]]
    )
    assert "only one action" in first_feedback and len(first_feedback) < 1000
