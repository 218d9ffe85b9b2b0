"""HFEngine's vLLM contract, OpenAIEngine against a completions server backed by the real tiny model,
and the LLM judge against a local chat-completions server with scripted replies."""

import asyncio

import pytest
from fastapi import FastAPI

from asearcher_plugin.engines.hf import HFEngine
from asearcher_plugin.engines.openai import EngineUnavailable, OpenAIEngine
from asearcher_plugin.engines.types import SamplingParams
from asearcher_plugin.rewards.judge import JudgeUnavailable, judge, parse_verdict
from asearcher_plugin.settings.config import JudgeConfig
from tests.helpers import free_port, serve_app


@pytest.fixture(scope="module")
def engine(tiny_model):
    return HFEngine(str(tiny_model), seed=0)


def test_hf_engine_contract(engine):
    ids = engine.tokenizer("The capital of Angola is", add_special_tokens=False)["input_ids"]
    out = asyncio.run(engine.generate(ids, SamplingParams(temperature=0.0, max_tokens=12, logprobs=1))).outputs[0]
    assert len(out.token_ids) == len(out.logprobs) <= 12 and out.finish_reason in ("stop", "length")
    assert all(lp[t].logprob <= 0 for t, lp in zip(out.token_ids, out.logprobs))
    # Greedy decoding is deterministic; a stop string ends generation and is kept when asked.
    again = asyncio.run(engine.generate(ids, SamplingParams(temperature=0.0, max_tokens=12))).outputs[0]
    assert again.token_ids == out.token_ids
    word = engine.tokenizer.decode(out.token_ids[2:4])
    if word.strip():
        stopped = asyncio.run(
            engine.generate(
                ids, SamplingParams(temperature=0.0, max_tokens=12, stop=[word], include_stop_str_in_output=True)
            )
        ).outputs[0]
        assert stopped.finish_reason == "stop" and stopped.text.endswith(word) and len(stopped.token_ids) <= 4
        cut = asyncio.run(engine.generate(ids, SamplingParams(temperature=0.0, max_tokens=12, stop=[word]))).outputs[0]
        assert not cut.text.endswith(word)
    sampled = asyncio.run(
        engine.generate(ids, SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=8, seed=3))
    )
    assert 1 <= len(sampled.outputs[0].token_ids) <= 8


def completions_server(engine: HFEngine, fail_first: int = 0):
    """An OpenAI-compatible /v1/completions endpoint in front of the real tiny model (vLLM's token-id extension)."""
    app = FastAPI()
    app.state.calls = 0

    @app.post("/v1/completions")
    async def completions(body: dict):
        app.state.calls += 1
        if app.state.calls <= fail_first:
            from fastapi.responses import JSONResponse

            return JSONResponse({"error": "overloaded"}, status_code=503)
        params = SamplingParams(
            temperature=body["temperature"],
            top_p=body["top_p"],
            max_tokens=body["max_tokens"],
            stop=body.get("stop"),
            include_stop_str_in_output=body.get("include_stop_str_in_output", False),
            logprobs=body.get("logprobs"),
        )
        out = (await engine.generate(body["prompt"], params)).outputs[0]
        logprobs = None
        if body.get("logprobs"):
            logprobs = {
                "tokens": [f"token_id:{t}" for t in out.token_ids],
                "token_logprobs": [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs)],
            }
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": body["model"],
            "choices": [{"index": 0, "text": out.text, "finish_reason": out.finish_reason, "logprobs": logprobs}],
        }

    return app


def test_openai_engine_against_a_served_model(engine):
    app = completions_server(engine, fail_first=1)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with serve_app(app) as url:
        remote = OpenAIEngine([dead, f"{url}/v1"], "tiny", engine.tokenizer)
        ids = engine.tokenizer("Albert Einstein was", add_special_tokens=False)["input_ids"]
        params = SamplingParams(temperature=0.0, max_tokens=10, logprobs=1)

        async def run():
            out = await remote.generate(ids, params)
            await remote.aclose()
            return out

        out = asyncio.run(run()).outputs[0]
    local = asyncio.run(engine.generate(ids, params)).outputs[0]
    # Same model, greedy: the served tokens are exactly the in-process ones, after a dead URL and a 503.
    assert out.token_ids == local.token_ids and out.text == local.text
    assert [next(iter(d.values())).logprob for d in out.logprobs] == pytest.approx(
        [lp[t].logprob for t, lp in zip(local.token_ids, local.logprobs)], abs=1e-5
    )

    async def all_dead():
        eng = OpenAIEngine([dead], "tiny", engine.tokenizer, retries=1)
        try:
            await eng.generate(ids, params)
        finally:
            await eng.aclose()

    with pytest.raises(EngineUnavailable, match="no completion server answered"):
        asyncio.run(all_dead())


