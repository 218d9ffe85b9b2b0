"""The action grammar: one `<search>`, `<access>` or `<answer>` per turn, reasoning in `<think>`.

Parsing never raises: whatever the model wrote becomes an `Action`, and anything that is not
exactly one well-formed action becomes an `invalid` action whose `error` is fed back to the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

TOOL_TAGS = ("search", "access", "answer")
STOP_STRINGS = ["</search>", "</access>", "</answer>"]
_OPEN = re.compile(r"<(search|access|answer)>", re.I)
_BLOCK = re.compile(r"<(search|access|answer)>(.*?)</\1>", re.I | re.S)
_UNKNOWN = re.compile(r"<(query|browse|tool_call|tool|function|result|information)>", re.I)

Kind = Literal["search", "access", "answer", "invalid"]


@dataclass(frozen=True)
class Action:
    kind: Kind
    argument: str = ""
    error: str = ""


def parse_action(text: str, allowed: tuple[str, ...] = TOOL_TAGS, max_argument_chars: int = 2000) -> Action:
    """The single action in one turn of model output (the text up to and including a stop string)."""
    text = _visible(text)
    blocks = _BLOCK.findall(text)
    opened = _OPEN.findall(text)
    if not blocks:
        if opened:
            tag = opened[-1].lower()
            return Action("invalid", error=f"<{tag}> was opened but never closed with </{tag}>.")
        unknown = _UNKNOWN.search(text)
        if unknown:
            return Action("invalid", error=f"<{unknown.group(1)}> is not an action; use " + _usage(allowed))
        return Action("invalid", error="no action found; use " + _usage(allowed))
    if len(blocks) > 1 or len(opened) > 1:
        return Action("invalid", error="only one action is allowed per turn; you wrote "
                      + ", ".join(f"<{t.lower()}>" for t in opened))
    tag, argument = blocks[0][0].lower(), " ".join(blocks[0][1].split())
    if tag not in allowed:
        return Action("invalid", error=f"<{tag}> is not available here; use " + _usage(allowed))
    if _OPEN.search(argument):
        return Action("invalid", error=f"tags cannot be nested inside <{tag}>.")
    if not argument and tag != "answer":
        return Action("invalid", error=f"<{tag}></{tag}> is empty.")
    return Action(tag, argument[:max_argument_chars])  # type: ignore[arg-type]


def _visible(text: str) -> str:
    # Actions mentioned while thinking ("maybe I should <search>...") are not actions.
    return re.sub(r"<think>.*?</think>", " ", text, flags=re.S | re.I)


def _usage(allowed: tuple[str, ...]) -> str:
    forms = {"search": "<search> query </search>", "access": "<access> url </access>", "answer": "<answer> answer </answer>"}
    return ", ".join(forms[t] for t in allowed) + "."
