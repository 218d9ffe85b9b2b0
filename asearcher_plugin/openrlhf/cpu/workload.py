"""The scripted scheduling workload of the CPU harness: a turn plan per trajectory, decoded by the real engine.

Each trajectory draws its number of turns from a Pareto distribution (scale `turns_scale`, shape `pareto_alpha`)
clipped to [1, max_turns]: most are short, a few long, as ASearcher's are. Every turn is real work for the vLLM
engine: it reads the turn's scripted tokens after the growing trajectory and decodes exactly `tokens_per_turn` more
(prefill, continuous batching, pauses for weight updates included). The tokens the agent keeps are the scripted
ones, with the log-probs the engine computed for them (vLLM's prompt log-probs), so the trainer's IS correction
sees the engine's own numbers, as for sampled tokens. They are: a real KB search with the question for
every turn but the last, then an answer. The plan of a trajectory rides in its first action (`<think>plan
N</think>`); the searches it counts include the example search in the packaged prompt templates, so a trajectory
searches fewer times than its plan. So what is measured is how well a scheduler keeps engines busy with
trajectories of unequal length, not what a random model happens to write. `scripted.py` is the agent file that
uses it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import time
from dataclasses import dataclass

from asearcher_plugin.engines.types import CompletionOutput, Logprob, RequestOutput, with_overrides

from .switches import switches

_PLAN = re.compile(r"<think>plan (\d+)</think>")


@dataclass
class Workload:
    max_turns: int = 64
    turns_scale: float = 2.0
    pareto_alpha: float = 1.0
    tokens_per_turn: int = 24
    # Seconds a turn takes besides the real decode: a full-size model's decode of hundreds of tokens, which costs
    # about the same however many requests share a GPU engine within its batch capacity (a CPU decode does not).
    turn_seconds: float = 0.0
    query_words: int = 12  # words of the question sent as the search query (the kept tokens are trained on)
    # After each search, open its first result (ASearcher's observation format: `[Doc 1](url):`) and, when the agent
    # asks for a summary of what it was shown (stop `</think>`), write one. Opening a page does not use up the plan.
    read_pages: bool = False
    seed: int = 0

    @classmethod
    def from_run_config(cls) -> Workload:
        fields = switches().workload
        if fields is None:
            raise RuntimeError(
                "the scripted agent needs cpu_harness.workload in the run config (Workload's fields, e.g. --set "
                "'cpu_harness.workload={max_turns: 8, turn_seconds: 1.0}')"
            )
        return cls(**fields)


class ScriptedEngine:
    """Stands between the agent and the real engine: the engine decodes, the script decides what was said."""

    def __init__(self, engine, workload: Workload, tokenizer):
        self.engine, self.w, self.tokenizer = engine, workload, tokenizer
        self.started: dict[str, int] = {}  # trajectories begun per question: the k-th sample of a group
        self.busy = BusyClock()

    def plan(self, question: str) -> int:
        """Drawn from (seed, question, sample number), so every mode of a benchmark runs the same workload
        (OpenRLHF sends all samples of a prompt to one engine)."""
        k = self.started[question] = self.started.get(question, -1) + 1
        rng = random.Random(f"{self.w.seed}:{question}:{k}")
        return min(self.w.max_turns, max(1, math.ceil(self.w.turns_scale * rng.paretovariate(self.w.pareto_alpha))))

    async def generate(self, prompt_token_ids: list[int], params) -> RequestOutput:
        text = self.tokenizer.decode(prompt_token_ids)
        found = _PLAN.search(text)
        question = text.split("User:")[-1].split("\n")[0].strip() or "history"
        turns_left = (int(found.group(1)) if found else self.plan(question)) - text.count("</search>")
        head = "" if found else f"<think>plan {turns_left}</think>"
        query = " ".join(question.split()[: self.w.query_words])
        action = f"<search>{query}</search>" if turns_left > 1 else "<answer>unknown</answer>"
        if self.w.read_pages and list(params.stop or []) == ["</think>"]:
            head, action = "", "Noted.</think>"
        elif self.w.read_pages and (url := _opened_next(text)):
            head, action = "", f"<access>{url}</access>"
        ids = self.tokenizer(head + action, add_special_tokens=False)["input_ids"]
        ids = ids[: max(1, params.max_tokens or len(ids))]
        n = self.w.tokens_per_turn
        want = params.logprobs is not None
        # The engine reads the scripted tokens as part of its prompt (their log-probs under the weights it holds,
        # as the agent's training needs them) and decodes n tokens after them: the turn's real work.
        # No detokenizing: nothing reads the engine's text, and vLLM 0.29 fails decoding the prompt log-probs' ids.
        decode = with_overrides(
            params,
            max_tokens=n,
            min_tokens=n,
            stop=None,
            logprobs=None,
            prompt_logprobs=0 if want else None,
            detokenize=False,
        )
        with self.busy:
            done = await self.engine.generate(list(prompt_token_ids) + ids, decode)
            if self.w.turn_seconds:
                await asyncio.sleep(self.w.turn_seconds)
        logprobs = _scripted_logprobs(done, ids) if want else None
        stop = action[action.rfind("</") :]
        out = CompletionOutput(0, self.tokenizer.decode(ids), ids, "stop", stop, logprobs, 0.0)
        return RequestOutput("", list(prompt_token_ids), [out])


def _scripted_logprobs(done, ids: list[int]) -> list[dict]:
    """The engine's log-prob of each scripted token, from the prompt log-probs of the request that read them."""
    given = list(getattr(done, "prompt_logprobs", None) or [])[-len(ids) :]
    bad = [i for i, (t, lp) in enumerate(zip(ids, given)) if not lp or t not in lp]
    if len(given) != len(ids) or bad:
        at = f"; at scripted token {bad[0]} (id {ids[bad[0]]}) it gave {given[bad[0]]!r}" if bad else ""
        raise RuntimeError(
            f"the engine returned prompt log-probs for {len(given) - len(bad)} of the {len(ids)} scripted tokens"
            f"{at}: the scripted workload needs an engine that honours SamplingParams.prompt_logprobs"
        )
    return [{t: Logprob(lp[t].logprob, rank=1)} for t, lp in zip(ids, given)]


_FIRST_RESULT = re.compile(r"\[Doc 1\]\((\S+?)\):")


def _opened_next(text: str) -> str | None:
    """The first result of the last search, if the model has not opened anything since that search."""
    last = text.rfind("</search>")
    if last < 0 or text.rfind("<access>") > last:
        return None
    found = _FIRST_RESULT.search(text, last)
    return found.group(1) if found else None


class BusyClock:
    """The intervals with at least one request decoding, appended to cpu_harness.engine_stats/engine-PID.jsonl."""

    def __init__(self):
        self.active, self.since = 0, 0.0
        self.folder = switches().engine_stats

    def __enter__(self):
        if self.active == 0:
            self.since = time.time()
        self.active += 1

    def __exit__(self, *exc):
        self.active -= 1
        if self.active == 0 and self.folder:
            with open(os.path.join(self.folder, f"engine-{os.getpid()}.jsonl"), "a") as fh:
                fh.write(json.dumps([self.since, time.time()]) + "\n")
