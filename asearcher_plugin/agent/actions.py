"""The action grammar: one `<search>`, `<access>` or `<answer>` per turn, reasoning in `<think>`.

Parsing never raises: whatever the model wrote becomes an `Action`, and anything that is not
exactly one well-formed action becomes an `invalid` action whose `error` is fed back to the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..utils.text import scrub

TOOL_TAGS = ("search", "access", "answer")
STOP_STRINGS = ["</search>", "</access>", "</answer>"]
# One named group per tag, so a match names its tag canonically (re.I also matches e.g. "ſ" for "s").
_OPEN = re.compile(r"<(?:(?P<search>search)|(?P<access>access)|(?P<answer>answer))>", re.I)
_CLOSE = re.compile(r"</(?:(?P<search>search)|(?P<access>access)|(?P<answer>answer))>", re.I)
_THINK_OPEN = re.compile(r"<think>", re.I)
_THINK_CLOSE = re.compile(r"</think>", re.I)
MAX_LISTED = 5  # actions named in the "only one action" message; the rest are counted
_UNKNOWN = re.compile(r"<(query|browse|tool_call|tool|function|result|information)>", re.I)

Kind = Literal["search", "access", "answer", "invalid"]


@dataclass(frozen=True)
class Action:
    kind: Kind
    argument: str = ""
    error: str = ""


def parse_action(text: str, allowed: tuple[str, ...] = TOOL_TAGS, max_argument_chars: int = 2000) -> Action:
    """The single action in one turn of model output (the text up to and including a stop string).

    Linear in the length of the text: a turn of thousands of unclosed tags must not stall the
    rollout actor's event loop (a non-greedy regular expression rescans to the end from every
    unclosed tag, quadratic in their number).
    """
    text = _visible(scrub(text))
    blocks = _blocks(text, limit=2)
    opened = [m.lastgroup for m in _OPEN.finditer(text)]
    if not blocks:
        if opened:
            tag = opened[-1]
            return Action("invalid", error=f"<{tag}> was opened but never closed with </{tag}>.")
        unknown = _UNKNOWN.search(text)
        if unknown:
            return Action("invalid", error=f"<{unknown.group(1)}> is not an action; use " + _usage(allowed))
        return Action("invalid", error="no action found; use " + _usage(allowed))
    if len(blocks) > 1 or len(opened) > 1:
        named = ", ".join(f"<{t}>" for t in opened[:MAX_LISTED])
        more = f" and {len(opened) - MAX_LISTED} more" if len(opened) > MAX_LISTED else ""
        return Action("invalid", error=f"only one action is allowed per turn; you wrote {named}{more}")
    tag, argument = blocks[0][0], " ".join(blocks[0][1].split())
    if tag not in allowed:
        return Action("invalid", error=f"<{tag}> is not available here; use " + _usage(allowed))
    if _OPEN.search(argument):
        return Action("invalid", error=f"tags cannot be nested inside <{tag}>.")
    if not argument and tag != "answer":
        return Action("invalid", error=f"<{tag}></{tag}> is empty.")
    return Action(tag, argument[:max_argument_chars])  # type: ignore[arg-type]


def _blocks(text: str, limit: int) -> list[tuple[str, str]]:
    """What `re.findall(r"<(search|access|answer)>(.*?)</\\1>", text, re.I | re.S)` finds, up to `limit` blocks.

    An opening tag is matched with the first closing tag of the same name after it; one pointer
    per tag name only moves forward, so the scan is linear.
    """
    closes: dict[str, list[tuple[int, int]]] = {t: [] for t in TOOL_TAGS}
    for m in _CLOSE.finditer(text):
        closes[m.lastgroup].append(m.span())
    cursor = dict.fromkeys(TOOL_TAGS, 0)
    blocks, pos = [], 0
    for m in _OPEN.finditer(text):
        if m.start() < pos:
            continue  # inside the previous block
        tag = m.lastgroup
        spans = closes[tag]
        i = cursor[tag]
        while i < len(spans) and spans[i][0] < m.end():
            i += 1
        cursor[tag] = i
        if i < len(spans):
            blocks.append((tag, text[m.end() : spans[i][0]]))
            pos = spans[i][1]
            if len(blocks) >= limit:
                break
    return blocks


def _visible(text: str) -> str:
    """The text without `<think>...</think>` spans: actions mentioned while thinking are not actions.

    As `re.sub(r"<think>.*?</think>", " ", text, flags=re.S | re.I)`, but linear: once an opening
    tag has no closing tag after it, no later one can have one either.
    """
    out, pos = [], 0
    while True:
        start = _THINK_OPEN.search(text, pos)
        if start is None:
            break
        end = _THINK_CLOSE.search(text, start.end())
        if end is None:
            break
        out += [text[pos : start.start()], " "]
        pos = end.end()
    return "".join(out) + text[pos:] if out else text


def _usage(allowed: tuple[str, ...]) -> str:
    forms = {
        "search": "<search> query </search>",
        "access": "<access> url </access>",
        "answer": "<answer> answer </answer>",
    }
    return ", ".join(forms[t] for t in allowed) + "."
