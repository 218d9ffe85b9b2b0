"""The judge's verdict formats, sampling, prediction cut and prompt templates, against a local server
speaking the OpenAI chat-completions wire format with scripted (also malformed) replies."""

import asyncio

import pytest
import yaml
from fastapi import FastAPI
from hypothesis import given
from hypothesis import settings as settings_h
from hypothesis import strategies as st

from asearcher_plugin.rewards.judge import (
    JUDGE_PROMPT,
    Judge,
    JudgeUnavailable,
    TemplateError,
    check_template,
    judge_verdict,
    parse_asearcher_judgement,
    settings,
)
from asearcher_plugin.settings.config import AgentConfig, ConfigError, JudgeConfig, load_config
from tests.helpers import serve_app

# ASearcher's DefaultJudge prompt (evaluation/evaluate.py) with its fields filled in, as its judge sees it.
ASEARCHER_PROMPT = (
    "You are an evaluation assistant. Please determine if the predicted answer is equivalent to the labeled answer."
    "\n\nQuestion: Capital of Angola?\n\nLabeled Answer: Luanda\n\nPredicted Answer: {pred}\n\n"
    'Did the model give an answer **equivalent** to the labeled answer? Please respond with "Correct" if they are '
    'equivalent, or "Incorrect" if they are not equivalent.\n\n'
    "The output should in the following json format:\n```json\n{{\n"
    '    "rationale": your rationale for the judgement, as a text,\n'
    '    "judgement": your judgement result, can only be "Correct" or "Incorrect",\n'
    "}}\n```\n"
)
# The reply its own example asks for: JSON with a trailing comma, which only a Python literal reading accepts.
FENCED = '```json\n{{\n    "rationale": "{why}",\n    "judgement": "{verdict}",\n}}\n```'


def chat_server(replies: list[str]):
    """Serves `replies` in turn (the last one again once they run out) and records every request body."""
    app = FastAPI()
    app.state.bodies = []

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        app.state.bodies.append(body)
        text = replies[min(len(app.state.bodies), len(replies)) - 1]
        return {
            "id": "c",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        }

    return app


def ask(app, prediction: str, golds=("Luanda",), **cfg):
    with serve_app(app) as url:
        config = JudgeConfig(base_url=f"{url}/v1", **cfg)
        return asyncio.run(judge_verdict("Capital of Angola?", prediction, list(golds), config))


def test_asearcher_format_prompt_sampling_and_cut():
    app = chat_server([FENCED.format(why="Same city.", verdict="Correct")])
    prediction = "Luanda" + " x" * 400 + "</answer> trailing"
    verdict = ask(app, prediction, verdict_format="asearcher")
    assert verdict.correct is True and verdict.rationale == "Same city."
    body = app.state.bodies[0]
    # ASearcher: prediction cut at its first "</", then to 500 characters; temperature 0.6, 1,024 tokens
    cut = prediction.split("</")[0][:500]
    assert len(cut) == 500 and body["messages"] == [{"role": "user", "content": ASEARCHER_PROMPT.format(pred=cut)}]
    assert body["temperature"] == 0.6 and body["max_tokens"] == 1024 and "top_p" not in body


def test_asearcher_format_shows_several_golds_as_a_list_and_settings_override():
    app = chat_server(['{"rationale": "alias", "judgement": "correct"}'])
    verdict = ask(
        app,
        "Loanda</answer>",
        golds=["Luanda", "Loanda"],
        verdict_format="asearcher",
        temperature=0.0,
        top_p=0.9,
        max_tokens=64,
        prediction_max_chars=3,
        prediction_cut_at="",
    )
    body = app.state.bodies[0]
    assert verdict.correct is True
    assert "Labeled Answer: ['Luanda', 'Loanda']\n" in body["messages"][0]["content"]
    assert "Predicted Answer: Loa\n" in body["messages"][0]["content"]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.0, 0.9, 64)


