"""The servers a demo run may reach: only those the operator named at launch, never a URL typed into the page.

A URL from the page would let any visitor point the server at an address of their choosing: a capture server that
receives `$OPENAI_API_KEY`, or a service inside the network read back through error messages. So the page picks
among the knowledge bases (`--kb-url`) and model servers (`--model-url`, `$OPENAI_BASE_URL`) of the launch, and
the key goes only to those.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .requests import RequestError, RunRequest


def _norm(url: str) -> str:
    return url.strip().rstrip("/")


def _unique(urls) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_norm(u) for u in urls if u.strip()))


@dataclass(frozen=True)
class Endpoints:
    kb_urls: tuple[str, ...]  # the first is the page's default
    model_urls: tuple[str, ...] = ()

    @classmethod
    def at_launch(cls, kb_urls, model_urls=(), environ=None) -> Endpoints:
        env = os.environ if environ is None else environ
        models = [*model_urls, *([env["OPENAI_BASE_URL"]] if env.get("OPENAI_BASE_URL") else [])]
        return cls(_unique([kb_urls] if isinstance(kb_urls, str) else kb_urls), _unique(models))

    @property
    def default_kb_url(self) -> str:
        return self.kb_urls[0] if self.kb_urls else ""

    def check(self, request: RunRequest) -> RunRequest:
        """The request with its KB URL filled in; RequestError when it names a server the launch did not."""
        kb = _norm(request.tools.kb_url) or self.default_kb_url
        if request.tools.backend == "local" and kb not in self.kb_urls:
            raise RequestError(
                f"KB URL {kb!r} is not one this demo was started with ({', '.join(self.kb_urls) or 'none'}); "
                "the demo reaches only knowledge bases given at launch: asearcher demo --kb-url URL"
            )
        if request.model.kind == "openai" and _norm(request.model.url) not in self.model_urls:
            raise RequestError(
                f"model url {request.model.url!r} is not one this demo was started with "
                f"({', '.join(self.model_urls) or 'none'}); the demo sends requests, and $OPENAI_API_KEY, only to "
                "model servers given at launch: asearcher demo --model-url URL (or $OPENAI_BASE_URL)"
            )
        tools = request.tools.model_copy(update={"kb_url": kb})
        model = request.model.model_copy(update={"url": _norm(request.model.url)})
        return request.model_copy(update={"tools": tools, "model": model})
