"""Prompts per agent type and how tool output is shown to the model."""

from __future__ import annotations

SEARCH_R1 = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge "
    "needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>. Question: {question}\n"
)

ASEARCHER = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant answers it. "
    "The Assistant thinks inside <think> </think>, then takes exactly one action per turn: "
    "<search> query </search> to search the knowledge base, <access> url </access> to read a page "
    "(access the same url again to read its next part), or <answer> short answer </answer> to finish. "
    "Results appear between <information> and </information>. Note: the question is a valid question and you "
    "should try to find a correct answer.\n\nUser: {question}\n\nAssistant: \n<think>"
)

# The reasoning agent rebuilds its prompt each call from the question and the recent history.
ASEARCHER_REASONING = (
    "You are a research agent answering a question with a search engine and a web browser.\n"
    "Question: {question}\n\nReasoning history (most recent last):\n{history}\n\n"
    "Think inside <think> </think>, then take exactly one action: <search> query </search>, "
    "<access> url </access>, or <answer> short answer </answer> once you are confident."
)

TEMPLATES = {"search-r1": SEARCH_R1, "asearcher": ASEARCHER, "asearcher-reasoning": ASEARCHER_REASONING}
ALLOWED_ACTIONS = {
    "search-r1": ("search", "answer"),
    "asearcher": ("search", "access", "answer"),
    "asearcher-reasoning": ("search", "access", "answer"),
}


REASONING_HISTORY_CHARS = 25_000


def build_prompt(agent_type: str, question: str) -> str:
    question = question.strip()
    if agent_type == "search-r1" and not question.endswith("?"):
        question += "?"
    if agent_type == "asearcher-reasoning":
        return reasoning_prompt(question, "")
    return TEMPLATES[agent_type].format(question=question)


def reasoning_prompt(question: str, history: str) -> str:
    """The reasoning agent's prompt: the question and only the last 25,000 characters of history."""
    recent = history[-REASONING_HISTORY_CHARS:] if history else "(none yet)"
    return ASEARCHER_REASONING.format(question=question.strip(), history=recent)


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
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": _SENTINEL},
         {"role": "user", "content": content}],
        tokenize=False, add_generation_prompt=True)
    cut = rendered.find(_SENTINEL)
    if cut < 0:
        return f"\n\n{content}\n\n"
    return rendered[cut + len(_SENTINEL):]


def chat_prompt(tokenizer, text: str) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
