"""The action grammar on adversarial model output: it never raises and explains what was wrong."""

from hypothesis import given, settings
from hypothesis import strategies as st

from asearcher_plugin.agent.actions import parse_action


def test_valid_actions():
    assert (
        parse_action("<think>need facts</think> <search> capital of Angola </search>").argument == "capital of Angola"
    )
    a = parse_action("<access>https://en.wikipedia.org/wiki/Angola</access>")
    assert (a.kind, a.argument) == ("access", "https://en.wikipedia.org/wiki/Angola")
    assert parse_action("<answer> Luanda </answer>").argument == "Luanda"
    assert parse_action("<answer></answer>").kind == "answer"  # an empty answer is an answer (scored 0)
    # An action mentioned while thinking is not taken.
    assert parse_action("<think>maybe <search>x</search>?</think><answer>y</answer>").kind == "answer"


def test_invalid_actions_name_the_problem():
    cases = {
        "I think the answer is Luanda.": "no action found",
        "<search>capital of Angola": "never closed",
        "<search>a</search><search>b</search>": "only one action",
        "<search>a</search><answer>b</answer>": "only one action",
        "<search>a <answer>b</answer></search>": "only one action",
        "<query>x</query>": "<query> is not an action",
        "<search>   </search>": "is empty",
        "<tool_call>{}</tool_call>": "not an action",
    }
    for text, message in cases.items():
        action = parse_action(text)
        assert action.kind == "invalid" and message in action.error, (text, action)
    assert "not available" in parse_action("<access>u</access>", allowed=("search", "answer")).error


def test_long_queries_are_cut():
    action = parse_action("<search>" + "word " * 5000 + "</search>")
    assert action.kind == "search" and len(action.argument) == 2000


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>/searchanswerthinkacces x\n\x00é")) | st.characters(), max_size=300))
def test_parser_never_raises(text):
    action = parse_action(text)
    assert action.kind in ("search", "access", "answer", "invalid")
    assert (action.kind == "invalid") == bool(action.error)
