"""Prompts per agent type (template files in `templates/`) and how tool output is shown to the model."""

from __future__ import annotations

from datetime import datetime
from functools import cache

from ..utils.template_check import TEMPLATE_FIELDS, default_template_path, read_template

ALLOWED_ACTIONS = {
    "search-r1": ("search", "answer"),
    "asearcher": ("search", "access", "answer"),
    "asearcher-reasoning": ("search", "access", "answer"),
    "tool-calls": ("search", "access", "answer"),  # the built-in tools; the answer stays a tag
}


@cache
def _cached_template(path: str, agent_type: str) -> str:
    return read_template(path, agent_type)


def template_for(agent_type: str, path: str | None = None) -> str:
    """The user's template at `path`, or the packaged one for `agent_type` (each read once per process)."""
    return _cached_template(str(path or default_template_path(agent_type)), agent_type)


TEMPLATES = {t: template_for(t) for t in TEMPLATE_FIELDS}


REASONING_HISTORY_CHARS = 25_000


def build_prompt(agent_type: str, question: str, template: str | None = None) -> str:
    """The first prompt; `template` is a template's text (default: the packaged one for `agent_type`)."""
    question = question.strip()
    if agent_type == "search-r1" and not question.endswith("?"):
        question += "?"
    if agent_type == "asearcher-reasoning":
        return reasoning_prompt(question, "", template)
    return (template or TEMPLATES[agent_type]).format(question=question, current_date=_today())


def reasoning_prompt(question: str, history: str, template: str | None = None) -> str:
    """The reasoning agent's prompt: the question and only the last 25,000 characters of history."""
    recent = history[-REASONING_HISTORY_CHARS:] if history else "(none yet)"
    return (template or TEMPLATES["asearcher-reasoning"]).format(
        question=question.strip(), history=recent, current_date=_today()
    )


def _today() -> str:
    return datetime.now().strftime("%Y.%m.%d")  # ASearcher's reasoning prompts show the date this way


def information(body: str) -> str:
    return f"\n\n<information>{body}</information>\n\n"


def format_docs(docs: list[dict], max_chars: int) -> str:
    if not docs:
        return "No search results are found."
    parts = []
    for i, doc in enumerate(docs, 1):
        text = _str(doc.get("text") or doc.get("contents"))[:max_chars]
        title, url = _str(doc.get("title"))[:MAX_TITLE_CHARS], _str(doc.get("url"))[:MAX_TITLE_CHARS]
        parts.append(f"Doc {i}(Title: {title}) [{url}] {text}")
    return "\n".join(parts)


MAX_TITLE_CHARS = 500  # titles and URLs come from services we do not control; the feedback stays bounded


def _str(value) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def invalid_feedback(error: str) -> str:
    return f"\nMy previous action is invalid: {error} Let me try again.\n"


_SENTINEL = "\x00end-of-assistant\x00"


def chat_feedback(tokenizer, content: str) -> str:
    """Tool output as a user turn in the model's own chat template, for chat (instruct) models.

    Rendered as the difference between two conversations, so it works for any template that
    copies the assistant's text verbatim: what follows the assistant's words is the end of its
    turn, the tool turn, and the opening of the next assistant turn.
    """
    rendered = tokenizer.apply_chat_template(
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": _SENTINEL},
            {"role": "user", "content": content},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    cut = rendered.find(_SENTINEL)
    if cut < 0:
        return f"\n\n{content}\n\n"
    return rendered[cut + len(_SENTINEL) :]


def chat_prompt(tokenizer, text: str) -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
