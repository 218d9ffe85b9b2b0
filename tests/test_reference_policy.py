"""The scripted reference policy through the real agent: real KB server, real tokenizer, every agent type."""

import asyncio
import json

import pytest

from asearcher_plugin.agent.actions import parse_action
from asearcher_plugin.agent.reference_policy import NAME, ReferencePolicy
from asearcher_plugin.engines.types import SamplingParams
from asearcher_plugin.eval.datasets import load_dataset
from asearcher_plugin.eval.runner import run_eval
from asearcher_plugin.settings.config import AgentConfig

# Sample questions whose answer the top-ranked page of the sample KB states (checked by reading the pages).
ON_TOP_PAGE = {"sample_0001": "Luanda", "sample_0002": "1921", "sample_0007": "eighteen", "sample_0008": "Stagira"}


def items():
    return [i for i in load_dataset("sample", limit=8) if i["id"] in ON_TOP_PAGE]


def config(url, agent_type="asearcher", observation_format="native", max_turns=6):
    return AgentConfig.model_validate(
        {
            "agent_type": agent_type,
            "max_turns": max_turns,
            "max_new_tokens_per_turn": 256,
            "tools": {"observation_format": observation_format, "local": {"urls": [url]}},
        }
    )


def evaluate(tmp_path, cfg, policy, tokenizer, k=1, name="run"):
    out = asyncio.run(
        run_eval(items(), cfg, policy, tokenizer, tmp_path / name, k=k, max_length=32768, progress=False)
    )
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    return out, sorted(rows, key=lambda r: (r["id"], r["seed"]))


@pytest.mark.parametrize(
    ("agent_type", "observation_format", "pages"),
    [
        ("asearcher", "native", 1),
        ("asearcher", "asearcher", 1),
        ("asearcher-reasoning", "native", 1),
        ("search-r1", "native", 0),
        ("tool-calls", "native", 1),
    ],
)
def test_it_searches_reads_and_answers_in_each_agent_format(
    tmp_path, kb_server, tokenizer, agent_type, observation_format, pages
):
    cfg = config(kb_server, agent_type, observation_format, max_turns=16)
    policy = ReferencePolicy.for_items(tokenizer, cfg, items(), wrong_rate=0.0)
    _, rows = evaluate(tmp_path, cfg, policy, tokenizer)
    assert len(rows) == len(ON_TOP_PAGE)
    for row in rows:
        logs = row["logs"]
        assert row["status"] == "ok" and logs["invalid_actions"] == 0, row["text"][-2000:]
        assert logs["searches"] == 1 and logs["accesses"] == pages and logs["answered"] == 1
        if agent_type != "search-r1":  # Search-R1 sees only the results' first characters, not the page
            assert row["answer"] == ON_TOP_PAGE[row["id"]] and row["scores"]["em"] == 1.0
    # The search is the question itself, written in the agent's own grammar.
    first = next(r for r in rows if r["id"] == "sample_0001")
    if agent_type == "tool-calls":  # as the tokenizer's chat template writes calls (the tiny model's: Qwen2.5's)
        call = '<tool_call>\n{{"name": "{}", "arguments": {{"{}": "{}"}}}}\n</tool_call>'
        assert call.format("search", "query", "What is the capital and largest city of Angola?") in first["text"]
        assert call.format("access", "url", "https://en.wikipedia.org/wiki/Angola") in first["text"]
        assert len(first["sequences"]) == 1  # the template wrote back the calls as made: one sequence
        return
    assert "<search> What is the capital and largest city of Angola? </search>" in first["text"]
    if pages:
        assert "<access> https://en.wikipedia.org/wiki/Angola </access>" in first["text"]


