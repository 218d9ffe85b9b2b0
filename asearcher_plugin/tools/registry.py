"""Tools the model calls by name (agent_type tool-calls): each a JSON schema, a description and a function.

A tool comes from a Python function: its type hints give the parameters' JSON schema (or the function carries one
as `json_schema`), its docstring's first paragraph is the description the model reads, and it may be sync (run in a
thread) or async. Every call has a deadline. The built-in KB search and page access, the user's `tools.extra` and
an MCP server's tools are all `Tool`s of one registry; the chat template renders their `schema()`s.

Two kinds of failure stay apart: `BadToolCall` is the model's (an unknown tool, wrong or missing arguments) and
counts as an invalid action; whatever the function raises is the tool's (see AgentInstance's error ladder).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..utils.dotted import resolve_reference

MAX_RESULT_CHARS = 20_000  # a tool's text as the model sees it; a tool of the user's may return anything


class ToolSpecError(ValueError):
    """A tool that cannot be offered (bad reference, a parameter without a type, two tools of one name)."""


class BadToolCall(ValueError):
    """The model called a tool wrongly: the message goes back to the model, and the turn is an invalid action."""


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict  # a JSON schema of type object
    fn: Callable
    deadline: float | None = None  # seconds; None: the config's tools.call_deadline

    def schema(self) -> dict:
        """The OpenAI-style function schema that `apply_chat_template(tools=...)` takes."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def check(self, arguments) -> dict:
        """The arguments if they fit the schema's top level (names, required, JSON types), else BadToolCall."""
        if not isinstance(arguments, dict):
            raise BadToolCall(f"the arguments of {self.name} must be a JSON object, not {type(arguments).__name__}")
        props = self.parameters.get("properties") or {}
        if self.parameters.get("additionalProperties") is False:
            unknown = [k for k in arguments if k not in props]
            if unknown:
                raise BadToolCall(f"{self.name} has no argument {unknown[0]!r}; its arguments: {', '.join(props)}")
        missing = [k for k in self.parameters.get("required") or [] if k not in arguments]
        if missing:
            raise BadToolCall(f"{self.name} needs the argument {missing[0]!r}")
        for key, value in arguments.items():
            spec = props.get(key) or {}
            kinds = spec.get("type")
            kinds = [kinds] if isinstance(kinds, str) else kinds or []
            known = [k for k in kinds if k in _CHECKS]
            if known and not any(_CHECKS[k](value) for k in known):
                raise BadToolCall(f"argument {key!r} of {self.name} must be {' or '.join(known)}, got {value!r:.80}")
            if "enum" in spec and value not in spec["enum"]:
                raise BadToolCall(f"argument {key!r} of {self.name} must be one of {spec['enum']}, got {value!r:.80}")
        return arguments

    async def call(self, arguments, deadline: float) -> str:
        """The tool's result as text. BadToolCall for wrong arguments; the function's own errors pass through."""
        args = self.check(arguments)
        if inspect.iscoroutinefunction(self.fn):
            work = self.fn(**args)
        else:  # a thread: a blocking function must not stall the rollout's event loop (it runs on after a timeout)
            work = asyncio.to_thread(self.fn, **args)
        result = await asyncio.wait_for(work, self.deadline or deadline)
        return as_text(result)


def as_text(result) -> str:
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[cut at {MAX_RESULT_CHARS} characters]"
    return text


def tool_from_function(fn: Callable, name: str | None = None, source: str = "") -> Tool:
    """A `Tool` from a function: schema from `fn.json_schema` or its type hints, description from its docstring."""
    source = source or getattr(fn, "__qualname__", repr(fn))
    name = name or getattr(fn, "tool_name", None) or getattr(fn, "__name__", "")
    if not name or not name.replace("_", "a").replace("-", "a").isalnum():
        raise ToolSpecError(f"tool {source}: {name!r} is not a usable tool name (letters, digits, _ and -)")
    description = _description(fn)
    if not description:
        raise ToolSpecError(f"tool {source}: no docstring; its first paragraph is what the model reads about it")
    explicit = getattr(fn, "json_schema", None)
    if explicit is not None:
        if not isinstance(explicit, dict) or explicit.get("type") != "object":
            raise ToolSpecError(f"tool {source}: json_schema must be a JSON schema of type 'object'")
        parameters = explicit
    else:
        parameters = _schema_from_hints(fn, source)
    deadline = getattr(fn, "deadline", None)
    return Tool(name, description, parameters, fn, float(deadline) if deadline else None)


def _description(fn: Callable) -> str:
    doc = inspect.getdoc(fn) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _schema_from_hints(fn: Callable, source: str) -> dict:
    try:
        hints = typing.get_type_hints(fn)
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError, NameError) as exc:
        raise ToolSpecError(f"tool {source}: cannot read its signature: {exc}") from None
    properties, required = {}, []
    for pname, p in params.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise ToolSpecError(f"tool {source}: parameter {pname!r} must be a plain or keyword parameter")
        if pname not in hints:
            raise ToolSpecError(f"tool {source}: parameter {pname!r} has no type hint (the model's schema needs one)")
        properties[pname] = _json_type(hints[pname], f"tool {source}: parameter {pname!r}")
        if p.default is p.empty:
            required.append(pname)
        elif isinstance(p.default, (str, int, float, bool)):
            properties[pname]["default"] = p.default
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _json_type(hint, where: str) -> dict:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if origin is typing.Literal:
        kinds = {_JSON_TYPES.get(type(a)) for a in args}
        if None in kinds or len(kinds) != 1:
            raise ToolSpecError(f"{where}: a Literal of one JSON type is needed, got {hint}")
        return {"type": kinds.pop(), "enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            inner = _json_type(rest[0], where)
            return {**inner, "type": [inner["type"], "null"]}
    if origin in (list, tuple) and args:
        return {"type": "array", "items": _json_type(args[0], where)}
    if origin is dict:
        return {"type": "object"}
    raise ToolSpecError(f"{where}: type {hint} has no JSON schema here (use str, int, float, bool, list, Literal)")


@functools.cache
def resolve_extra(spec: str) -> Tool:
    """`module:callable` (from `tools.extra`) as a Tool, checked once per process."""
    obj = resolve_reference(spec, "tools.extra", "my_tools:calculator", ToolSpecError)
    if isinstance(obj, Tool):
        return obj
    if not callable(obj):
        raise ToolSpecError(f"tools.extra {spec!r} is a {type(obj).__name__}, not a function")
    return tool_from_function(obj, source=f"tools.extra {spec!r}")


class ToolRegistry:
    """The tools of one trajectory, by name, in the order the model is shown them."""

    def __init__(self, tools: Iterable[Tool]):
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self.tools:
                raise ToolSpecError(f"two tools are named {tool.name!r} (an MCP server's `prefix` tells them apart)")
            self.tools[tool.name] = tool

    def schemas(self) -> list[dict]:
        return [t.schema() for t in self.tools.values()]

    def get(self, name) -> Tool:
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            raise BadToolCall(f"there is no tool {str(name)[:80]!r}; the tools are: {', '.join(self.tools)}")
        return tool
