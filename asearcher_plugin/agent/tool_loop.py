"""agent_type tool-calls: one trajectory of a function-calling model, token in and token out.

The conversation is a list of chat messages (the question as a user message, each assistant turn with its parsed
`tool_calls`, one `tool` message per result), and the tool schemas reach the model through the chat template's
`tools=`. What is trained is what was sampled: one growing sequence (`training_sequences: trajectory`) is the first
prompt, each call's sampled ids and, between calls, the template's rendering of what follows an assistant turn
(chat_render.py). With per-call sequences (and in evaluation) every call's prompt is the template's rendering of the
conversation so far, exactly what a deployed model sees; where the template rewrites history (Qwen3 drops earlier
`<think>` blocks, JSON is written back in its own spacing) that prompt does not extend the previous sequence and
starts a new one. `history_rewrites` counts the calls whose rendered prompt differed from the concatenation.
"""

from __future__ import annotations

import asyncio
import json
import time

from ..engines.types import with_overrides
from ..records import Trajectory
from ..tools.registry import BadToolCall, ToolRegistry, resolve_extra
from .actions import parse_action, scrub
from .builtin_tools import builtin_tools
from .chat_render import ChatRender
from .instance import AgentInstance
from .sequences import CallRecords, call_logprobs
from .tool_parsers import PARSERS, ParsedTurn
from .turns import TurnEvent

UNREADABLE = (
    "Your tool call could not be read: {errors}. Write each call as "
    '<tool_call>{{"name": <tool name>, "arguments": {{...}}}}</tool_call>.'
)
NOTHING = "You called no tool and gave no answer: call a tool, or give the final answer inside <answer> and </answer>."


