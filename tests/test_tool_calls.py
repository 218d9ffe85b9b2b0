"""agent_type tool-calls, token in and token out: real KB server, the tiny model's real tokenizer with a Hermes-style
(Qwen2.5) and a Qwen3-style chat template, the scripted reference policy speaking the template's call format.

For every model call the test rebuilds the conversation so far from what the agent reported, and checks the call's
prompt against `apply_chat_template(messages, tools=..., add_generation_prompt=True)` and the trained ids against
the ids the engine sampled."""

import asyncio
import copy
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asearcher_plugin.agent.executor import AgentExecutor
from asearcher_plugin.agent.reference_policy import ReferencePolicy
from asearcher_plugin.engines.tiny_model import CHAT_TEMPLATE
from asearcher_plugin.engines.types import SamplingParams
from asearcher_plugin.settings.config import AgentConfig
from local_retriever.server_process import free_port
from tests.helpers import ScriptedEngine

QUESTION = "In which city is the capital of Angola?"
GOLD = ["Luanda"]

# Qwen3's rewrite of history: an earlier assistant turn is shown without its <think> block.
QWEN3_STYLE = CHAT_TEMPLATE.replace(
    "{{- '<|im_start|>assistant' }}{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}",
    "{%- set content = message['content'] %}"
    "{%- if not loop.last and '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}{{- '<|im_start|>assistant' }}{%- if content %}{{- '\\n' + content }}{%- endif %}",
)
assert QWEN3_STYLE != CHAT_TEMPLATE


def config(url, **agent) -> AgentConfig:
    return AgentConfig.model_validate(
        {
            "agent_type": "tool-calls",
            "max_turns": 6,
            "max_new_tokens_per_turn": 256,
            "tools": {"topk": 2, "max_doc_chars": 300, "local": {"urls": [url]}},
            **agent,
        }
    )


