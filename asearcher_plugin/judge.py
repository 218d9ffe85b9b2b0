"""LLM-as-judge through any OpenAI-compatible chat endpoint.

The judge sees the question, the gold answers and the prediction and replies with JSON
`{"verdict": "correct" | "incorrect", "reason": "..."}`. Unparseable replies and endpoint errors
are retried a bounded number of times; after that the caller falls back to F1 and flags it.
"""

from __future__ import annotations

import os
import re

import httpx
import orjson

from .agent.actions import scrub

JUDGE_PROMPT = """You are grading an answer to a question against the gold answers.
Question: {question}
Gold answers: {golds}
Predicted answer: {prediction}

The prediction is correct if it means the same as any gold answer (aliases, spelling variants and
equivalent formats of dates or numbers count; extra hedging or a different entity does not).
Reply with JSON only: {{"verdict": "correct" or "incorrect", "reason": "<one sentence>"}}"""


class JudgeUnavailable(RuntimeError):
    pass


_caches: dict = {}


def _cache(cfg):
    if not getattr(cfg, "cache_dir", None):
        return None
    from .tools.cache import DiskCache

    if cfg.cache_dir not in _caches:
        _caches[cfg.cache_dir] = DiskCache(os.path.join(cfg.cache_dir, "judge.sqlite"), ttl=float("inf"))
    return _caches[cfg.cache_dir]


def parse_verdict(text: str) -> bool | None:
    match = re.search(r"\{.*\}", text or "", re.S)
    if match:
        try:
            verdict = str(orjson.loads(match.group(0)).get("verdict", "")).strip().lower()
        except (orjson.JSONDecodeError, AttributeError):
            verdict = ""
        if verdict in ("correct", "incorrect"):
            return verdict == "correct"
    return None


async def judge(question: str, prediction: str, golds: list[str], cfg, client: httpx.AsyncClient | None = None) -> bool:
    """True/False from the judge; raises JudgeUnavailable after `cfg.retries` failed attempts."""
    # Lone surrogates (model output, dataset text) can be neither a cache key nor a JSON body.
    question, prediction, golds = scrub(question), scrub(prediction), [scrub(str(g)) for g in golds]
    cache = _cache(cfg)
    key = orjson.dumps([cfg.model, question, prediction, sorted(golds)]).decode()
    if cache is not None:
        hit = await cache.aget(key)
        if hit is not None:
            return bool(hit)
    verdict = await _ask(question, prediction, golds, cfg, client)
    if cache is not None:
        await cache.aset(key, verdict)
    return verdict


async def _ask(question: str, prediction: str, golds: list[str], cfg, client: httpx.AsyncClient | None) -> bool:
    own = client is None
    client = client or httpx.AsyncClient(timeout=cfg.timeout)
    headers = {"Authorization": f"Bearer {os.environ.get(cfg.api_key_env, 'none')}"}
    body = {"model": cfg.model, "temperature": 0.0, "max_tokens": 256, "messages": [
        {"role": "user", "content": JUDGE_PROMPT.format(question=question, golds=golds, prediction=prediction)}]}
    errors = []
    try:
        for _ in range(cfg.retries + 1):
            try:
                resp = await client.post(cfg.base_url.rstrip("/") + "/chat/completions", json=body, headers=headers)
                resp.raise_for_status()
                verdict = parse_verdict(resp.json()["choices"][0]["message"]["content"])
            except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:  # TypeError: JSON of another shape
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            if verdict is not None:
                return verdict
            errors.append("reply had no verdict")
    finally:
        if own:
            await client.aclose()
    raise JudgeUnavailable("; ".join(errors[-3:]))
