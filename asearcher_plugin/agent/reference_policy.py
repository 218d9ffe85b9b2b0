"""The scripted reference policy: an `llm_engine` that is not a model, for seeing the agent work on a CPU.

`ReferencePolicy(tokenizer, agent_type, answers=...)` answers `await generate(token_ids, sampling_params)`
as a model would, in the real action format of `agent_type`: it decodes the transcript the agent built,
and on each call writes a short `<think>` and one action. It searches for the question, reads the
top-ranked page (`<access>`, for agent types that have it; Search-R1 answers from the results), and
answers from what it read: with an answer key (question -> gold answers) it answers with the gold
answer that the text it read contains, else with the sentence-fragment that best matches the
question. A seeded fraction of (question, seed) pairs is answered wrong on purpose, with another
phrase from the text, so scores, Avg@k and Pass@k differ from 1. Every choice is a function of the
transcript, the policy's seed and `sampling_params.seed`, so a run is reproduced exactly.

It needs no tools of its own: the agent runs the searches and page reads against the KB (or the web)
and shows them to it, exactly as it shows them to a model. It is named "scripted reference policy"
wherever it appears (`NAME`), so its scores are never taken for a model's.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping, Sequence
from string import Formatter

from ..engines.types import CompletionOutput, Logprob, RequestOutput
from ..rewards.reward import normalize_answer
from .actions import STOP_STRINGS
from .prompts import ALLOWED_ACTIONS, template_for

NAME = "scripted reference policy"
DEFAULT_WRONG_RATE = 0.25

_INFO = re.compile(r"<(?:information|tool_response)>(.*?)</(?:information|tool_response)>", re.S)
_OWN_TURNS = re.compile(r"<(think|search|access|answer|tool_call)>.*?</\1>", re.S)
_CALLED = re.compile(r'<tool_call>\s*\{"name": "(\w+)"')
_TOP_URL = (
    re.compile(r"Doc 1\(Title: [^\n]*?\) \[([^\]\n]+)\]"),  # native search results
    re.compile(r"\[Doc 1\]\(([^)\n]+)\):"),  # ASearcher's blocks
)
# Result and page headers the agent writes: never mistaken for part of what was read.
_HEADERS = re.compile(r"Doc \d+\(Title: [^\n]*?\) \[[^\]\n]*\]|\[Doc \d+\]\([^)\n]*\):|>>>> Page [^\n]*?>>>>[^\n]*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"\w+")
_PHRASE = re.compile(r"\b(?:[A-Z][\w'-]+(?:\s+(?:of|the|de|von|al-)?\s*[A-Z][\w'-]+)*|\d[\d,.]*)\b")
_STOPWORDS = set(
    "a an the of in on at to for from by with and or is was were are be been which what who whom whose when where "
    "why how did does do this that these those it its as into than".split()
)


class ReferencePolicy:
    """The scripted reference policy (see the module docstring); `generate` has the engine contract.

    `tokenizer`: the one the agent encodes transcripts with (any HF tokenizer). `agent_type` and
    `prompt_template`: as in the agent config, so the question can be found in the prompt. `answers`: an
    optional answer key, question -> gold answers (without one it answers extractively). `wrong_rate`: the
    fraction of (question, seed) pairs answered wrong on purpose; `seed` picks which.
    """

    name = NAME

    def __init__(
        self,
        tokenizer,
        agent_type: str = "asearcher",
        answers: Mapping[str, Sequence[str]] | None = None,
        wrong_rate: float = DEFAULT_WRONG_RATE,
        seed: int = 0,
        prompt_template: str | None = None,
    ):
        if agent_type not in ALLOWED_ACTIONS:
            raise ValueError(f"unknown agent_type {agent_type!r}; known: {', '.join(ALLOWED_ACTIONS)}")
        if not 0.0 <= wrong_rate <= 1.0:
            raise ValueError(f"wrong_rate must be within [0, 1], got {wrong_rate}")
        self.tokenizer = tokenizer
        self.agent_type = agent_type
        self.allowed = ALLOWED_ACTIONS[agent_type]
        self.wrong_rate = wrong_rate
        self.seed = seed
        self.answers = {_key(q): [str(a) for a in golds] for q, golds in (answers or {}).items()}
        self._prompt = _template_regex(template_for(agent_type, prompt_template))

    @classmethod
    def for_items(cls, tokenizer, config, items: Sequence[dict], **kwargs) -> ReferencePolicy:
        """A policy for an agent config, with the answer key of eval items (`question`, `golden_answers`)."""
        answers = {item["question"]: item["golden_answers"] for item in items}
        return cls(tokenizer, config.agent_type, answers, prompt_template=config.prompt_template, **kwargs)

    def describe(self) -> dict:
        """What the eval card records about this engine."""
        return {"engine": NAME, "wrong_rate": self.wrong_rate, "seed": self.seed, "answer_key": bool(self.answers)}

    async def generate(self, prompt_token_ids: list[int], sampling_params) -> RequestOutput:
        text = self.tokenizer.decode(list(prompt_token_ids), skip_special_tokens=False)
        stops = [s for s in (getattr(sampling_params, "stop", None) or []) if s]
        reply = self.reply(text, stops, getattr(sampling_params, "seed", None))
        return self._output(prompt_token_ids, reply, sampling_params, stops)

    def reply(self, transcript: str, stops: Sequence[str] = (), sample_seed: int | None = None) -> str:
        """The text of the next turn, given the transcript so far."""
        question, history = self._split(transcript)
        if self.agent_type == "tool-calls":
            return self._tool_calls_reply(question, history, sample_seed)
        if stops and all(s not in STOP_STRINGS for s in stops) and "</think>" in stops:
            return self._summary(question, history) + "</think>"
        opening = "" if _think_open(transcript) else "<think>"
        searched = _count(history, "search") > 0
        accessed = _count(history, "access") > 0
        if not searched:
            return f"{opening}I will search for the question.</think>\n<search> {question} </search>"
        url = _top_url(history)
        if "access" in self.allowed and not accessed and url:
            return f"{opening}The top result looks best; I will read it.</think>\n<access> {url} </access>"
        answer, note = self._answer(question, history, sample_seed)
        return f"{opening}{note}</think>\n<answer> {answer} </answer>"

    def _tool_calls_reply(self, question: str, history: str, sample_seed: int | None) -> str:
        """agent_type tool-calls: the same plan, each call written as the tokenizer's chat template writes it."""
        for end in getattr(self.tokenizer, "all_special_tokens", None) or []:
            question = question.split(end)[0].strip() if end else question
        called = _CALLED.findall(_INFO.sub(" ", history))
        if "search" not in called:
            return self._call_text("I will search for the question.", "search", {"query": question})
        url = _top_url(history)
        if "access" not in called and url:
            return self._call_text("The top result looks best; I will read it.", "access", {"url": url})
        answer, note = self._answer(question, history, sample_seed)
        return f"<think>{note}</think>\n<answer> {answer} </answer>"

    def _call_text(self, thought: str, name: str, arguments: dict) -> str:
        """One tool call as the chat template renders an assistant message that makes it, up to its end of turn."""
        probe = [{"role": "user", "content": "q"}]
        head = self.tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        call = {"type": "function", "function": {"name": name, "arguments": arguments}}
        message = {"role": "assistant", "content": f"<think>{thought}</think>", "tool_calls": [call]}
        full = self.tokenizer.apply_chat_template([*probe, message], tokenize=False)
        body = full[len(head) :] if full.startswith(head) else full
        eos = getattr(self.tokenizer, "eos_token", None)
        return body[: body.rfind(eos)] if eos and eos in body else body.rstrip()

    def _split(self, transcript: str) -> tuple[str, str]:
        m = self._prompt.search(transcript)
        if not m:
            return transcript.strip()[-500:], ""
        question = " ".join(m.group("question").split())
        if "history" in m.groupdict():  # the reasoning agent: the prompt holds the history
            history = m.group("history")
            return question, "" if history.strip() == "(none yet)" else history
        return question, transcript[m.end() :]

    def _summary(self, question: str, history: str) -> str:
        """A summary turn (ASearcher's blocks): what later calls keep of a block they no longer see whole."""
        blocks = _INFO.findall(history)
        last = blocks[-1] if blocks else ""
        found = self._gold_in(question, last)
        best = _best_sentence(question, last)
        said = f' It mentions "{found}".' if found else ""
        return f"Scripted reference policy notes:{said} Most relevant: {best[:300]}\n"

    def _answer(self, question: str, history: str, sample_seed: int | None) -> tuple[str, str]:
        # what the tools returned, never its own turns: after a failed search they would be all there is
        evidence = "\n".join(_INFO.findall(history)) + "\n" + _OWN_TURNS.sub(" ", history)
        found = self._gold_in(question, evidence)
        truth = found or _extract(question, evidence)
        if self._wrong_on_purpose(question, sample_seed):
            decoy = _decoy(question, evidence, [truth, *self.answers.get(_key(question), [])])
            return decoy, "Scripted reference policy: this answer is wrong on purpose."
        if found:
            return found, "What I read contains the answer."
        return truth, "I answer with the passage that best matches the question."

    def _gold_in(self, question: str, text: str) -> str | None:
        normal = f" {normalize_answer(text)} "
        for gold in self.answers.get(_key(question), []):
            g = normalize_answer(gold)
            if g and f" {g} " in normal:
                return gold
        return None

    def _wrong_on_purpose(self, question: str, sample_seed: int | None) -> bool:
        digest = hashlib.sha256(f"{self.seed}|{sample_seed}|{_key(question)}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.wrong_rate

    def _output(self, prompt_ids, reply: str, params, stops: Sequence[str]) -> RequestOutput:
        finish, stop_reason = "stop", next((s for s in stops if reply.endswith(s)), None)
        if stop_reason is None:  # an answer with no stop string asked for: ends with EOS, as a model would
            eos = getattr(self.tokenizer, "eos_token", None)
            reply += eos or ""
        ids = self.tokenizer(text=reply, add_special_tokens=False)["input_ids"]
        cap = getattr(params, "max_tokens", None)
        if cap is not None and len(ids) > cap:  # the turn budget binds us as it binds a model
            ids, finish, stop_reason = ids[:cap], "length", None
            reply = self.tokenizer.decode(ids, skip_special_tokens=False)
        if stop_reason is not None and not getattr(params, "include_stop_str_in_output", False):
            reply = reply[: reply.rfind(stop_reason)]
        logprobs = [{t: Logprob(0.0, rank=1)} for t in ids] if getattr(params, "logprobs", None) is not None else None
        out = CompletionOutput(0, reply, ids, finish, stop_reason, logprobs, 0.0 if logprobs else None)
        return RequestOutput(uuid.uuid4().hex, list(prompt_ids), [out])


def _key(question: str) -> str:
    return " ".join(str(question).split()).rstrip("?").strip().lower()


def _template_regex(template: str) -> re.Pattern:
    """The prompt template as a pattern: `{question}` (and `{history}`) captured, `{current_date}` any text."""
    pieces = list(Formatter().parse(template))
    parts = []
    for i, (literal, field, _, _) in enumerate(pieces):
        parts.append(r"\s*".join(re.escape(w) for w in literal.split()) if literal.strip() else r"\s*")
        last = i == len(pieces) - 1 or not any(lit.strip() for lit, *_ in pieces[i + 1 :])
        if field == "question":  # a question that ends the template runs to the end of its line
            parts.append(r"\s*(?P<question>[^\n]*)" if last else r"\s*(?P<question>.*?)\s*")
        elif field == "history":
            parts.append(r"\s*(?P<history>.*)\s*")
        elif field is not None:
            parts.append(r".*?")
    return re.compile("".join(parts), re.S)


def _think_open(text: str) -> bool:
    return text.rfind("<think>") > text.rfind("</think>")


def _count(history: str, tag: str) -> int:
    visible = re.sub(r"<think>.*?</think>|<information>.*?</information>", " ", history, flags=re.S)
    return len(re.findall(rf"<{tag}>", visible))


def _top_url(history: str) -> str | None:
    blocks = _INFO.findall(history)
    for block in reversed(blocks):
        for pattern in _TOP_URL:
            m = pattern.search(block)
            if m:
                return m.group(1).strip()
    return None


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def _best_sentence(question: str, text: str) -> str:
    text, q = _HEADERS.sub(" ", text), _words(question)
    sentences = [s.strip() for s in _SENTENCE.split(text) if len(s.strip()) > 20]
    if not sentences:
        return ""
    return max(sentences, key=lambda s: (len(q & _words(s)), -len(s)))


def _extract(question: str, text: str) -> str:
    """The first name or number in the best-matching sentence that the question does not already hold."""
    sentence, q = _best_sentence(question, text), _words(question)
    for m in _PHRASE.finditer(sentence):
        if not _words(m.group(0)) <= q:
            return m.group(0).strip(" ,.")
    return " ".join(sentence.split()[:5]) or "unknown"


def _decoy(question: str, text: str, avoid: Sequence[str]) -> str:
    """Another name or number from what was read: a plausible answer that is not the right one."""
    banned = {normalize_answer(a) for a in avoid if a}
    q = _words(question)
    for m in _PHRASE.finditer(_best_sentence(question, text) + "\n" + _HEADERS.sub(" ", text)):
        phrase = m.group(0).strip(" ,.")
        n = normalize_answer(phrase)
        if n and n not in banned and not any(b and (b in n or n in b) for b in banned) and not _words(phrase) <= q:
            return phrase
    return "unknown"
