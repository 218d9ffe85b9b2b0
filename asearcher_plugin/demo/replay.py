"""`trajectories.jsonl` lines (from `asearcher eval`, or saved by the demo) back into turns the page can replay.

A line keeps the transcript's text, not where each model call began, so turns are recovered from it: the prompt
is the packaged template of some agent type around the line's question, and a model turn ends where the agent's
feedback begins (an `<information>` block right after a search, a page read or a summary, or the invalid-action
note). Two turns with nothing between them (ASearcher's format gives no feedback to a turn without an action)
show as one.
"""

from __future__ import annotations

import json
import re
from functools import cache
from string import Formatter

from ..agent.actions import TOOL_TAGS, parse_action, scrub
from ..agent.prompts import template_for
from ..records import EvalRow
from ..template_check import TEMPLATE_FIELDS

_CHAT_OPEN = r"(?:<\|im_start\|>user\s*)?"
_CHAT_TURN = r"(?:\s*<\|im_end\|>\s*<\|im_start\|>assistant\n?)?"
FEEDBACK = re.compile(
    r"(?:<\|im_end\|>\s*<\|im_start\|>user\s*)?\s*"
    r"(?:<information>.*?</information>|My previous action is invalid: .*? Let me try again\.)"
    r"\s*(?:<\|im_end\|>\s*<\|im_start\|>assistant\n?)?(?:<think>\n)?",
    re.S,
)
_AFTER_TOOL = re.compile(r"</(?:search|access|think)>\s*$", re.I)
MAX_PROBLEMS = 20


def _flexible(text: str) -> str:
    return r"\s*".join(re.escape(w) for w in text.split())


@cache
def _template_parts(agent_type: str) -> tuple[tuple[str, str | None], ...]:
    return tuple((lit, name) for lit, name, _, _ in Formatter().parse(template_for(agent_type)))


def prompt_end(text: str, question: str) -> int:
    """Where the packaged prompt of some agent type, around `question`, ends in `text` (0: no prompt found)."""
    q = scrub(question).strip()
    if not q:
        return 0
    for agent_type in TEMPLATE_FIELDS:
        parts = [_CHAT_OPEN]
        for literal, name in _template_parts(agent_type):
            lead, trail = (r"\s*" if literal[:1].isspace() else ""), (r"\s*" if literal[-1:].isspace() else "")
            parts.append(lead + _flexible(literal) + trail)
            if name == "question":
                parts.append(_flexible(q) + r"\??")
            elif name is not None:
                parts.append(r".*?")
        m = re.match("".join(parts) + _CHAT_TURN, text, re.S)
        if m:
            return m.end()
    return 0


def split_turns(text: str, question: str) -> tuple[str, list[dict]]:
    """The prompt and the turns of a transcript: each turn's text, the action parsed from it and its feedback."""
    cut = prompt_end(text, question)
    prompt, rest = text[:cut], text[cut:]
    turns, start = [], 0
    for m in FEEDBACK.finditer(rest):
        segment = rest[start : m.start()]
        if "<information>" in m.group(0) and not _AFTER_TOOL.search(segment):
            continue  # the model wrote it: it belongs to the turn's text
        turns.append(_turn(len(turns) + 1, segment, m.group(0)))
        start = m.end()
    if rest[start:].strip():
        turns.append(_turn(len(turns) + 1, rest[start:], ""))
    return prompt, turns


def _turn(n: int, text: str, feedback: str) -> dict:
    action = parse_action(text, TOOL_TAGS)
    kind = "none" if action.kind == "invalid" and not text.strip() else action.kind
    return {"turn": n, "text": text, "action": kind, "argument": action.argument, "error": action.error,
            "feedback": feedback}  # fmt: skip


def replay_row(row: EvalRow) -> dict:
    prompt, turns = split_turns(row.text, row.question) if row.status == "ok" else ("", [])
    return {
        "dataset": row.dataset,
        "id": row.id,
        "seed": row.seed,
        "question": row.question,
        "golden_answers": row.golden_answers,
        "status": row.status,
        "error": row.error,
        "answer": row.answer,
        "reward": row.reward,
        "scores": row.scores,
        "stats": row.logs,
        "truncated": row.truncated,
        "seconds": row.seconds,
        "prompt": prompt,
        "turns": turns,
    }


def read_lines(text: str) -> tuple[list[dict], list[str]]:
    """Every trajectory line of a file, replayable, and what was wrong with the others (by line number)."""
    rows, problems = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict) or "question" not in data:
                raise ValueError("not a trajectory line (no question)")
            rows.append(replay_row(EvalRow.from_json(data)))
        except (ValueError, TypeError, AttributeError) as exc:
            problems.append(f"line {n}: {str(exc)[:160] or type(exc).__name__}")
    if len(problems) > MAX_PROBLEMS:
        problems = problems[:MAX_PROBLEMS] + [f"... and {len(problems) - MAX_PROBLEMS} more lines"]
    return rows, problems
