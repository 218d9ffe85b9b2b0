"""The engines a person can pick on the page, built on demand; a model that cannot be used says why, in one line.

In-process transformers models are loaded once and shared by every run (each generates one call at a time), the
`MAX_LOADED` most recently used kept loaded; an OpenAI-compatible server (one given at launch, `endpoints`) is
checked for an answer before a run starts; the scripted reference policy is
offered when its module is installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections import OrderedDict
from pathlib import Path

import httpx

from .requests import ModelChoice

MAX_LOADED = 2  # in-process models kept loaded; a run holds its own reference, so dropping one never breaks a run


class ModelError(RuntimeError):
    """The picked model cannot be used; the message is shown on the page."""


def reference_policy_available() -> bool:
    return importlib.util.find_spec("asearcher_plugin.agent.reference_policy") is not None


def choices() -> list[dict]:
    """The model choices the page lists (the reference policy only when its module is installed)."""
    items = [
        {"kind": "tiny", "label": "tiny CPU model (random weights)"},
        {"kind": "hf", "label": "local HF model (folder)"},
        {"kind": "openai", "label": "OpenAI-compatible server"},
    ]
    if reference_policy_available():
        from ..agent.reference_policy import NAME

        items.insert(0, {"kind": "reference", "label": f"{NAME} (not a model)"})
    return items


class Engine:
    """What a run needs from its model: `engine.generate`, its tokenizer, a label for the page; `close()` after."""

    def __init__(self, engine, tokenizer, label: str, owned: bool = False):
        self.engine, self.tokenizer, self.label, self.owned = engine, tokenizer, label, owned

    async def close(self) -> None:
        if self.owned and hasattr(self.engine, "aclose"):
            await self.engine.aclose()


class Models:
    def __init__(self, tiny_dir: str | Path):
        self.tiny_dir = Path(tiny_dir)
        self.hf_engines: OrderedDict[str, object] = OrderedDict()  # by resolved folder, least recently used first
        self._loading = asyncio.Lock()  # one model load at a time; runs that need the same one wait for it

    async def engine(self, choice: ModelChoice, agent_type: str, question: str, golds: list[str]) -> Engine:
        if choice.kind == "tiny":
            hf = await self._hf_engine(str(self.tiny_dir), tiny=True)
            return Engine(hf, hf.tokenizer, f"tiny CPU model ({self.tiny_dir})")
        if choice.kind == "hf":
            hf = await self._hf_engine(choice.path)
            return Engine(hf, hf.tokenizer, f"local HF model {choice.path}")
        if choice.kind == "openai":
            return await self._openai(choice)
        return await self._reference(agent_type, question, golds)

    async def _hf_engine(self, path: str, tiny: bool = False):
        async with self._loading:
            key = str(Path(path).expanduser().resolve())
            if key not in self.hf_engines:
                engine = await asyncio.to_thread(_load_hf, Path(key), tiny)
                while len(self.hf_engines) >= MAX_LOADED:
                    self.hf_engines.popitem(last=False)
                self.hf_engines[key] = engine
            self.hf_engines.move_to_end(key)
            return self.hf_engines[key]

    async def _openai(self, choice: ModelChoice) -> Engine:
        from local_retriever.endpoints import EndpointConfig

        from ..engines.openai import OpenAIEngine

        await _check_server(choice.url)
        name = choice.tokenizer or choice.name
        try:
            from transformers import AutoTokenizer

            tok = await asyncio.to_thread(AutoTokenizer.from_pretrained, name, local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any loader failure is the same news for the page
            raise ModelError(
                f"tokenizer {name!r} cannot be loaded ({type(exc).__name__}); give a local tokenizer folder "
                "in the tokenizer field (no model hub is reached from here)"
            ) from None
        # One retry, not three: a server that went away is reported in seconds, not minutes. The key comes from the
        # server's environment ($OPENAI_API_KEY), never from the page, and `choice.url` is one given at launch.
        endpoint = EndpointConfig(base_urls=[choice.url], timeout=120.0, retries=1)
        engine = OpenAIEngine(
            endpoint.base_urls, choice.name, tok, api_key=endpoint.api_key(), timeout=endpoint.timeout, retries=1
        )
        return Engine(engine, tok, f"{choice.name} at {choice.url}", owned=True)

    async def _reference(self, agent_type: str, question: str, golds: list[str]) -> Engine:
        if not reference_policy_available():
            raise ModelError("the scripted reference policy is not installed in this version")
        from ..agent.reference_policy import NAME, ReferencePolicy

        tiny = await self._hf_engine(str(self.tiny_dir), tiny=True)  # its tokenizer: any tokenizer round-trips text
        answers = {question: golds} if golds else None
        policy = ReferencePolicy(tiny.tokenizer, agent_type, answers)
        return Engine(policy, tiny.tokenizer, NAME)


def _load_hf(path: Path, tiny: bool):
    from ..engines.hf import HFEngine

    if tiny:
        from ..engines.tiny_model import ensure_tiny_model

        ensure_tiny_model(path)
    if not (path / "config.json").is_file():
        raise ModelError(f"model path {path}: no config.json there; give a folder holding a transformers model")
    try:
        return HFEngine(str(path))
    except Exception as exc:  # noqa: BLE001 - a broken folder is reported, the server goes on
        raise ModelError(f"model {path} cannot be loaded: {type(exc).__name__}: {str(exc)[:300]}") from None


async def _check_server(url: str) -> None:
    """Any HTTP answer from `{url}/models` will do; no answer at all is reported before the run starts."""
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            await client.get(url.rstrip("/") + "/models")
    except httpx.HTTPError as exc:
        raise ModelError(
            f"model server {url} is not reachable ({type(exc).__name__}: {str(exc)[:200] or 'no answer'})"
        ) from None
