"""Text that enters from outside (model output, datasets, tool calls and replies) made safe to pass on."""

from __future__ import annotations


def scrub(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD.

    They cannot be encoded as UTF-8, so SQLite keys, JSON bodies and tokenizers all reject them. Applied where text
    enters: a model's turn (`agent.actions.parse_action`), a dataset's question and label (the agent), a tool call
    and its reply (`tools.ToolBox`), a judge call (`judge`).
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