def test_default_format_is_unchanged():
    app = chat_server(['{"verdict": "incorrect", "reason": "another city"}'])
    verdict = ask(app, "Lisbon</answer>")
    body = app.state.bodies[0]
    assert verdict.correct is False and verdict.rationale == "another city"
    expected = JUDGE_PROMPT.format(question="Capital of Angola?", golds=["Luanda"], prediction="Lisbon</answer>")
    assert body["messages"][0]["content"] == expected and expected.startswith("You are grading")
    assert body["temperature"] == 0.0 and body["max_tokens"] == 256


@pytest.mark.parametrize(
    "reply,expected",
    [
        ('{"rationale": "ok", "judgement": "Correct"}', True),  # plain JSON
        ("Sure.\n```json\n{'rationale': 'no', 'judgement': 'Incorrect',}\n```\nDone.", False),  # a Python literal
        ('{"rationale": "fine", "judgement": "CORRECT"}', True),  # case-insensitive
        ('{"rationale": "missing the key"}', False),  # parsed without a judgement: Incorrect, as ASearcher
        ('{"judgement": "Correct." }', False),  # anything but "correct" is Incorrect
        ('I think so. "judgement": "Incorrect" since the city differs', False),  # substring, when nothing parses
        ('blah "Judgement": Correct blah', True),  # the unquoted form ASearcher also accepts
        ('"the answer is fine"', False),  # a string literal without the word: Incorrect
    ],
)
def test_asearcher_judgement_parsing(reply, expected):
    verdict = parse_asearcher_judgement(reply)
    assert verdict is not None and verdict.correct is expected


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "I cannot decide.",
        '```json\n{"judgement": \n```',
        '{"judgement": 1}',
        "42",
        "[[[[" * 2000,
        '"my judgement: correct"',
        None,
    ],
)
def test_asearcher_replies_without_a_verdict(reply):
    assert parse_asearcher_judgement(reply) is None


def test_malformed_replies_are_retried_then_fail():
    app = chat_server(["no verdict here", '{"judgement": ["Correct"]}', FENCED.format(why="ok", verdict="Incorrect")])
    verdict = ask(app, "Lisbon", verdict_format="asearcher", retries=2)
    assert verdict.correct is False and len(app.state.bodies) == 3
    with pytest.raises(JudgeUnavailable, match="no verdict"):
        ask(chat_server(["```json\n{broken\n```"]), "Lisbon", verdict_format="asearcher", retries=1)


def test_a_reply_of_another_shape_is_retried():
    app = FastAPI()
    calls = []

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        calls.append(body)
        if len(calls) == 1:
            return {"choices": []}
        if len(calls) == 2:
            return {"choices": [{"message": {"content": None}}]}
        return {"choices": [{"message": {"content": '{"rationale": "r", "judgement": "Correct"}'}}]}

    assert ask(app, "Luanda", verdict_format="asearcher", retries=2).correct is True and len(calls) == 3


async def verdict_of(judge: Judge):
    try:
        return await judge.verdict("Capital of Angola?", "Luanda", ["Luanda"])
    finally:
        await judge.aclose()


def test_verdicts_and_rationales_are_cached_per_format(tmp_path):
    app = chat_server(['{"rationale": "same", "judgement": "Correct", "verdict": "incorrect", "reason": "other"}'])
    with serve_app(app) as url:
        for fmt in ("asearcher", "asearcher", "verdict"):
            cfg = JudgeConfig(base_url=f"{url}/v1", cache_dir=str(tmp_path), verdict_format=fmt)
            verdict = asyncio.run(verdict_of(Judge(cfg)))
            assert (verdict.correct, verdict.rationale) == ((True, "same") if fmt == "asearcher" else (False, "other"))
    assert len(app.state.bodies) == 2  # the second asearcher call was a cache hit; the format is part of the key


