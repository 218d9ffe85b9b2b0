"""`OpenAIEngine`: the `generate` contract against OpenAI-compatible completion servers (vLLM, SGLang).

Prompts go as token ids to `/v1/completions`; with vLLM's `return_tokens_as_token_ids` the
generated ids come back exactly, otherwise the text is re-tokenized. Several base URLs are used
round-robin, with failover on connection errors and 5xx.
"""

from __future__ import annotations

import itertools
import os
import uuid

import httpx

from .types import CompletionOutput, Logprob, RequestOutput


class EngineUnavailable(RuntimeError):
    pass


class OpenAIEngine:
    def __init__(self, base_urls: str | list[str], model: str, tokenizer, api_key: str | None = None,
                 timeout: float = 600.0, retries: int = 2):
        urls = base_urls.split(",") if isinstance(base_urls, str) else list(base_urls)
        self.base_urls = [u.strip().rstrip("/") for u in urls if u.strip()]
        if not self.base_urls:
            raise ValueError("OpenAIEngine needs at least one base URL")
        self.model, self.tokenizer, self.retries = model, tokenizer, retries
        self._next = itertools.cycle(range(len(self.base_urls)))
        key = api_key or os.environ.get("OPENAI_API_KEY", "none")
        self.http = httpx.AsyncClient(timeout=timeout, headers={"Authorization": f"Bearer {key}"})

    async def aclose(self) -> None:
        await self.http.aclose()

    async def generate(self, prompt_token_ids: list[int], sampling_params, multi_modal_data=None, **_) -> RequestOutput:
        p = sampling_params
        body = {"model": self.model, "prompt": list(prompt_token_ids), "max_tokens": p.max_tokens or 1024,
                "temperature": p.temperature, "top_p": p.top_p, "stop": p.stop or None,
                "include_stop_str_in_output": p.include_stop_str_in_output,
                "skip_special_tokens": p.skip_special_tokens, "return_tokens_as_token_ids": True}
        if getattr(p, "seed", None) is not None:
            body["seed"] = p.seed
        if getattr(p, "top_k", -1) and p.top_k > 0:
            body["top_k"] = p.top_k
        if p.logprobs is not None:
            body["logprobs"] = max(1, p.logprobs)
        errors = []
        for _ in range(len(self.base_urls) * (self.retries + 1)):
            url = self.base_urls[next(self._next)]
            try:
                resp = await self.http.post(f"{url}/completions", json=body)
            except httpx.HTTPError as exc:
                errors.append(f"{url}: {type(exc).__name__}")
                continue
            if resp.status_code >= 500 or resp.status_code == 429:
                errors.append(f"{url}: HTTP {resp.status_code}")
                continue
            if resp.status_code >= 400:
                raise ValueError(f"{url} refused the request: HTTP {resp.status_code}: {resp.text[:300]}")
            return self._parse(prompt_token_ids, resp.json(), p)
        raise EngineUnavailable("no completion server answered: " + "; ".join(errors[-4:]))

    def _parse(self, prompt_token_ids, data: dict, p) -> RequestOutput:
        choice = data["choices"][0]
        text = choice.get("text", "")
        lp = choice.get("logprobs") or {}
        raw_tokens = lp.get("tokens") or []
        if raw_tokens and all(str(t).startswith("token_id:") for t in raw_tokens):
            token_ids = [int(str(t).split(":", 1)[1]) for t in raw_tokens]
        else:
            token_ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        logprobs = None
        if p.logprobs is not None:
            values = lp.get("token_logprobs") or [0.0] * len(token_ids)
            logprobs = [{t: Logprob(float(v if v is not None else 0.0))} for t, v in zip(token_ids, values)]
            logprobs += [{t: Logprob(0.0)} for t in token_ids[len(logprobs):]]
        finish = choice.get("finish_reason") or "stop"
        out = CompletionOutput(0, text, token_ids, finish, choice.get("stop_reason"), logprobs)
        return RequestOutput(data.get("id", uuid.uuid4().hex), list(prompt_token_ids), [out])
