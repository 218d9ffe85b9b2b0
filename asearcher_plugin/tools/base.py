"""What every tool backend offers: `search(query)` -> documents, `access(url)` -> page text."""

from __future__ import annotations

from abc import ABC, abstractmethod


class ToolError(RuntimeError):
    """A tool call that failed; the agent turns it into feedback text and keeps going."""


class ToolBox(ABC):
    @abstractmethod
    async def search(self, query: str, topk: int) -> list[dict]:
        """Documents with `title`, `url` and `text`, best first."""

    @abstractmethod
    async def access(self, url: str) -> str | None:
        """The page's text, or None when there is no such page."""

    async def aclose(self) -> None:
        return None
