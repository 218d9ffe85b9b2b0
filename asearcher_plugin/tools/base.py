"""What every tool backend offers: `search(query)` -> documents, `access(url)` -> page text."""

from __future__ import annotations

from abc import ABC, abstractmethod


class ToolError(RuntimeError):
    """A tool call that failed; the agent turns it into feedback text and keeps going."""


class ToolUnavailable(ToolError):
    """The tool's service could not serve after the client's retries (unreachable, 5xx, 429, timed out, no API key):
    the infrastructure failed, not the model. Counted apart (`tool_errors_infra`); evaluation records the item as
    `failed` and runs it again on resume instead of scoring it."""


class ToolBox(ABC):
    @abstractmethod
    async def search(self, query: str, topk: int) -> list[dict]:
        """Documents with `title`, `url` and `text`, best first."""

    @abstractmethod
    async def access(self, url: str) -> str | None:
        """The page's text, or None when there is no such page."""

    async def aclose(self) -> None:
        return None