def test_the_key_comes_from_the_endpoint_config(engine, tiny_model, monkeypatch):
    """`make_engine` resolves $OPENAI_API_KEY once, through the shared endpoint config; the engine itself reads no
    environment variable and sends the key it was given."""
    from asearcher_plugin.engines import make_engine

    app, sent = completions_server(engine), []

    @app.middleware("http")
    async def record(request, call_next):
        sent.append(request.headers.get("authorization"))
        return await call_next(request)

    async def ask(remote):
        try:
            await remote.generate([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=2))
        finally:
            await remote.aclose()

    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    with serve_app(app) as url:
        asyncio.run(ask(make_engine(None, [f"{url}/v1"], "tiny", str(tiny_model))[0]))
        asyncio.run(ask(OpenAIEngine(f"{url}/v1", "tiny", engine.tokenizer)))
        asyncio.run(ask(OpenAIEngine(f"{url}/v1", "tiny", engine.tokenizer, api_key="sk-given")))
    assert sent == ["Bearer sk-from-env", "Bearer none", "Bearer sk-given"]


def judge_server(replies: list[str]):
    app = FastAPI()
    app.state.prompts = []

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        app.state.prompts.append(body["messages"][0]["content"])
        text = replies[min(len(app.state.prompts), len(replies)) - 1]
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}

    return app


def test_judge_verdicts_retries_and_failure():
    assert parse_verdict('Sure. {"verdict": "correct", "reason": "same city"}') is True
    assert parse_verdict('{"verdict": "INCORRECT"}') is False
    assert parse_verdict("I think it's right") is None

    app = judge_server(["no json here", '```json\n{"verdict": "correct", "reason": "alias"}\n```'])
    with serve_app(app) as url:
        cfg = JudgeConfig(base_url=f"{url}/v1", retries=2)
        assert asyncio.run(judge("Capital of Angola?", "Luanda city", ["Luanda"], cfg)) is True
    assert len(app.state.prompts) == 2 and "Luanda city" in app.state.prompts[0]

    with serve_app(judge_server(["nonsense"])) as url:
        with pytest.raises(JudgeUnavailable, match="no verdict"):
            asyncio.run(judge("q", "a", ["b"], JudgeConfig(base_url=f"{url}/v1", retries=1)))


def test_judge_reward_falls_back_to_f1_with_a_flag():
    from asearcher_plugin.env import AgentInstance
    from asearcher_plugin.settings.config import AgentConfig

    async def run(url):
        config = AgentConfig(agent_type="search-r1")
        config.reward.metric = "judge"
        config.reward.judge = JudgeConfig(base_url=url, retries=0)
        agent = AgentInstance(config, None)
        agent.question = "Who wrote Animal Farm?"
        return agent, await agent.turn("<answer>Orwell, George</answer>", label=["George Orwell"])

    with serve_app(judge_server(['{"verdict": "correct"}'])) as url:
        agent, result = asyncio.run(run(f"{url}/v1"))
    assert result.reward == 1.0 and result.extra_logs["score_judge"] == 1.0
    assert result.extra_logs["judge_failed"] == 0.0
    agent, result = asyncio.run(run(f"http://127.0.0.1:{free_port()}/v1"))
    assert result.extra_logs["judge_failed"] == 1.0 and result.reward == pytest.approx(1.0)


def test_judge_verdicts_are_cached_on_disk(tmp_path):
    app = judge_server(['{"verdict": "correct"}'])
    with serve_app(app) as url:
        cfg = JudgeConfig(base_url=f"{url}/v1", cache_dir=str(tmp_path))
        for _ in range(3):
            assert asyncio.run(judge("Capital of Angola?", "Luanda", ["Luanda"], cfg)) is True
        assert asyncio.run(judge("Capital of Angola?", "Lisbon", ["Luanda"], cfg)) is True  # a new pair asks again
    assert len(app.state.prompts) == 2 and (tmp_path / "judge.sqlite").is_file()
