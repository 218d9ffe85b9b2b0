"""Tools backed by the local knowledge-base server(s)."""

from __future__ import annotations

from local_retriever.client import RetrievalClient, RetrievalError, RetrievalUnavailable

from .base import ToolBox, ToolError, ToolUnavailable


class LocalToolBox(ToolBox):
    def __init__(self, tools_config):
        cfg = tools_config.local
        self.client = RetrievalClient(cfg.urls, timeout=cfg.timeout, retries=cfg.retries)

    async def _search(self, query: str, topk: int) -> list[dict]:
        try:
            hits = (await self.client.retrieve([query], topk=topk, return_scores=True))[0]
        except RetrievalUnavailable as exc:  # no replica answered after the retries
            raise ToolUnavailable(str(exc)) from None
        except RetrievalError as exc:
            raise ToolError(str(exc)) from None
        # `contents` ("Title"\ntext) as well: it is what ASearcher's own client shows of a KB row
        return [
            {
                "title": h["document"].get("title", ""),
                "url": h["document"].get("url", ""),
                "text": h["document"].get("text") or h["document"].get("contents", ""),
                "contents": h["document"].get("contents"),
                "score": h.get("score"),
            }
            for h in hits
        ]

    async def _access(self, url: str) -> str | None:
        try:
            page = (await self.client.access([url]))[0]
        except RetrievalUnavailable as exc:  # no replica answered after the retries
            raise ToolUnavailable(str(exc)) from None
        except RetrievalError as exc:
            raise ToolError(str(exc)) from None
        return page["contents"] if page else None

    async def aclose(self) -> None:
        await self.client.aclose()
