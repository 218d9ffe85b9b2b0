"""What every tool backend offers: `search(query)` -> documents, `access(url)` -> page text."""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..text import scrub


class ToolError(RuntimeError):
    """A tool call that failed; the agent turns it into feedback text and keeps going."""


class ToolUnavailable(ToolError):
    """The tool's service could not serve after the client's retries (unreachable, 5xx, 429, timed out, no API key):
    the infrastructure failed, not the model. Counted apart (`tool_errors_infra`); evaluation records the item as
    `failed` and runs it again on resume instead of scoring it."""


class ToolBox(ABC):
    """A backend implements `_search` and `_access`; callers (the agent, evaluation, synthesis) call `search` and
    `access`, where a query or URL enters the tools and is scrubbed once for every backend, its cache and its
    services' JSON bodies."""

    async def search(self, query: str, topk: int) -> list[dict]:
        """Documents with `title`, `url` and `text`, best first."""
        return await self._search(scrub(query), topk)

    async def access(self, url: str) -> str | None:
        """The page's text, or None when there is no such page."""
        return await self._access(scrub(url))

    @abstractmethod
    async def _search(self, query: str, topk: int) -> list[dict]: ...

    @abstractmethod
    async def _access(self, url: str) -> str | None: ...

    async def aclose(self) -> None:
        return None