async def run_tool_calls(executor, prompt, label, sampling_params, max_length, tokenizer, engine, on_turn=None):
    config = executor.config
    agent = AgentInstance(config, executor._toolbox(), executor._judge())
    tools = [*builtin_tools(agent, config.tools.builtin), *(resolve_extra(s) for s in config.tools.extra)]
    tools += await executor._mcp_tools()
    registry = ToolRegistry(tools)
    render = ChatRender(tokenizer, registry.schemas())
    render.check()
    parse = PARSERS[config.tool_call_format]
    ends = {s for s in getattr(tokenizer, "all_special_tokens", None) or [] if s}
    question = (await agent.reset({"observation": prompt, "label": label}))["observation"]
    messages: list[dict] = [{"role": "user", "content": question}]
    want_lp = getattr(sampling_params, "logprobs", None) is not None
    ids = render.prompt_ids(messages)
    ids = ids[-max(1, max_length - min(config.max_new_tokens_per_turn, max_length // 2)) :]
    # the one growing sequence (trajectory mode); per-call records keep what each call saw and made
    seq, ranges, lps = list(ids), [], [0.0] * len(ids) if want_lp else None
    records = CallRecords(want_lp) if executor.record_calls else None
    texts, starts, last_at, truncated, done, rewrites, calls = [render.text(messages)], [], None, False, False, 0, 0
    while not done:
        budget = max_length - len(ids)
        if budget <= 0:
            truncated = True
            break
        params = with_overrides(sampling_params, max_tokens=min(config.max_new_tokens_per_turn, budget), stop=[])
        starts.append(time.time())
        out = (await engine.generate(ids, params)).outputs[0]
        last_at = time.time()
        if records is not None:
            records.add(ids, out, starts[-1], last_at)
        ranges.append((len(seq), len(seq) + len(out.token_ids)))
        seq += out.token_ids
        if lps is not None:
            lps += call_logprobs(out)
        texts.append(out.text)
        agent.generated_tokens += len(out.token_ids)
        agent.generated_chars += len(out.text)
        if out.finish_reason == "length" and len(ids) + len(out.token_ids) >= max_length:
            truncated = True
            break
        text = out.text
        while any(text.endswith(s) for s in ends):  # an engine that keeps special tokens in the text
            text = text[: -len(next(s for s in ends if text.endswith(s)))]
        parsed = parse(scrub(text))
        before = list(messages)
        stepped = time.time()
        assistant, after, shown = await step(agent, registry, parsed, label)
        calls += len(parsed.calls)
        messages += [assistant, *after]
        done = agent.answer is not None or agent.turns >= config.max_turns
        if on_turn is not None:
            await on_turn(event(agent, out, parsed, shown, done, stepped - starts[-1], time.time() - stepped))
        if done:
            break
        between = render.between_ids(before, after, list(out.token_ids))
        concat = [*ids, *out.token_ids, *between]
        rendered = render.prompt_ids(messages)
        rewrites += rendered != concat
        between = between[: max(0, max_length - len(seq))]
        seq += between
        if lps is not None:
            lps += [0.0] * len(between)
        texts.append(tokenizer.decode(between, skip_special_tokens=False))
        # per-call sequences and evaluation: the template's own rendering; one sequence: the concatenation
        ids = rendered if executor.record_calls else list(seq)
    reward = await agent.final_reward(label)
    stats = {**agent.counters(), "tool_calls": float(calls), "history_rewrites": float(rewrites)}
    return Trajectory(
        prompt=prompt,
        label=label,
        reward=reward,
        scores=agent.metric_scores(),
        stats=stats,
        truncated=truncated,
        answer=agent.answer,
        text="".join(texts),
        observation_tokens=seq,
        action_ranges=ranges,
        rollout_log_probs=lps,
        token_times=[starts[0] if starts else None, last_at],
        turn_times=starts,
        **executor.recorded(records),
    )


async def step(agent: AgentInstance, registry: ToolRegistry, parsed: ParsedTurn, label):
    """One assistant turn: its message, the messages that answer it, and each call with its result (for a hook)."""
    agent.turns += 1
    assistant = {"role": "assistant", "content": parsed.content}
    after: list[dict] = []
    shown: list[dict] = []
    invalid = bool(parsed.errors)
    if parsed.calls:
        assistant["tool_calls"] = [c.message_form() for c in parsed.calls]
        results = await asyncio.gather(*(call_tool(agent, registry, c) for c in parsed.calls))
        for c, (result, bad) in zip(parsed.calls, results, strict=True):
            invalid |= bad
            after.append({"role": "tool", "name": c.name, "content": result})
            shown.append({"name": c.name, "arguments": c.arguments, "result": result})
    if parsed.errors:
        after.append({"role": "user", "content": UNREADABLE.format(errors="; ".join(parsed.errors))})
    elif not parsed.calls:
        action = parse_action(parsed.content, ("answer",))
        if action.kind == "answer":
            agent.answer = action.argument
        else:
            invalid = True
            after.append({"role": "user", "content": NOTHING})
    agent.invalid += invalid
    agent.last_action = None
    return assistant, after, shown


async def call_tool(agent: AgentInstance, registry: ToolRegistry, call) -> tuple[str, bool]:
    """The text of one call's result, and whether the call was the model's mistake (unknown tool, bad arguments)."""
    try:
        tool = registry.get(call.name)
        args = tool.check(call.arguments)
    except BadToolCall as exc:
        return f"Error: {exc}", True
    argument = json.dumps(args, ensure_ascii=False)
    deadline = agent.config.tools.call_deadline
    return await agent._tool(tool.name, argument, lambda: tool.call(args, deadline), lambda msg: msg), False


def event(agent, out, parsed: ParsedTurn, shown: list[dict], done: bool, gen_s: float, step_s: float) -> TurnEvent:
    if agent.answer is not None and done and not parsed.calls:
        action, argument = "answer", agent.answer
    elif parsed.calls:
        action, argument = "tool_calls", json.dumps([{"name": c.name, "arguments": c.arguments} for c in parsed.calls])
    else:
        action, argument = "invalid", ""
    feedback = "\n".join(f"{c['name']}: {c['result']}" for c in shown)
    return TurnEvent(
        turn=agent.turns,
        text=out.text,
        action=action,
        argument=argument,
        error="; ".join(parsed.errors),
        feedback=feedback,
        done=done,
        finish_reason=out.finish_reason,
        generate_seconds=gen_s,
        step_seconds=step_s,
        calls=shown,
    )
