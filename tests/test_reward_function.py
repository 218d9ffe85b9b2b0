"""`reward.function: "module:callable"`: checked at config load, called once per trajectory with what it names."""

import asyncio

import pytest

from asearcher_plugin.engines.types import SamplingParams
from asearcher_plugin.env import AgentExecutor
from asearcher_plugin.rewards.reward_function import RewardFunctionError
from asearcher_plugin.settings.config import AgentConfig, ConfigError, override_agent_config
from tests import reward_functions
from tests.helpers import ScriptedEngine

QUESTION, LABEL = "Which ocean lies west of Angola?", ["Atlantic Ocean"]


def run(tokenizer, kb_server, function: str, turns, **reward):
    config = AgentConfig.model_validate(
        {
            "agent_type": "asearcher",
            "max_turns": 4,
            "tools": {"local": {"urls": [kb_server]}},
            "reward": {"function": function, **reward},
        }
    )
    executor = AgentExecutor(config)
    engine = ScriptedEngine(tokenizer, turns)
    params = SamplingParams(max_tokens=64, logprobs=0)
    return asyncio.run(executor.run(QUESTION, LABEL, params, 4096, tokenizer, engine))


@pytest.fixture(autouse=True)
def fresh_calls():
    reward_functions.CALLS.clear()


def test_the_function_gets_question_answer_label_and_counters_and_its_value_is_the_reward(tokenizer, kb_server):
    turns = [("<search>Angola coast</search>", "stop"), ("<answer>Atlantic</answer>", "stop")]
    out = run(tokenizer, kb_server, "tests.reward_functions:record", turns, format_factor=True)
    (call,) = reward_functions.CALLS
    assert call["question"] == QUESTION and call["answer"] == "Atlantic" and call["label"] == LABEL
    counters = call["counters"]
    assert counters["turns"] == 2 and counters["searches"] == 1 and counters["invalid_actions"] == 0
    expected_tokens = sum(len(tokenizer(text=t, add_special_tokens=False)["input_ids"]) for t, _ in turns)
    assert counters["generated_tokens"] == expected_tokens
    assert counters["generated_chars"] == len("<search>Angola coast</search>") + len("<answer>Atlantic</answer>")
    assert out.reward == 1.25  # 0.25 + one search, as the function computes; not the F1 of "Atlantic"
    assert out.scores["f1"] == pytest.approx(2 / 3)  # the metric is still logged beside it
    assert out.to_openrlhf()["reward"] == 1.25


def test_no_answer_is_none_and_format_factor_does_not_apply(tokenizer, kb_server):
    turns = [("nothing useful", "length"), ("still nothing", "eos")]
    out = run(tokenizer, kb_server, "tests.reward_functions:record", turns, format_factor=True)
    (call,) = reward_functions.CALLS
    assert call["answer"] is None and call["counters"]["invalid_actions"] == 2
    assert out.reward == 0.25  # format_factor would have made it 0


def test_brevity_reward_reads_generated_tokens(tokenizer, kb_server):
    short = run(tokenizer, kb_server, "tests.reward_functions:brevity", [("", "eos")])
    long = run(tokenizer, kb_server, "tests.reward_functions:brevity", [("word " * 20, "length")] * 4)
    assert short.reward > 0.95 and long.reward < short.reward


@pytest.mark.parametrize(
    "spec, message",
    [
        ("tests.reward_functions", "expected 'module:callable'"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("tests.reward_functions:missing", "has no attribute 'missing'"),
        ("tests.reward_functions:NOT_CALLABLE", "is a int, not a callable"),
        (
            "tests.reward_functions:two_arguments",
            "must accept the keyword arguments question, answer, label, counters",
        ),
    ],
)
def test_a_bad_reference_is_refused_at_config_load(spec, message):
    with pytest.raises(ConfigError) as err:
        override_agent_config(AgentConfig(), [f"agent.reward.function={spec}"])
    assert message in str(err.value) and spec in str(err.value)


@pytest.mark.parametrize(
    "name, message",
    [
        ("raises", "raised KeyError"),
        ("not_a_number", "returned 'high'"),
        ("nan", "returned nan"),
    ],
)
def test_a_failing_function_fails_the_trajectory_naming_itself(tokenizer, kb_server, name, message):
    with pytest.raises(RewardFunctionError) as err:
        run(tokenizer, kb_server, f"tests.reward_functions:{name}", [("<answer>x</answer>", "stop")])
    assert message in str(err.value) and f"tests.reward_functions:{name}" in str(err.value)
