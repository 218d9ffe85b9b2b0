"""The tool registry and the call parsers of agent_type tool-calls: schemas from type hints, argument checks, sync and
async tools with a deadline, bad tool definitions refused at config load, Hermes and Llama 3 calls."""

import asyncio
from typing import Literal

import pytest

from asearcher_plugin.agent.tool_parsers import ToolCall, parse_hermes, parse_llama3_json
from asearcher_plugin.settings.config import AgentConfig, ConfigError, override_agent_config
from asearcher_plugin.tools.registry import BadToolCall, ToolRegistry, ToolSpecError, resolve_extra, tool_from_function


def convert(value: float, unit: Literal["km", "mi"], digits: int = 2, note: str | None = None) -> str:
    """Convert a distance.

    More text the model does not need."""
    return f"{value:.{digits}f} {unit}"


async def wait_forever(reason: str) -> str:
    """Never returns."""
    await asyncio.Event().wait()
    return reason


def test_a_schema_from_type_hints_and_the_docstring():
    tool = tool_from_function(convert)
    assert tool.schema() == {
        "type": "function",
        "function": {
            "name": "convert",
            "description": "Convert a distance.",
            "parameters": {
                "type": "object",
                "properties": {
                    "value": {"type": "number"},
                    "unit": {"type": "string", "enum": ["km", "mi"]},
                    "digits": {"type": "integer", "default": 2},
                    "note": {"type": ["string", "null"]},
                },
                "required": ["value", "unit"],
                "additionalProperties": False,
            },
        },
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"unit": "km"}, "convert needs the argument 'value'"),
        ({"value": "3", "unit": "km"}, "argument 'value' of convert must be number, got '3'"),
        ({"value": True, "unit": "km"}, "argument 'value' of convert must be number"),
        ({"value": 3, "unit": "yd"}, "argument 'unit' of convert must be one of ['km', 'mi']"),
        ({"value": 3, "unit": "km", "colour": 1}, "convert has no argument 'colour'"),
        (["value", 3], "the arguments of convert must be a JSON object"),
    ],
)
def test_arguments_that_do_not_fit_are_the_models_mistake(arguments, message):
    with pytest.raises(BadToolCall, match=message.replace("[", r"\[").replace("]", r"\]")):
        tool_from_function(convert).check(arguments)


def test_sync_and_async_tools_run_and_a_deadline_ends_a_call():
    sync, stuck = tool_from_function(convert), tool_from_function(wait_forever)
    assert asyncio.run(sync.call({"value": 3, "unit": "km", "note": None}, deadline=10)) == "3.00 km"
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(stuck.call({"reason": "x"}, deadline=0.05))
    registry = ToolRegistry([sync, stuck])
    with pytest.raises(BadToolCall, match="there is no tool 'nope'; the tools are: convert, wait_forever"):
        registry.get("nope")
    with pytest.raises(ToolSpecError, match="two tools are named 'convert'"):
        ToolRegistry([sync, sync])


def no_hint(x) -> str:
    """Has no type hint."""
    return x


def no_doc(x: int) -> str:
    return str(x)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tests.tool_examples", "expected 'module:callable'"),
        ("tests.no_such_module:f", "cannot import module 'tests.no_such_module'"),
        ("tests.tool_examples:nope", "module 'tests.tool_examples' has no attribute 'nope'"),
        ("tests.test_tool_registry:no_hint", "parameter 'x' has no type hint"),
        ("tests.test_tool_registry:no_doc", "no docstring"),
    ],
)
def test_a_bad_extra_tool_is_refused_when_the_config_loads(spec, message):
    with pytest.raises(ConfigError, match=message):
        override_agent_config(AgentConfig(agent_type="tool-calls"), [f'agent.tools.extra=["{spec}"]'])
    assert resolve_extra("tests.tool_examples:calculator").name == "calculator"


def test_tool_options_need_the_tool_calls_agent_and_an_mcp_server_one_transport():
    with pytest.raises(
        ConfigError, match="tools.extra offers tools .* needs agent_type 'tool-calls', not 'asearcher'"
    ):
        override_agent_config(
            AgentConfig(agent_type="asearcher"), ['agent.tools.extra=["tests.tool_examples:calculator"]']
        )
    for server in ("{}", '{command: [x], url: "http://h/mcp"}', "{command: []}"):
        with pytest.raises(ConfigError, match="an MCP server needs exactly one of `command`"):
            override_agent_config(AgentConfig(agent_type="tool-calls"), [f"agent.tools.mcp=[{server}]"])


def test_hermes_calls_one_or_several_and_malformed_ones_named():
    turn = parse_hermes(
        'Let me look.\n<tool_call>\n{"name": "search", "arguments": {"query": "a"}}\n</tool_call>\n'
        '<tool_call>{"name": "access", "arguments": "{\\"url\\": \\"u\\"}"}</tool_call>'
    )
    assert turn.content == "Let me look."
    assert turn.calls == [ToolCall("search", {"query": "a"}), ToolCall("access", {"url": "u"})] and not turn.errors
    assert (
        parse_hermes('<tool_call>{"name": "s", "arguments": {</tool_call>')
        .errors[0]
        .startswith("the tool call is not valid JSON")
    )
    assert parse_hermes('<tool_call>{"arguments": {}}</tool_call>').errors == ["the tool call has no 'name'"]
    assert parse_hermes('<tool_call>{"name": "s"').errors == [
        "<tool_call> was opened but never closed with </tool_call>"
    ]
    thought = parse_hermes(
        '<think>maybe <tool_call>{"name": "s", "arguments": {}}</tool_call></think> <answer> x </answer>'
    )
    assert not thought.calls and not thought.errors and "<answer> x </answer>" in thought.content


def test_llama3_json_calls():
    turn = parse_llama3_json(
        '<|python_tag|>{"name": "search", "parameters": {"query": "a"}}; {"name": "b", "parameters": {}}'
    )
    assert turn.calls == [ToolCall("search", {"query": "a"}), ToolCall("b", {})] and not turn.errors
    assert parse_llama3_json("The answer is <answer> x </answer>").calls == []
    assert (
        parse_llama3_json('{"name": "search", "parameters": {').errors[0].startswith("the tool call is not valid JSON")
    )
