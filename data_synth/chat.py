"""A chat client for OpenAI-compatible endpoints, with token accounting and JSON replies.

Transport failures (connection errors, 429, 5xx) are retried with backoff across the endpoint's
base URLs; a 4xx is the caller's mistake and raises at once. Malformed replies are a different
matter, handled by `ask_json`: the model is shown why its reply was rejected and asked again, a
bounded number of times, then `BadOutput` names the reason and the caller drops the candidate.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable

import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

from .config import EndpointConfig

COOLDOWN_S = 10.0


class EndpointUnavailable(RuntimeError):
    """No base URL of an endpoint answered after its retries: an infrastructure failure."""


class BadOutput(ValueError):
    """A model reply that cannot be used; `code` is the short reason counted in the statistics."""

    def __init__(self, code: str, detail: str = ""):
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code, self.detail = code, detail


class _Transient(Exception):
    pass


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: int = 0  # calls whose server reported no usage: counted as characters / 4

    def add(self, other: "Usage") -> None:
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
    def __init__(self, role: str, cfg: EndpointConfig, usage: UsageLog | None = None,
                 http: httpx.AsyncClient | None = None):
        self.role, self.cfg = role, cfg
        self.urls = [u.rstrip("/") for u in cfg.base_urls]
        if not self.urls:
            raise ValueError(f"{role}: base_urls is empty")
        self._next = itertools.cycle(range(len(self.urls)))
        self._down_until = [0.0] * len(self.urls)  # shared by every item: a dead URL is skipped for a while
        self._http = http or httpx.AsyncClient(timeout=cfg.timeout)
        self._own_http = http is None
        self.usage = usage or UsageLog()
        key = os.environ.get(cfg.api_key_env, "none")
        self._headers = {"Authorization": f"Bearer {key}"}

    def for_item(self, usage: UsageLog) -> "ChatClient":
        """The same endpoint and connection pool, counting tokens into `usage`."""
        clone = object.__new__(ChatClient)
        clone.__dict__.update(self.__dict__, usage=usage, _own_http=False)
        return clone

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def complete(self, messages: list[dict], stage: str, n: int = 1, temperature: float | None = None) -> list[str]:
        """`n` reply texts to `messages`; servers that return fewer choices are asked again."""
        texts: list[str] = []
        while len(texts) < n:
            texts += await self._request(messages, stage, n - len(texts), temperature)
        return texts[:n]

    async def _request(self, messages: list[dict], stage: str, n: int, temperature: float | None) -> list[str]:
        body = {"model": self.cfg.model, "messages": messages, "n": n, "max_tokens": self.cfg.max_tokens,
                "temperature": self.cfg.temperature if temperature is None else temperature, "top_p": self.cfg.top_p}
        errors: list[str] = []
        try:
            async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(len(self.urls) * (self.cfg.retries + 1)),
                    wait=self._wait, retry=retry_if_exception_type(_Transient),
                    reraise=True):
                with attempt:
                    data = await self._post(self._pick(), body, errors)
        except _Transient:
            raise EndpointUnavailable(f"{self.role} endpoint: " + "; ".join(errors[-3:])) from None
        texts = [(c.get("message") or {}).get("content") or "" for c in data.get("choices") or []]
        if not texts:
            raise BadOutput("no choices", f"{self.role} reply had no choices")
        self._account(stage, messages, texts, data.get("usage"))
        return texts

    def _pick(self) -> int:
        """The next URL in turn that is not cooling down after a failure (any, if all are)."""
        now = time.monotonic()
        for _ in range(len(self.urls)):
            i = next(self._next)
            if self._down_until[i] <= now:
                return i
        return next(self._next)

    def _wait(self, state) -> float:
        # fail over to the next URL at once; back off only after every URL has failed in a row
        n = state.attempt_number
        return 0.0 if n % len(self.urls) else min(10.0, 0.2 * 2 ** (n // len(self.urls) - 1))

    async def _post(self, index: int, body: dict, errors: list[str]) -> dict:
        url = self.urls[index]
        try:
            resp = await self._http.post(f"{url}/chat/completions", json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            errors.append(f"{url}: {type(exc).__name__}")
            self._down_until[index] = time.monotonic() + COOLDOWN_S
            raise _Transient() from None
        if resp.status_code == 429 or resp.status_code >= 500:
            errors.append(f"{url}: HTTP {resp.status_code}")
            raise _Transient()
        if resp.status_code >= 400:
            raise ValueError(f"{self.role} endpoint {url} refused the request: HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            return resp.json()
        except ValueError:
            errors.append(f"{url}: reply is not JSON")
            raise _Transient() from None

    def _account(self, stage: str, messages: list[dict], texts: list[str], usage: dict | None) -> None:
        if usage and "prompt_tokens" in usage:
            u = Usage(1, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        else:
            chars = sum(len(m["content"]) for m in messages)
            u = Usage(1, chars // 4, sum(len(t) for t in texts) // 4, estimated=1)
        self.usage.record(f"{self.role}/{stage}", u)

    async def ask_json(self, prompt: str, stage: str, fields: dict[str, type],
                       check: Callable[[dict], None] | None = None, retries: int = 2) -> dict:
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
                    {"role": "user", "content": f"Your reply was rejected ({exc}). Reply again with the JSON object only."}]
        raise last


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
