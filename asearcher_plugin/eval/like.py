"""`asearcher eval --like runs/a/metrics.json`: an earlier run's settings, read back from its eval card.

The card holds the whole agent config, the model (or the scripted reference policy) and its sampling, k,
and each dataset's file and the questions taken from it. What cannot be matched here (another KB, a
changed dataset file, other package versions) is named before the run starts, by comparing the card this
run will write with the earlier one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ..agent.reference_policy import NAME as REFERENCE
from ..config import AgentConfig, validation_problems
from .card import differences

# Fields that differ between two runs of the same settings: where the KB listens, not what it holds.
EXPECTED = ("kb.urls", "agent_config.tools.local.urls")


class LikeError(ValueError):
    pass


@dataclass
class Like:
    """An earlier run's settings, as `asearcher eval` options."""

    source: Path
    card: dict
    config: AgentConfig
    datasets: list[str] = field(default_factory=list)
    named: list[tuple[Path, str]] = field(default_factory=list)
    limit: int | None = None
    question_key: str | None = None
    answer_key: str | None = None
    k: int = 1
    temperature: float = 0.6
    top_p: float = 0.95
    max_length: int = 8192


def read_card(path: str | Path) -> tuple[Path, dict]:
    """The eval card of a run: `path` is its metrics.json or its folder."""
    p = Path(path)
    p = p / "metrics.json" if p.is_dir() else p
    if not p.is_file():
        raise LikeError(f"--like {path}: no such metrics.json")
    try:
        card = json.loads(p.read_text()).get("card")
    except (ValueError, AttributeError) as exc:
        raise LikeError(f"--like {p}: not a metrics file ({exc})") from None
    if not isinstance(card, dict):
        raise LikeError(f"--like {p}: it has no eval card (written by a version before eval cards); nothing to copy")
    return p, card


def load_like(path: str | Path) -> Like:
    source, card = read_card(path)
    try:
        config = AgentConfig.model_validate(card["agent_config"])
        model, data = card["model"], card["datasets"]
        sampling = model["sampling"]
        like = Like(
            source,
            card,
            config,
            limit=data.get("limit"),
            question_key=data.get("question_key"),
            answer_key=data.get("answer_key"),
            k=int(card["k"]),
            temperature=float(sampling["temperature"]),
            top_p=float(sampling["top_p"]),
            max_length=int(sampling["max_length"]),
        )
        files = data["files"]
    except ValidationError as exc:
        raise LikeError(f"--like {source}: its agent config is not valid here: {validation_problems(exc)}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise LikeError(f"--like {source}: its eval card lacks {exc} (an incomplete card)") from None
    for name, entry in files.items():
        spec = entry.get("source")
        if spec == "sample":
            like.datasets.append("sample")
            continue
        if not spec or not Path(spec).is_file():
            raise LikeError(f"--like {source}: dataset {name!r} was read from {spec}, which does not exist here")
        if entry.get("positional_ids"):
            like.named.append((Path(spec), name))
        else:
            like.datasets.append(spec)
    return like


def make_engine_like(model: dict, config: AgentConfig, items: list[dict], tokenizer: str | None = None):
    """`(engine, tokenizer)` as the earlier run had them; `tokenizer` replaces the recorded one."""
    from transformers import AutoTokenizer

    from ..engines import make_engine

    kind = model.get("engine")
    if kind == REFERENCE:
        tok = AutoTokenizer.from_pretrained(tokenizer or model["tokenizer"])
        from ..agent.reference_policy import ReferencePolicy

        policy = ReferencePolicy.for_items(
            tok,
            config,
            items if model.get("answer_key", True) else [],
            wrong_rate=model["wrong_rate"],
            seed=model["seed"],
        )
        return policy, tok
    if kind == "transformers":
        return make_engine(model["name"])
    if kind == "openai-compatible":
        return make_engine(None, model["base_urls"], model["name"], tokenizer or model.get("tokenizer"))
    raise LikeError(f"the earlier run's model engine {kind!r} is not one this version can start")


def unmatched(before: dict, now: dict) -> list[tuple[str, object, object]]:
    """Card fields this run cannot match (addresses left out: a KB on another port is the same KB)."""
    return [d for d in differences(before, now) if d[0] not in EXPECTED]
