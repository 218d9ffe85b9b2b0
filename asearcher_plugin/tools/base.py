"""What every tool backend offers: `search(query)` -> documents, `access(url)` -> page text."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod

from ..utils.text import scrub


class ToolError(RuntimeError):
    """A tool call that failed; the agent turns it into feedback text and keeps going."""


class ToolUnavailable(ToolError):
    """The tool's service could not serve after the client's retries (unreachable, 5xx, 429, timed out, no API key):
    the infrastructure failed, not the model. Counted apart (`tool_errors_infra`); evaluation records the item as
    `failed` and runs it again on resume instead of scoring it."""


# What a tool call may meet without a bug in the tool: its own ToolError, a timeout, a socket error.
EXPECTED_FAILURES = (ToolError, asyncio.TimeoutError, OSError)


def failure_shown(kind: str, exc: BaseException) -> tuple[str, bool]:
    """What the model is told when a call of the tool `kind` raised `exc`, and whether the infrastructure caused it
    (ToolUnavailable, a timeout, a socket error). An expected failure's message may quote a service's reply: text from
    outside, scrubbed like the tools' results; any other exception shows its type only."""
    if isinstance(exc, EXPECTED_FAILURES):
        infra = not isinstance(exc, ToolError) or isinstance(exc, ToolUnavailable)
        return scrub(f"{kind} failed: {str(exc) or type(exc).__name__}"), infra
    return f"{kind} failed: {type(exc).__name__}", False


class ToolBox(ABC):
    """A backend implements `_search` and `_access`; callers (the agent, evaluation, synthesis) call `search` and
    `access`, the one boundary where text crosses in both directions and is scrubbed: a query or URL on its way to
    every backend, its cache and its services' JSON bodies; documents and pages on their way back (JSON may escape
    a lone surrogate, and this text becomes feedback a tokenizer must take)."""

    async def search(self, query: str, topk: int) -> list[dict]:
        """Documents with `title`, `url` and `text`, best first."""
        docs = await self._search(scrub(query), topk)
        return [{k: scrub(v) if isinstance(v, str) else v for k, v in doc.items()} for doc in docs]

    async def access(self, url: str) -> str | None:
        """The page's text, or None when there is no such page."""
        page = await self._access(scrub(url))
        return None if page is None else scrub(page)

    @abstractmethod
    async def _search(self, query: str, topk: int) -> list[dict]: ...

    @abstractmethod
    async def _access(self, url: str) -> str | None: ...

    async def aclose(self) -> None:
        return None
