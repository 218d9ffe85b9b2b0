"""The one check for `str.format` template files the user may supply (agent prompts, judge prompts).

A template is read when its config loads, so a wrong field fails there, naming the file, and not in the middle of a
rollout when it is first rendered.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from string import Formatter


class TemplateError(ValueError):
    pass


def check_template(text: str, source: str, fields: Iterable[str], required: Iterable[Iterable[str]] = (), for_=""):
    """`text` if it is a format string naming only `fields`, with one of each group in `required`, that renders.

    `source` starts every message (the file); `for_` follows the unknown fields (e.g. " for agent_type 'x'").
    """
    fields = tuple(fields)
    try:
        names = [name for _, name, _, _ in Formatter().parse(text) if name is not None]
    except ValueError as exc:  # a lone "{" or "}"
        raise TemplateError(f"{source}: not a valid template ({exc}); write a literal brace as {{{{ or }}}}") from None
    unknown = list(dict.fromkeys(n for n in names if n not in fields))
    if unknown:
        shown = ", ".join("{" + n + "}" for n in unknown)
        known = ", ".join("{" + f + "}" for f in fields)
        raise TemplateError(f"{source}: unknown field(s) {shown}{for_}; known fields: {known}")
    for need in required:
        if not set(names) & set(need):
            raise TemplateError(f"{source}: the template must use " + " or ".join("{" + n + "}" for n in sorted(need)))
    try:
        text.format(**dict.fromkeys(fields, ""))
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise TemplateError(f"{source}: the template does not render: {type(exc).__name__}: {exc}") from None
    return text


# ASearcher's sentence letting the model call a question invalid (AReaL/ASearcher/train/prompts.py, INVALID_PROMPT,
# inclusionAI/ASearcher@813e804): `reward.valid_inst_ratio` below 1 replaces it, so the template must hold it.
INVALID_SENTENCE = (
    "Note that when the Assistant finds the question is invalid, e.g. no answer could match all information in the "
    "question, the Assistant replies with '<answer> the question is invalid. </answer>'."
)

# The fields a prompt template of each agent type may use; `question` is required. Here rather than beside the
# agent's prompts so that the config can check a template at load without importing the agent.
TEMPLATE_FIELDS = {
    "search-r1": ("question", "current_date"),
    "asearcher": ("question", "current_date"),
    "asearcher-reasoning": ("question", "history", "current_date"),
    "tool-calls": ("question", "current_date"),
}


PACKAGED_PROMPTS = Path(__file__).parents[1] / "agent" / "templates"


def default_template_path(agent_type: str) -> Path:
    """The packaged prompt template of `agent_type`, used when a config names none."""
    return PACKAGED_PROMPTS / f"{agent_type}.txt"


def packaged_prompt(name: str | Path) -> Path | None:
    """The packaged prompt template a bare name (no folder, no such file here) stands for, e.g. asearcher-search-only;
    kept as its name in a config, so every node reads its own installed copy."""
    name = str(name)
    if "/" in name or Path(name).expanduser().exists():
        return None
    path = PACKAGED_PROMPTS / f"{name}.txt"
    return path if path.is_file() else None


def read_template(path: str | Path, agent_type: str) -> str:
    """A prompt template's text, byte for byte, after checking it uses only the fields `agent_type` fills."""
    try:
        text = (packaged_prompt(path) or Path(path)).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateError(f"prompt template {path}: cannot be read: {exc}") from None
    fields = TEMPLATE_FIELDS[agent_type]
    return check_template(text, f"prompt template {path}", fields, [{"question"}], f" for agent_type {agent_type!r}")
