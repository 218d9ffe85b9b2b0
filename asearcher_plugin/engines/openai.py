"""`OpenAIEngine`: the `generate` contract against OpenAI-compatible completion servers (vLLM, SGLang).

Prompts go as token ids to `/v1/completions`; with vLLM's `return_tokens_as_token_ids` the
generated ids come back exactly, otherwise the text is re-tokenized. Several base URLs share the load
through the shared endpoint client (`local_retriever.endpoints`): failover, cooldown of a dead URL, and
retries with backoff on connection errors, timeouts, 429 and 5xx; a 4xx raises at once.
"""

from __future__ import annotations

import uuid

from local_retriever.endpoints import BadReply, EndpointUnavailable, MultiURLClient

from .types import CompletionOutput, Logprob, RequestOutput

# No server gave a completion after the retries (two 500s included); eval counts it as an infrastructure error.
EngineUnavailable = EndpointUnavailable


class OpenAIEngine:
    """`api_key`: the key itself, resolved by the caller's endpoint config (`EndpointConfig.api_key`); None sends
    "none", which local servers accept."""

    def __init__(
        self,
        base_urls: str | list[str],
        model: str,
        tokenizer,
        api_key: str | None = None,
        timeout: float = 600.0,
        retries: int = 3,
        cooldown: float = 10.0,
    ):
        try:
            self.client = MultiURLClient(
                base_urls,
                "completion server",
                timeout=timeout,
                retries=retries,
                cooldown=cooldown,
                headers={"Authorization": f"Bearer {api_key or 'none'}"},
            )
        except ValueError:
            raise ValueError("OpenAIEngine needs at least one base URL") from None
        self.base_urls = self.client.urls
        self.model, self.tokenizer, self.retries = model, tokenizer, retries

    async def aclose(self) -> None:
        await self.client.aclose()

    async def generate(
        self, prompt_token_ids: list[int], sampling_params, multi_modal_data=None, **_
    ) -> RequestOutput:
        p = sampling_params
        body = {
            "model": self.model,
            "prompt": list(prompt_token_ids),
            "max_tokens": p.max_tokens or 1024,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "stop": p.stop or None,
            "include_stop_str_in_output": p.include_stop_str_in_output,
            "skip_special_tokens": p.skip_special_tokens,
            "return_tokens_as_token_ids": True,
        }
        if getattr(p, "seed", None) is not None:
            body["seed"] = p.seed
        if getattr(p, "top_k", -1) and p.top_k > 0:
            body["top_k"] = p.top_k
        if p.logprobs is not None:
            body["logprobs"] = max(1, p.logprobs)
        return await self.client.post_json("/completions", body, lambda data: self._parse(prompt_token_ids, data, p))

    def _parse(self, prompt_token_ids, data: dict, p) -> RequestOutput:
        try:
            choice = data["choices"][0]
            if not isinstance(choice, dict):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise BadReply("reply holds no completion choice") from None
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
            logprobs += [{t: Logprob(0.0)} for t in token_ids[len(logprobs) :]]
        finish = choice.get("finish_reason") or "stop"
        out = CompletionOutput(0, text, token_ids, finish, choice.get("stop_reason"), logprobs)
        return RequestOutput(data.get("id", uuid.uuid4().hex), list(prompt_token_ids), [out])
