"""`trajectories.jsonl` lines (from `asearcher eval`, or saved by the demo) back into turns the page can replay.

Where the turns are is `agent.text_turns`'s answer; here each gets the action parsed from it.
"""

from __future__ import annotations

import json

from ..agent.actions import TOOL_TAGS, parse_action
from ..agent.text_turns import turn_spans
from ..records import EvalRow

MAX_PROBLEMS = 20


def split_turns(text: str, question: str) -> tuple[str, list[dict]]:
    """The prompt and the turns of a transcript: each turn's text, the action parsed from it and its feedback."""
    cut, spans = turn_spans(text, question)
    turns = [_turn(n, text[a:b], text[b:c]) for n, (a, b, c) in enumerate(spans, 1)]
    return text[:cut], turns


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
        except RecursionError:  # JSON nested deeper than Python parses
            problems.append(f"line {n}: JSON nested too deeply")
        except (ValueError, TypeError, AttributeError) as exc:
            problems.append(f"line {n}: {str(exc)[:160] or type(exc).__name__}")
    if len(problems) > MAX_PROBLEMS:
        problems = problems[:MAX_PROBLEMS] + [f"... and {len(problems) - MAX_PROBLEMS} more lines"]
    return rows, problems
