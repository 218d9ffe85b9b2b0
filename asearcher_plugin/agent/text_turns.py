"""Where a transcript's text splits into the prompt, the model's turns and the agent's feedback between them.

A `trajectories.jsonl` line keeps the text, not where each model call began, so turns are recovered from it: the
prompt is the packaged template of some agent type around the line's question, and a model turn ends where the
agent's feedback begins (an `<information>` block right after a search, a page read or a summary, or the
invalid-action note). Two turns with nothing between them (ASearcher's format gives no feedback to a turn without
an action) show as one. Everything here is linear in the text: replayed and reported files come from anyone.
"""

from __future__ import annotations

import re
from functools import cache
from string import Formatter

from ..utils.template_check import TEMPLATE_FIELDS
from ..utils.text import scrub
from .prompts import template_for

_CHAT_OPEN = r"(?:<\|im_start\|>user\s*)?"
_CHAT_TURN = r"(?:\s*<\|im_end\|>\s*<\|im_start\|>assistant\n?)?"
# Feedback is a body between an opener and its closer, with the chat turn around it (Qwen-style chat templates):
#   [<|im_end|> <|im_start|>user] <body> [<|im_end|> <|im_start|>assistant\n] [<think>\n]
BODIES = {"<information>": "</information>", "My previous action is invalid: ": " Let me try again."}
_USER_TURN, _END_TURN = "<|im_start|>user", "<|im_end|>"
_ASSISTANT_TURN = re.compile(r"<\|im_end\|>\s*<\|im_start\|>assistant\n?")
_TOOL_ENDS = ("</search>", "</access>", "</think>")


def _flexible(text: str) -> str:
    return r"\s*".join(re.escape(w) for w in text.split())


@cache
def _template_parts(agent_type: str) -> tuple[tuple[str, str | None], ...]:
    return tuple((lit, name) for lit, name, _, _ in Formatter().parse(template_for(agent_type)))


@cache
def _template_patterns(agent_type: str) -> tuple[re.Pattern, re.Pattern]:
    """The packaged prompt of `agent_type` as two patterns made of the package's text only: up to its question, and
    from its question's end on. The question, which comes from a file anyone wrote, is never compiled."""
    before: list[str] = [_CHAT_OPEN]
    after: list[str] = [r"\??"]
    part = before
    for literal, name in _template_parts(agent_type):
        lead, trail = (r"\s*" if literal[:1].isspace() else ""), (r"\s*" if literal[-1:].isspace() else "")
        part.append(lead + _flexible(literal) + trail)
        if name == "question":
            part = after
        elif name is not None:
            part.append(r".*?")
    return re.compile("".join(before), re.S), re.compile("".join(after) + _CHAT_TURN, re.S)


def _match_words(text: str, pos: int, words: list[str]) -> int | None:
    """Where `words` end when they stand in `text` from `pos` on with any whitespace between them, else None."""
    for i, word in enumerate(words):
        if i:
            while pos < len(text) and text[pos].isspace():
                pos += 1
        if not text.startswith(word, pos):
            return None
        pos += len(word)
    return pos


def prompt_end(text: str, question: str) -> int:
    """Where the packaged prompt of some agent type, around `question`, ends in `text` (0: no prompt found).
    Linear in the text and the question."""
    q = scrub(question).strip()
    if not q:
        return 0
    window = text[: 4 * (len(q) + max(len(template_for(t)) for t in TEMPLATE_FIELDS)) + 1024]  # bounds the match
    words = q.split()
    for agent_type in TEMPLATE_FIELDS:
        head, tail = _template_patterns(agent_type)
        if (m := head.match(window)) is None or (pos := _match_words(window, m.end(), words)) is None:
            continue
        if (m := tail.match(window, pos)) is not None:
            return m.end()
    return 0


def turn_spans(text: str, question: str) -> tuple[int, list[tuple[int, int, int]]]:
    """Where the prompt ends, and each turn as (start, feedback start, end): text[start:feedback start] is what the
    model wrote, text[feedback start:end] what the agent answered (empty for a last turn without feedback)."""
    cut = prompt_end(text, question)
    turns, start = [], cut
    for begin, end in feedback_spans(text, cut):
        if "<information>" in text[begin:end] and not _ends_with_tool(text, start, begin):
            continue  # the model wrote it: it belongs to the turn's text
        turns.append((start, begin, end))
        start = end
    if text[start:].strip():
        turns.append((start, len(text), len(text)))
    return cut, turns


def feedback_spans(text: str, pos: int = 0):
    """(start, end) of each feedback block in `text`, left to right, in time linear in the text.

    A non-greedy regular expression would rescan to the end of the text from every opener that has no closer
    (quadratic: a 48 KB replayed line held the server for seconds). Here each opener kind keeps its own forward
    pointer, and a kind whose closer is missing after some point can have no match after it either.
    """
    live = dict(BODIES)
    ahead = dict.fromkeys(BODIES, -1)  # each opener's next occurrence: found again only once passed
    while live:
        for opener in list(live):
            if ahead[opener] < pos:
                ahead[opener] = text.find(opener, pos)
            if ahead[opener] < 0:
                del live[opener]
        if not live:
            return
        i, opener = min((ahead[o], o) for o in live)
        closed = text.find(live[opener], i + len(opener))
        if closed < 0:
            del live[opener]
            continue
        end = _after_feedback(text, closed + len(live[opener]))
        yield _before_feedback(text, i, pos), end
        pos = end


def _ends_with_tool(text: str, start: int, end: int) -> bool:
    """Whether text[start:end], without its trailing whitespace, ends with a tool call or a thought (looking only
    at its tail: a turn's text is never re-read whole for each block in it)."""
    k = _back_over_space(text, end, start)
    return text[max(start, k - 16) : k].lower().endswith(_TOOL_ENDS)


def _before_feedback(text: str, i: int, floor: int) -> int:
    """Where the feedback that opens at `i` starts: back over whitespace, and over the user turn's header."""
    w = _back_over_space(text, i, floor)
    if w - len(_USER_TURN) >= floor and text.startswith(_USER_TURN, w - len(_USER_TURN)):
        v = _back_over_space(text, w - len(_USER_TURN), floor)
        if v - len(_END_TURN) >= floor and text.startswith(_END_TURN, v - len(_END_TURN)):
            return v - len(_END_TURN)
    return w


def _back_over_space(text: str, i: int, floor: int) -> int:
    while i > floor and text[i - 1].isspace():
        i -= 1
    return i


def _after_feedback(text: str, end: int) -> int:
    """Where the feedback that closes at `end` ends: over whitespace, the assistant's header and a `<think>`."""
    while end < len(text) and text[end].isspace():
        end += 1
    m = _ASSISTANT_TURN.match(text, end)
    end = m.end() if m else end
    return end + len("<think>\n") if text.startswith("<think>\n", end) else end