def test_wrong_on_purpose_is_seeded_and_said_so(tmp_path, kb_server, tokenizer):
    cfg = config(kb_server)
    always = ReferencePolicy.for_items(tokenizer, cfg, items(), wrong_rate=1.0)
    _, rows = evaluate(tmp_path, cfg, always, tokenizer, name="wrong")
    for row in rows:
        assert row["answer"] and row["answer"] != ON_TOP_PAGE[row["id"]] and row["scores"]["em"] == 0.0
        assert "wrong on purpose" in row["text"]

    # Some of 4 questions x 8 seeds wrong, not all; the same pairs again in a second run with the same seed.
    mixed = ReferencePolicy.for_items(tokenizer, cfg, items(), wrong_rate=0.25, seed=3)
    _, first = evaluate(tmp_path, cfg, mixed, tokenizer, k=8, name="mixed1")
    _, second = evaluate(tmp_path, cfg, mixed, tokenizer, k=8, name="mixed2")
    wrong = [(r["id"], r["seed"]) for r in first if r["scores"]["em"] == 0.0]
    assert 0 < len(wrong) < len(first)
    assert [r["answer"] for r in first] == [r["answer"] for r in second]


def test_the_turn_budget_binds_it_like_a_model(tokenizer):
    policy = ReferencePolicy(tokenizer, "asearcher")
    prompt = tokenizer(text=policy_prompt("Who wrote Hamlet?"), add_special_tokens=False)["input_ids"]
    params = SamplingParams(
        max_tokens=3, stop=["</search>", "</access>", "</answer>"], include_stop_str_in_output=True
    )
    out = asyncio.run(policy.generate(prompt, params)).outputs[0]
    assert len(out.token_ids) == 3 and out.finish_reason == "length"
    whole = asyncio.run(
        policy.generate(prompt, SamplingParams(max_tokens=200, stop=params.stop, include_stop_str_in_output=True))
    )
    turn = whole.outputs[0]
    assert turn.finish_reason == "stop" and turn.stop_reason == "</search>"
    assert parse_action(turn.text).argument == "Who wrote Hamlet?"
    assert tokenizer.decode(turn.token_ids) == turn.text


def test_after_a_failed_search_it_still_answers_with_a_valid_action(tokenizer):
    from asearcher_plugin.agent.actions import parse_action

    policy = ReferencePolicy(tokenizer, "asearcher", wrong_rate=0.0)
    transcript = (
        policy_prompt("What is the capital of Angola?")
        + "<think>I will search for the question.</think>\n<search> What is the capital of Angola? </search>"
        + "\n\n<information>search failed: web search needs $SERPER_API_KEY</information>\n\n"
    )
    action = parse_action(policy.reply(transcript))
    assert action.kind == "answer" and "<" not in action.argument, action


def policy_prompt(question):
    from asearcher_plugin.agent.prompts import build_prompt

    return build_prompt("asearcher", question)


def test_bad_settings_are_named(tokenizer):
    with pytest.raises(ValueError, match="unknown agent_type 'nope'"):
        ReferencePolicy(tokenizer, "nope")
    with pytest.raises(ValueError, match=r"wrong_rate must be within \[0, 1\], got 1.5"):
        ReferencePolicy(tokenizer, wrong_rate=1.5)


def test_reports_say_who_answered(tmp_path, kb_server, tokenizer, tiny_model):
    from asearcher_plugin.engines.hf import HFEngine

    cfg = config(kb_server)
    out, _ = evaluate(tmp_path, cfg, ReferencePolicy.for_items(tokenizer, cfg, items()), tokenizer, name="policy")
    summary, report = (out / "summary.md").read_text(), (out / "report.html").read_text()
    assert f"These answers come from the {NAME}" in summary.splitlines()[2]
    assert report.index('id="banner"') < report.index("<h1>") and NAME in report
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["card"]["model"]["engine"] == NAME

    tiny_cfg = AgentConfig.model_validate(
        {"max_turns": 1, "max_new_tokens_per_turn": 4, "tools": {"local": {"urls": [kb_server]}}}
    )
    engine = HFEngine(str(tiny_model))
    random_out = asyncio.run(
        run_eval(items()[:1], tiny_cfg, engine, engine.tokenizer, tmp_path / "tiny", max_length=512, progress=False)
    )
    summary, report = (random_out / "summary.md").read_text(), (random_out / "report.html").read_text()
    assert "untrained random model" in summary.splitlines()[2] and "--base-url" in summary.splitlines()[2]
    assert report.index('id="banner"') < report.index("<h1>") and "untrained random model" in report
