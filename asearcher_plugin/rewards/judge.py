"""LLM-as-judge through any OpenAI-compatible chat endpoint, in one of two verdict formats.

- `verdict` (default): the judge replies `{"verdict": "correct" | "incorrect", "reason": "..."}`.
- `asearcher`: ASearcher's `DefaultJudge`, so scores compare with its published LLM-as-judge numbers:
  the reply is `{"rationale": ..., "judgement": "Correct" | "Incorrect"}`, read as ASearcher reads it
  (the text of a ```json fence, as JSON, else as a Python literal, else by substring), with its
  sampling (temperature 0.6, 1,024 tokens) and the prediction cut at its first `</`, then to 500 characters.

The prompt is a `str.format` template file (`judge_templates/<format>.txt`, or the user's own). Requests go
through the shared endpoint client (`local_retriever.endpoints`): the judge's `base_urls` share the load, a
dead URL cools down for every later verdict, and endpoint errors and replies without a verdict are retried
with backoff within one budget of `retries`; after that `JudgeUnavailable` is raised and the caller falls
back to F1 and flags it (ASearcher retries forever or scores 0). This is the project's one judge: eval, the
reward and data_synth's grading of tool-free answers all ask it.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import httpx
import orjson

from local_retriever.endpoints import BadReply, EndpointError, EndpointUnavailable, URLPool

from ..utils.disk_cache import DiskCache
from ..utils.template_check import TemplateError
from ..utils.template_check import check_template as _check
from ..utils.text import scrub

log = logging.getLogger(__name__)
TEMPLATE_DIR = Path(__file__).with_name("judge_templates")
# `gt_answer` and `pred_answer` are ASearcher's names, so its JUDGE_PROMPT text works unchanged as a template.
FIELDS = {
    "question": "the question",
    "golds": "the gold answers",
    "gt_answer": "the gold answers",
    "prediction": "the predicted answer",
    "pred_answer": "the predicted answer",
}


@dataclass(frozen=True)
class FormatDefaults:
    template: str
    temperature: float
    max_tokens: int
    prediction_max_chars: int  # 0: the whole prediction
    prediction_cut_at: str  # "": no cut


FORMATS = {
    "verdict": FormatDefaults("verdict.txt", 0.0, 256, 0, ""),
    "asearcher": FormatDefaults("asearcher.txt", 0.6, 1024, 500, "</"),
}


@dataclass(frozen=True)
class Verdict:
    correct: bool
    rationale: str = ""


class JudgeUnavailable(RuntimeError):
    """No verdict within the retries; `no_verdict` when the last failure was a reply without one (the
    endpoint itself answered), not an endpoint error."""

    def __init__(self, message: str, no_verdict: bool = False):
        super().__init__(message)
        self.no_verdict = no_verdict


def check_template(text: str, source: str) -> str:
    """`text` if it is a format string naming only known fields, with the question, gold and prediction."""
    return _check(text, source, FIELDS, ({"question"}, {"golds", "gt_answer"}, {"prediction", "pred_answer"}))


@lru_cache(maxsize=32)
def load_template(path: str) -> str:
    """A judge prompt template, read verbatim (UTF-8) and checked."""
    p = Path(path)
    if not p.is_file():
        raise TemplateError(f"{path}: judge prompt template not found")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TemplateError(f"{path}: cannot read the template: {exc}") from None
    return check_template(text, str(path))


# The default format's prompt; data_synth's grader formats it with question, golds and prediction.
JUDGE_PROMPT = load_template(str(TEMPLATE_DIR / FORMATS["verdict"].template))


@dataclass(frozen=True)
class Settings:
    format: str
    template: str
    temperature: float
    top_p: float | None
    max_tokens: int
    prediction_max_chars: int
    prediction_cut_at: str


def settings(cfg) -> Settings:
    """The config's judge settings, each unset one taken from its verdict format's defaults."""
    fmt = getattr(cfg, "verdict_format", "verdict")
    base = FORMATS[fmt]

    def pick(name: str, default):
        value = getattr(cfg, name, None)
        return default if value is None else value

    path = getattr(cfg, "prompt_template", None) or str(TEMPLATE_DIR / base.template)
    return Settings(
        fmt,
        load_template(path),
        float(pick("temperature", base.temperature)),
        getattr(cfg, "top_p", None),
        int(pick("max_tokens", base.max_tokens)),
        int(pick("prediction_max_chars", base.prediction_max_chars)),
        str(pick("prediction_cut_at", base.prediction_cut_at)),
    )


def render(question: str, prediction: str, golds: list[str], s: Settings) -> str:
    if s.prediction_cut_at:
        prediction = prediction.split(s.prediction_cut_at, 1)[0]
    if s.prediction_max_chars:
        prediction = prediction[: s.prediction_max_chars]
    # ASearcher shows a single gold answer as itself and several as a Python list.
    shown = golds[0] if s.format == "asearcher" and len(golds) == 1 else str(golds)
    return s.template.format(
        question=question, golds=shown, gt_answer=shown, prediction=prediction, pred_answer=prediction
    )


def parse_verdict_reply(text: str) -> Verdict | None:
    """The `verdict` format: the first {...} span of the reply as JSON; None without a clear verdict."""
    match = re.search(r"\{.*\}", text or "", re.S)
    if not match:
        return None
    try:
        obj = orjson.loads(match.group(0))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    verdict = str(obj.get("verdict", "")).strip().lower()
    if verdict not in ("correct", "incorrect"):
        return None
    return Verdict(verdict == "correct", str(obj.get("reason", "")))


def parse_verdict(text: str) -> bool | None:
    verdict = parse_verdict_reply(text)
    return None if verdict is None else verdict.correct


def parse_asearcher_judgement(text: str) -> Verdict | None:
    """ASearcher's reading of a reply; None where it would ask again.

    The part after the last ```json (up to the next ```) is read as JSON, else as a Python literal (its
    own example has a trailing comma). A parsed object without `judgement`, or with any value other than
    "correct" (case-insensitive), is Incorrect. When nothing parses, the reply's lower-cased text is
    searched for `"judgement": "incorrect"`, then `"judgement": "correct"` or `"judgement": correct`.
    """
    text = text or ""
    body = text.split("```json")[-1].split("```")[0].strip()
    obj = None
    for parse in (json.loads, ast.literal_eval):
        try:
            obj = parse(body)
            break
        except Exception:  # noqa: BLE001 - any failure (syntax, depth, size) means "try the next reading"
            continue
    if isinstance(obj, dict):
        judgement = obj.get("judgement", "")
        if not isinstance(judgement, str):
            return None  # ASearcher's `.lower()` fails on it and the judge is asked again
        return Verdict(judgement.lower() == "correct", str(obj.get("rationale", "")))
    if obj is not None:
        # Another literal: ASearcher tests `"judgement" in obj`; a miss is Incorrect, and a hit (or a
        # number, where the test itself fails) raises there and the judge is asked again.
        try:
            return None if "judgement" in obj else Verdict(False)
        except TypeError:
            return None
    lower = text.lower()
    if '"judgement": "incorrect"' in lower:
        return Verdict(False)
    if '"judgement": "correct"' in lower or '"judgement": correct' in lower:
        return Verdict(True)
    return None


PARSERS = {"verdict": parse_verdict_reply, "asearcher": parse_asearcher_judgement}
COOLDOWN_S = 10.0


class Judge:
    """One judge as a rollout process uses it: a client over `cfg.base_urls` whose URL pool remembers cooldowns
    across verdicts, and the verdict cache (`cfg.cache_dir`); both live as long as the judge and `aclose()` ends
    them. The agent executor keeps one per event loop (HTTP clients are loop-bound). `client`: an endpoint
    client to send with instead (anything with `MultiURLClient.post_json`, e.g. data_synth's token-counting one),
    which stays its owner's."""

    def __init__(self, cfg, client=None):
        self.cfg = cfg
        self.pool = URLPool(cfg.base_urls, COOLDOWN_S)
        self._client, self._owned = client, client is None
        cache_dir = getattr(cfg, "cache_dir", None)
        self.cache = DiskCache(os.path.join(cache_dir, "judge.sqlite"), ttl=float("inf")) if cache_dir else None

    async def verdict(self, question: str, prediction: str, golds: list[str]) -> Verdict:
        """The verdict and rationale; raises JudgeUnavailable after `cfg.retries` failed attempts."""
        if self._client is None:
            self._client = self.cfg.client("judge", pool=self.pool)
        return await judge_verdict(question, prediction, golds, self.cfg, self._client, cache=self.cache)

    async def __call__(self, question: str, prediction: str, golds: list[str]) -> bool:
        return (await self.verdict(question, prediction, golds)).correct

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._owned:
            await client.aclose()


async def judge_verdict(
    question: str, prediction: str, golds: list[str], cfg, client=None, cache: DiskCache | None = None
) -> Verdict:
    """The judge's verdict and rationale; raises JudgeUnavailable after `cfg.retries` failed attempts.

    `client`: an `httpx.AsyncClient` to send with, or an endpoint client (anything with
    `MultiURLClient.post_json`); by default a client over `cfg.base_urls` for this verdict alone. `cache`: the
    verdict cache, or None for none. A `Judge` keeps both, and its cooldowns, across verdicts: use it.
    """
    # Lone surrogates (model output, dataset text) can be neither a cache key nor a JSON body.
    question, prediction, golds = scrub(question), scrub(prediction), [scrub(str(g)) for g in golds]
    s = settings(cfg)
    prompt = render(question, prediction, golds, s)
    # The rendered prompt stands for format, template, truncation, question, prediction and golds.
    key = orjson.dumps([cfg.model, s.format, prompt, s.temperature, s.top_p, s.max_tokens]).decode()
    if cache is not None:
        hit = await cache.aget(key)
        if isinstance(hit, dict) and "correct" in hit:
            return Verdict(bool(hit["correct"]), str(hit.get("rationale", "")))
    verdict = await _ask(prompt, s, cfg, client)
    log.debug(
        "judge: %s for %.200r (%s)", "correct" if verdict.correct else "incorrect", prediction, verdict.rationale
    )
    if cache is not None:
        await cache.aset(key, {"correct": verdict.correct, "rationale": verdict.rationale})
    return verdict


async def judge(question: str, prediction: str, golds: list[str], cfg) -> bool:
    """One verdict from a `Judge` made for it (its client and cache opened and closed here): for one-off calls;
    whatever judges many answers keeps a `Judge`."""
    one = Judge(cfg)
    try:
        return await one(question, prediction, golds)
    finally:
        await one.aclose()


def _reader(fmt: str):
    parse = PARSERS[fmt]

    def read(data) -> Verdict:
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):  # TypeError: JSON of another shape
            raise BadReply("reply is not a chat completion") from None
        verdict = parse(content if isinstance(content, str) else "")
        if verdict is None:
            raise BadReply("reply had no verdict")
        return verdict

    return read


async def _ask(prompt: str, s: Settings, cfg, client) -> Verdict:
    body = {
        "model": cfg.model,
        "temperature": s.temperature,
        "max_tokens": s.max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    if s.top_p is not None:
        body["top_p"] = s.top_p
    own = client is None or isinstance(client, httpx.AsyncClient)
    if own:
        client = cfg.client("judge", http=client, pool=URLPool(cfg.base_urls, COOLDOWN_S))
    try:
        return await client.post_json("/chat/completions", body, _reader(s.format))
    except EndpointError as exc:
        bad_reply = isinstance(exc, EndpointUnavailable) and exc.bad_reply
        raise JudgeUnavailable(str(exc), no_verdict=bad_reply) from None
    finally:
        if own:
            await client.aclose()
