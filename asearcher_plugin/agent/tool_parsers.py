"""Tool calls as the model writes them, one parser per chat-template format (`agent.tool_call_format`).

A parser reads one assistant turn and returns its text outside the calls (the message's `content`), the calls, and
one error per call it could not read. It never raises: a malformed call becomes an error message the model is shown.
Calls written inside a `<think>` block are thoughts, not calls: only the text after the last `</think>` is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict

    def message_form(self) -> dict:
        """As an assistant message's `tool_calls` entry (the shape chat templates render)."""
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ParsedTurn:
    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _split_think(text: str) -> tuple[str, str]:
    cut = text.rfind("</think>")
    return (text[: cut + len("</think>")], text[cut + len("</think>") :]) if cut >= 0 else ("", text)


def _call(obj, arguments_key: str) -> ToolCall | str:
    """A decoded JSON object as a call, or what is wrong with it."""
    if not isinstance(obj, dict):
        return f"a tool call must be a JSON object with {{'name', '{arguments_key}'}}"
    name, args = obj.get("name"), obj.get(arguments_key, obj.get("arguments", {}))
    if not isinstance(name, str) or not name:
        return "the tool call has no 'name'"
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError:
            return f"the arguments of {name} are not valid JSON"
    if not isinstance(args, dict):
        return f"the arguments of {name} must be a JSON object"
    return ToolCall(name, args)


def parse_hermes(text: str) -> ParsedTurn:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number of them (Qwen2.5/Qwen3, Hermes)."""
    thought, rest = _split_think(text)
    calls, errors, outside, pos = [], [], [thought], 0
    while True:
        start = rest.find("<tool_call>", pos)
        if start < 0:
            outside.append(rest[pos:])
            break
        outside.append(rest[pos:start])
        end = rest.find("</tool_call>", start)
        if end < 0:
            errors.append("<tool_call> was opened but never closed with </tool_call>")
            break
        body = rest[start + len("<tool_call>") : end].strip()
        pos = end + len("</tool_call>")
        try:
            found = _call(json.loads(body), "arguments")
        except ValueError as exc:
            found = f"the tool call is not valid JSON ({exc.msg} at character {exc.pos})"
        (calls if isinstance(found, ToolCall) else errors).append(found)
    return ParsedTurn("".join(outside).strip(), calls, errors)


def parse_llama3_json(text: str) -> ParsedTurn:
    """Llama 3.x's JSON calls: the turn is `{"name": ..., "parameters": {...}}` (several joined by `;`), optionally
    after `<|python_tag|>`. A turn that does not start with `{` is plain text."""
    thought, rest = _split_think(text)
    body = rest.strip().removeprefix("<|python_tag|>").strip()
    if not body.startswith("{"):
        return ParsedTurn(text.strip())
    decoder, calls, errors, pos = json.JSONDecoder(), [], [], 0
    while pos < len(body):
        try:
            obj, pos = decoder.raw_decode(body, pos)
        except ValueError as exc:
            errors.append(f"the tool call is not valid JSON ({exc.msg} at character {exc.pos})")
            break
        found = _call(obj, "parameters")
        (calls if isinstance(found, ToolCall) else errors).append(found)
        while pos < len(body) and (body[pos].isspace() or body[pos] == ";"):
            pos += 1
    return ParsedTurn(thought.strip(), calls, errors)


PARSERS: dict[str, Callable[[str], ParsedTurn]] = {"hermes": parse_hermes, "llama3-json": parse_llama3_json}
