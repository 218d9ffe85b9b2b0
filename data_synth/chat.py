"""A chat client for OpenAI-compatible endpoints, with token accounting and JSON replies.

Transport failures are handled by the shared endpoint client (`local_retriever.endpoints`): connection
errors, timeouts, 429 and 5xx are retried with backoff across the endpoint's base URLs, a dead URL cools
down for everyone, and a 4xx is the caller's mistake and raises at once. Malformed replies are a different
matter, handled by `ask_json`: the model is shown why its reply was rejected and asked again, a
bounded number of times, then `BadOutput` names the reason and the caller drops the candidate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from local_retriever.endpoints import EndpointUnavailable

from .config import ChatEndpointConfig

__all__ = ["BadOutput", "ChatClient", "EndpointUnavailable", "Usage", "UsageLog", "extract_json", "require_fields"]
COOLDOWN_S = 10.0


class BadOutput(ValueError):
    """A model reply that cannot be used; `code` is the short reason counted in the statistics."""

    def __init__(self, code: str, detail: str = ""):
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code, self.detail = code, detail


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: int = 0  # calls whose server reported no usage: counted as characters / 4

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.estimated += other.estimated


@dataclass
class UsageLog:
    """Tokens per (endpoint role, stage); one per item, summed by the writer."""

    by_key: dict[str, Usage] = field(default_factory=dict)

    def record(self, key: str, usage: Usage) -> None:
        self.by_key.setdefault(key, Usage()).add(usage)

    def as_dict(self) -> dict:
        return {k: vars(v) for k, v in sorted(self.by_key.items())}


class ChatClient:
    def __init__(
        self, role: str, cfg: ChatEndpointConfig, usage: UsageLog | None = None, http: httpx.AsyncClient | None = None
    ):
        self.role, self.cfg = role, cfg
        # One client per endpoint, shared by every item: a dead URL is skipped by all of them for a while.
        self._endpoint = cfg.client(f"{role} endpoint", http=http, cooldown=COOLDOWN_S)
        self.urls = self._endpoint.urls
        self.usage = usage or UsageLog()

    def for_item(self, usage: UsageLog) -> ChatClient:
        """The same endpoint and connection pool, counting tokens into `usage`."""
        clone = object.__new__(ChatClient)
        clone.__dict__.update(self.__dict__, usage=usage)
        return clone

    async def aclose(self) -> None:
        await self._endpoint.aclose()

    async def complete(
        self, messages: list[dict], stage: str, n: int = 1, temperature: float | None = None
    ) -> list[str]:
        """`n` reply texts to `messages`; servers that return fewer choices are asked again."""
        texts: list[str] = []
        while len(texts) < n:
            texts += await self._request(messages, stage, n - len(texts), temperature)
        return texts[:n]

    async def _request(self, messages: list[dict], stage: str, n: int, temperature: float | None) -> list[str]:
        body = {
            "model": self.cfg.model,
            "messages": messages,
            "n": n,
            "max_tokens": self.cfg.max_tokens,
            "temperature": self.cfg.temperature if temperature is None else temperature,
            "top_p": self.cfg.top_p,
        }
        data = await self._endpoint.post_json("/chat/completions", body)
        choices = data.get("choices") if isinstance(data, dict) else None
        texts = [
            ((c.get("message") or {}).get("content") or "") if isinstance(c, dict) else ""
            for c in (choices if isinstance(choices, list) else [])
        ]
        if not texts:
            raise BadOutput("no choices", f"{self.role} reply had no choices")
        self._account(stage, messages, texts, data.get("usage"))
        return texts

    def endpoint(self, stage: str) -> _Counted:
        """This endpoint as a `post_json(path, payload, check)` client (for the shared judge), counting tokens."""
        return _Counted(self, stage)

    def _account(self, stage: str, messages: list[dict], texts: list[str], usage: dict | None) -> None:
        if usage and "prompt_tokens" in usage:
            u = Usage(1, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        else:
            chars = sum(len(m["content"]) for m in messages)
            u = Usage(1, chars // 4, sum(len(t) for t in texts) // 4, estimated=1)
        self.usage.record(f"{self.role}/{stage}", u)

    async def ask_json(
        self,
        prompt: str,
        stage: str,
        fields: dict[str, type],
        check: Callable[[dict], None] | None = None,
        retries: int = 2,
    ) -> dict:
        """A JSON object with `fields` (name -> type) that passes `check` (which raises BadOutput)."""
        messages = [{"role": "user", "content": prompt}]
        last = BadOutput("no reply")
        for _ in range(retries + 1):
            text = (await self.complete(messages, stage))[0]
            try:
                obj = require_fields(extract_json(text), fields)
                if check:
                    check(obj)
                return obj
            except BadOutput as exc:
                last = exc
                messages = messages[:1] + [
                    {"role": "assistant", "content": _THINK.sub("", text).strip()[-4000:]},
                    {
                        "role": "user",
                        "content": f"Your reply was rejected ({exc}). Reply again with the JSON object only.",
                    },
                ]
        raise last


class _Counted:
    def __init__(self, chat: ChatClient, stage: str):
        self.chat, self.stage = chat, stage

    async def post_json(self, path: str, payload: dict, check: Callable | None = None):
        def counted(data):
            choices = data.get("choices") if isinstance(data, dict) else None
            texts = [
                str(((c.get("message") or {}).get("content")) or "")
                for c in choices or []
                if isinstance(c, dict) and isinstance(c.get("message") or {}, dict)
            ]
            self.chat._account(
                self.stage, payload["messages"], texts, data.get("usage") if isinstance(data, dict) else None
            )
            return check(data) if check else data

        return await self.chat._endpoint.post_json(path, payload, counted)


_THINK = re.compile(r"<think>.*?</think>", re.S)


def extract_json(text: str) -> dict:
    """The last top-level JSON object in a reply; reasoning blocks and code fences around it are ignored."""
    text = _THINK.sub("", text or "")
    decoder = json.JSONDecoder()
    found, i = None, text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found = obj
        i = text.find("{", end)
    if found is None:
        raise BadOutput("not json", f"no JSON object in reply: {text[:120]!r}")
    return found


def require_fields(obj: dict, fields: dict[str, type]) -> dict:
    for name, kind in fields.items():
        if name not in obj:
            raise BadOutput("missing field", name)
        value = obj[name]
        if kind is int and isinstance(value, bool):
            raise BadOutput("wrong type", f"{name} should be {kind.__name__}")
        if kind is int and isinstance(value, str) and value.strip().isdigit():
            obj[name] = value = int(value)
        if not isinstance(value, kind):
            raise BadOutput("wrong type", f"{name} should be {kind.__name__}, got {type(value).__name__}")
        if kind is str and not value.strip():
            raise BadOutput("missing field", f"{name} is empty")
    return obj
