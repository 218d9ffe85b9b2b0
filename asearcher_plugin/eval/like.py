"""`asearcher eval --like runs/a/metrics.json`: an earlier run's settings, read back from its eval card.

The card holds the whole agent config, the model (or the scripted reference policy) and its sampling, k,
and each dataset's file and the questions taken from it. What cannot be matched here (another KB, a
changed dataset file, other package versions) is named before the run starts, by comparing the card this
run will write with the earlier one.

A card is shared data, written by whoever shared it: it never picks code to import, a process to start, where a
request or a key goes, which environment variable is read, or where files are written. Those fields (`NOT_FROM_A_CARD`)
come from this machine's agent config ($ASEARCHER_CONFIG, else the defaults) and the command line (`--kb-url`, and
the model: `--hf-model` or `--base-url`), and each one the card set otherwise is named before the run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ..agent.reference_policy import NAME as REFERENCE
from ..settings.config import AgentConfig, validation_problems
from .card import differences

# Fields that differ between two runs of the same settings: where the KB listens, not what it holds.
EXPECTED = ("kb.urls", "agent_config.tools.local.urls")

# The agent config's fields a card never sets, by what they would let its author do on this machine.
NOT_FROM_A_CARD = {
    "tools.extra": "imports code",
    "tools.mcp": "starts processes and connects to servers",
    "reward.function": "imports code",
    "tools.local.urls": "chooses where the questions and searches go",
    "tools.web.serper_url": "chooses where a key goes",
    "tools.web.jina_url": "chooses where a key goes",
    "reward.judge.base_urls": "chooses where a key goes",
    "tools.web.serper_api_key_env": "chooses which environment variable is read",
    "tools.web.jina_api_key_env": "chooses which environment variable is read",
    "reward.judge.api_key_env": "chooses which environment variable is read",
    "tools.web.allow_private_hosts": "opens the URL guard",
    "tools.web.cache_dir": "chooses where files are written",
    "reward.judge.cache_dir": "chooses where files are written",
}


class LikeError(ValueError):
    pass


@dataclass
class Like:
    """An earlier run's settings, as `asearcher eval` options."""

    source: Path
    card: dict
    config: AgentConfig
    ignored: list[tuple[str, str, object]] = field(default_factory=list)  # (field, why, the card's value)
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


def _get(data, dotted: str):
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def take_from_here(agent: dict, here: AgentConfig) -> tuple[dict, list[tuple[str, str, object]]]:
    """The card's agent config with every `NOT_FROM_A_CARD` field set to `here`'s, and the fields the card set
    otherwise as (field, why, the card's value)."""
    if not isinstance(agent, dict):
        raise TypeError("agent_config is not a mapping")
    agent = json.loads(json.dumps(agent))  # a copy, never the card itself
    judge = _get(agent, "reward.judge")
    if isinstance(judge, dict) and "base_url" in judge:  # the older alias of base_urls
        judge.setdefault("base_urls", judge.pop("base_url"))
    mine = here.model_dump(mode="json")
    ignored = []
    for dotted, why in NOT_FROM_A_CARD.items():
        theirs, value = _get(agent, dotted), _get(mine, dotted)
        if theirs is not None and theirs != value:
            ignored.append((dotted, why, theirs))
        *parents, leaf = dotted.split(".")
        node = agent
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[leaf] = value
    return agent, ignored


def load_like(path: str | Path, here: AgentConfig | None = None) -> Like:
    """The settings of the run whose card is at `path`; the fields a card never sets come from `here` (this
    machine's agent config, default the defaults)."""
    source, card = read_card(path)
    try:
        agent, ignored = take_from_here(card["agent_config"], here or AgentConfig())
        config = AgentConfig.model_validate(agent)
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
            ignored=ignored,
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
    # a card never picks the weights to load or where the prompts (and a key) go: the command line does
    if kind == "transformers":
        raise LikeError(
            f"the earlier run evaluated the model {model.get('name')}: give --hf-model to evaluate it here"
        )
    if kind == "openai-compatible":
        urls = ", ".join(map(str, model.get("base_urls") or []))
        raise LikeError(
            f"the earlier run evaluated {model.get('name')!r} served at {urls}: give --base-url (and --model) of the "
            "server to use here"
        )
    raise LikeError(f"the earlier run's model engine {kind!r} is not one this version can start")


def unmatched(before: dict, now: dict) -> list[tuple[str, object, object]]:
    """Card fields this run cannot match (addresses left out: a KB on another port is the same KB; and the fields a
    card never sets, named on their own)."""
    own = {f"agent_config.{name}" for name in NOT_FROM_A_CARD}
    return [
        d
        for d in differences(before, now)
        if d[0] not in EXPECTED and not any(d[0] == f or d[0].startswith(f + ".") for f in own)
    ]