def test_user_template(tmp_path):
    path = tmp_path / "judge.txt"
    path.write_text(
        'Q: {question}\nGold: {gt_answer}\nPred: {pred_answer}\nReply {{"judgement": ...}}', encoding="utf-8"
    )
    app = chat_server(['{"judgement": "Correct"}'])
    assert ask(app, "Luanda", verdict_format="asearcher", prompt_template=str(path)).correct is True
    sent = app.state.bodies[0]["messages"][0]["content"]
    assert sent == 'Q: Capital of Angola?\nGold: Luanda\nPred: Luanda\nReply {"judgement": ...}'


@pytest.mark.parametrize(
    "text,problem",
    [
        ("{question} {golds} {prediction} {answer}", r"unknown field\(s\) \{answer\}"),
        ("{question} {golds}", r"must use \{pred_answer\} or \{prediction\}"),
        ("{question} {prediction} {golds} {", "not a valid template"),
        ('{question} {prediction} {golds} {"judgement": 1}', r'unknown field\(s\) \{"judgement"\}'),
        ("{question} {prediction} {golds} {}", r"unknown field\(s\) \{\}"),
        ("{question} {prediction} {golds[0]}", r"unknown field\(s\) \{golds\[0\]\}"),
    ],
)
def test_template_fields_are_checked(text, problem):
    with pytest.raises(TemplateError, match=problem):
        check_template(text, "t.txt")


def test_a_bad_template_fails_at_config_load_naming_it(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("{question} {golds} {prediction} {rationale}", encoding="utf-8")
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(yaml.safe_dump({"reward": {"metric": "judge", "judge": {"prompt_template": str(bad)}}}))
    problem = r"reward\.judge\.prompt_template: .*bad\.txt: unknown field\(s\) \{rationale\}"
    with pytest.raises(ConfigError, match=problem):
        load_config(cfg)
    cfg.write_text(yaml.safe_dump({"reward": {"judge": {"prompt_template": str(tmp_path / "missing.txt")}}}))
    with pytest.raises(ConfigError, match="missing.txt: judge prompt template not found"):
        load_config(cfg)
    cfg.write_text(yaml.safe_dump({"reward": {"judge": {"verdict_format": "gpt"}}}))
    with pytest.raises(ConfigError, match="verdict_format"):
        load_config(cfg)


def test_shipped_templates_load():
    # that a wheel ships them is checked in tests/test_prompt_templates.py::test_pip_install_ships_the_templates
    for fmt in ("verdict", "asearcher"):
        assert settings(JudgeConfig(verdict_format=fmt)).template  # read and checked


def test_environment_reward_with_the_asearcher_judge():
    from asearcher_plugin.env import AgentInstance

    async def run(url):
        config = AgentConfig(agent_type="search-r1")
        config.reward.metric = "judge"
        config.reward.judge = JudgeConfig(base_url=url, retries=0, verdict_format="asearcher")
        agent = AgentInstance(config, None)
        agent.question = "Who wrote Animal Farm?"
        return await agent.turn("<answer>Orwell</answer>", label=["George Orwell"])

    with serve_app(chat_server([FENCED.format(why="Same person.", verdict="Correct")])) as url:
        result = asyncio.run(run(f"{url}/v1"))
    # F1 alone would give 2/3 ({orwell} vs {george, orwell}); the judge's verdict is the reward
    assert result.reward == 1.0 and result.extra_logs["judge_failed"] == 0.0
    with serve_app(chat_server(["not json"])) as url:
        result = asyncio.run(run(f"{url}/v1"))
    assert result.extra_logs["judge_failed"] == 1.0 and result.reward == pytest.approx(2 / 3)


@settings_h(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("{}[]()\"':,` \njudgementcorrectJSON1\\")), max_size=200))
def test_asearcher_parser_never_raises(reply):
    verdict = parse_asearcher_judgement(reply)
    assert verdict is None or isinstance(verdict.correct, bool)