@pytest.fixture(params=["hermes", "qwen3"])
def chat_tokenizer(request, tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = CHAT_TEMPLATE if request.param == "hermes" else QWEN3_STYLE
    return tok


class Recorder:
    """The engine between the agent and a policy: each call's prompt ids and sampled ids; `split` re-encodes the
    first word of every reply one byte-level character per token (same text, ids no tokenizer would give)."""

    def __init__(self, inner, tokenizer, split=False):
        self.inner, self.tokenizer, self.split, self.calls = inner, tokenizer, split, []

    async def generate(self, prompt_ids, params):
        out = await self.inner.generate(prompt_ids, params)
        first = out.outputs[0]
        if self.split:
            k = next(i for i, t in enumerate(first.token_ids) if len(self.tokenizer.convert_ids_to_tokens(t)) > 1)
            chars = list(self.tokenizer.convert_ids_to_tokens(first.token_ids[k]))
            first.token_ids = [
                *first.token_ids[:k],
                *self.tokenizer.convert_tokens_to_ids(chars),
                *first.token_ids[k + 1 :],
            ]
            first.logprobs = None
        self.calls.append((list(prompt_ids), list(first.token_ids)))
        return out


def run(cfg, tok, engine, for_training=True, max_length=8192):
    executor = AgentExecutor(cfg, for_training=for_training)
    events = []

    async def hook(event):
        events.append(event)

    async def go():
        try:
            return await executor.run(
                QUESTION, json.dumps(GOLD), SamplingParams(max_tokens=None), max_length, tok, engine, on_turn=hook
            )
        finally:
            await executor.aclose()

    return asyncio.run(go()), events


def conversations(tok, cfg, events):
    """The messages before each call, rebuilt from the turn events (the agent's own message list is not reused)."""
    from asearcher_plugin.agent.prompts import build_prompt

    messages = [{"role": "user", "content": build_prompt("tool-calls", QUESTION)}]
    out = [list(messages)]
    for ev in events:
        content = ev.text.split("<tool_call>")[0].strip()
        if ev.calls:
            calls = [
                {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in ev.calls
            ]
            messages.append({"role": "assistant", "content": content, "tool_calls": calls})
            messages += [{"role": "tool", "name": c["name"], "content": c["result"]} for c in ev.calls]
        else:
            messages.append({"role": "assistant", "content": content})
        out.append(list(messages))
    return out


def schemas(executor_cfg):
    from asearcher_plugin.agent.builtin_tools import builtin_tools
    from asearcher_plugin.agent.instance import AgentInstance

    return [t.schema() for t in builtin_tools(AgentInstance(executor_cfg), executor_cfg.tools.builtin)]


def rendered(tok, messages, tools):
    return list(
        tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
    )


def policy(tok, cfg):
    return ReferencePolicy(tok, "tool-calls", {QUESTION: GOLD}, wrong_rate=0.0)


def test_the_reference_policy_searches_reads_and_answers_in_tool_calls(kb_server, chat_tokenizer):
    cfg = config(kb_server)
    traj, events = run(cfg, chat_tokenizer, policy(chat_tokenizer, cfg))
    assert [e.action for e in events] == ["tool_calls", "tool_calls", "answer"]
    assert [e.calls[0]["name"] for e in events[:2]] == ["search", "access"]
    assert events[0].calls[0]["arguments"] == {"query": QUESTION} and "Doc 1(Title:" in events[0].calls[0]["result"]
    assert traj.answer == "Luanda" and traj.reward == 1.0
    assert traj.stats["invalid_actions"] == 0 and traj.stats["tool_calls"] == 2
    assert traj.stats["searches"] == 1 and traj.stats["accesses"] == 1


@pytest.mark.parametrize("split", [False, True], ids=["canonical", "non-canonical"])
def test_one_sequence_is_the_sampled_ids_and_the_templates_tokens_between(kb_server, chat_tokenizer, split):
    """training_sequences trajectory: prompt k+1 == prompt k + sampled k + the template's between-call tokens, the
    trained spans are the sampled ids; where the template reproduces history (Hermes, canonical ids) every prompt is
    also exactly the template's rendering of the conversation."""
    cfg = config(kb_server)
    engine = Recorder(policy(chat_tokenizer, cfg), chat_tokenizer, split=split)
    traj, events = run(cfg, chat_tokenizer, engine)
    tools = schemas(cfg)
    convs = conversations(chat_tokenizer, cfg, events)
    assert len(engine.calls) == 3
    assert engine.calls[0][0] == rendered(chat_tokenizer, convs[0], tools)
    for k, (prompt, sampled) in enumerate(engine.calls):
        a, b = traj.action_ranges[k]
        assert traj.observation_tokens[a:b] == sampled and traj.observation_tokens[:a] == prompt
    qwen3 = chat_tokenizer.chat_template == QWEN3_STYLE
    for k in range(1, 3):
        prompt, prev = engine.calls[k][0], engine.calls[k - 1]
        assert prompt[: len(prev[0]) + len(prev[1])] == prev[0] + prev[1]
        between = prompt[len(prev[0]) + len(prev[1]) :]
        # the template's own tokens after the sampled end of turn: the tool messages and the next header
        text = chat_tokenizer.decode(between, skip_special_tokens=False)
        assert text.startswith("\n<|im_start|>user\n<tool_response>\n") and text.endswith("<|im_start|>assistant\n")
        assert (prompt == rendered(chat_tokenizer, convs[k], tools)) == (not qwen3 and not split)
    assert traj.stats["history_rewrites"] == (2 if qwen3 or split else 0)


@pytest.mark.parametrize("split", [False, True], ids=["canonical", "non-canonical"])
def test_per_call_prompts_are_the_templates_rendering_and_a_rewrite_starts_a_sequence(
    kb_server, chat_tokenizer, split
):
    cfg = config(kb_server)
    engine = Recorder(policy(chat_tokenizer, cfg), chat_tokenizer, split=split)
    traj, events = run(cfg, chat_tokenizer, engine, for_training=False)  # evaluation records its calls
    tools = schemas(cfg)
    convs = conversations(chat_tokenizer, cfg, events)
    for k, (prompt, _) in enumerate(engine.calls):
        assert prompt == rendered(chat_tokenizer, convs[k], tools)
    # every call is in exactly one sequence: its prompt, then its sampled ids as a trained span
    spans = [
        (s["observation_tokens"][:a], s["observation_tokens"][a:b]) for s in traj.calls for a, b in s["action_ranges"]
    ]
    assert spans == [(p, list(s)) for p, s in engine.calls]
    rewrite = chat_tokenizer.chat_template == QWEN3_STYLE or split
    assert len(traj.calls) == (3 if rewrite else 1)


def test_malformed_calls_are_the_models_and_an_unreachable_kb_is_the_infrastructures(tokenizer):
    unused_port = free_port()
    cfg = config(
        f"http://127.0.0.1:{unused_port}",
        tools={
            "local": {"urls": [f"http://127.0.0.1:{unused_port}"], "retries": 0, "timeout": 2},
            "extra": ["tests.tool_examples:calculator"],
        },
    )
    turns = [
        ('<tool_call>\n{"name": "search", "arguments": {"query": \n</tool_call>', "eos"),  # bad JSON
        ('<tool_call>\n{"name": "browse", "arguments": {"url": "x"}}\n</tool_call>', "eos"),  # no such tool
        ('<tool_call>\n{"name": "calculator", "arguments": {"expression": 12}}\n</tool_call>', "eos"),  # wrong type
        (
            '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "search", "arguments": {"query": "Angola"}}\n</tool_call>',
            "eos",
        ),  # two calls
        ("<answer> Luanda </answer>", "eos"),
    ]
    engine = ScriptedEngine(tokenizer, turns)
    traj, events = run(cfg, tokenizer, engine)
    assert traj.stats["invalid_actions"] == 3 and traj.stats["turns"] == 5 and traj.answer == "Luanda"
    assert traj.stats["tool_errors"] == 1 and traj.stats["tool_errors_infra"] == 1  # the search: KB unreachable
    assert events[3].calls[0]["result"] == "42" and "search failed" in events[3].calls[1]["result"]
    shown = [tokenizer.decode(engine.calls[k]) for k in range(1, 5)]
    assert "Your tool call could not be read: the tool call is not valid JSON" in shown[0]
    assert "Error: there is no tool 'browse'; the tools are: search, access, calculator" in shown[1]
    assert "Error: argument 'expression' of calculator must be string, got 12" in shown[2]
    assert "<tool_response>\n42\n</tool_response>" in shown[3]


def test_a_tool_past_its_deadline_names_the_timeout_to_the_model(tokenizer):
    url = f"http://127.0.0.1:{free_port()}"
    cfg = config(url, tools={"builtin": [], "extra": ["tests.tool_examples:never_in_time"]})
    turns = [
        ('<tool_call>\n{"name": "never_in_time", "arguments": {}}\n</tool_call>', "eos"),
        ("<answer> x </answer>", "eos"),
    ]
    engine = ScriptedEngine(tokenizer, turns)
    traj, _ = run(cfg, tokenizer, engine)
    assert traj.stats["tool_errors"] == traj.stats["tool_errors_infra"] == 1
    # a TimeoutError has no message: the model is told its type (it used to read "never_in_time failed: ")
    assert "<tool_response>\nnever_in_time failed: TimeoutError\n</tool_response>" in tokenizer.decode(engine.calls[1])


@pytest.fixture(params=["stdio", "http"])
def mcp_server(request):
    """The test's MCP server: a command to start over stdio, or a streamable-HTTP one started here on loopback."""
    pytest.importorskip("mcp")
    argv = [sys.executable, str(Path(__file__).parent.parent / "examples" / "mcp_units_server.py")]
    if request.param == "stdio":
        yield {"command": argv, "prefix": "units_"}
        return
    port = free_port()
    proc = subprocess.Popen([*argv, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):  # until it listens (the server process starts in a few seconds)
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, "the MCP server exited"
            time.sleep(0.1)
        yield {"url": f"http://127.0.0.1:{port}/mcp", "prefix": "units_"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_extra_tool_and_an_mcp_servers_tools_are_offered_and_called(tokenizer, mcp_server):
    cfg = AgentConfig.model_validate(
        {
            "agent_type": "tool-calls",
            "tools": {"builtin": [], "extra": ["tests.tool_examples:calculator"], "mcp": [mcp_server]},
        }
    )
    turns = [
        (
            '<tool_call>\n{"name": "units_miles_to_km", "arguments": {"miles": 26.2}}\n</tool_call>\n'
            '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 * 21"}}\n</tool_call>',
            "eos",
        ),
        ('<tool_call>\n{"name": "units_broken", "arguments": {"reason": "test"}}\n</tool_call>', "eos"),
        ("<answer> 42.165 km </answer>", "eos"),
    ]
    engine = ScriptedEngine(tokenizer, turns)
    traj, events = run(cfg, tokenizer, engine)
    first = tokenizer.decode(engine.calls[0])
    # the schemas as the chat template shows them: the extra tool's from its type hints, the MCP server's own
    assert '"name": "calculator", "description": "Evaluate an arithmetic expression' in first
    assert '"name": "units_miles_to_km", "description": "Convert a distance in miles to kilometres."' in first
    assert [c["result"] for c in events[0].calls] == ["42.165 km", "42"]
    assert "broken on purpose: test" in events[1].calls[0]["result"]
    assert "<tool_response>\n42.165 km\n</tool_response>\n<tool_response>\n42\n</tool_response>" in tokenizer.decode(
        engine.calls[1]
    )
    # a tool's own failure: a tool error, neither the model's invalid action nor the infrastructure's
    assert traj.stats["tool_errors"] == 1 and traj.stats["tool_errors_infra"] == 0
    assert traj.stats["invalid_actions"] == 0 and traj.stats["tool_calls"] == 3 and traj.answer == "42.165 km"
