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

_PLAN = re.compile(r"<think>plan (\d+)(?: hold (\d+))?</think>")


@dataclass
class Workload:
    max_turns: int = 64
    turns_scale: float = 2.0
    pareto_alpha: float = 1.0
    tokens_per_turn: int = 24
    # Seconds a turn takes besides the real decode: a full-size model's decode of hundreds of tokens (see
    # FullSizeDecode for how it shares the engine). A CPU decode of the tiny model does not stand for it.
    turn_seconds: float = 0.0
    # Full-size decodes an engine runs at full speed at once; beyond, each runs at capacity / n of it (None: no
    # limit, the flat model). Counted per engine, over the turns in their full-size decode.
    capacity: int | None = None
    query_words: int = 12  # words of the question sent as the search query (the kept tokens are trained on)
    # After each search, open its first result (ASearcher's observation format: `[Doc 1](url):`) and, when the agent
    # asks for a summary of what it was shown (stop `</think>`), write one. Opening a page does not use up the plan.
    read_pages: bool = False
    # The first `hold_first` trajectories begun on an engine plan at least 4 turns and wait, before their answer,
    # until the engine has taken `hold_updates` weight updates since they began: trajectories whose early turns are
    # stale by a known number of versions on any machine, whatever its speed (a wait of at most HOLD_TIMEOUT_S).
    hold_first: int = 0
    hold_updates: int = 0
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


def draw_turns(rng: random.Random, scale: float, alpha: float, max_turns: int) -> int:
    """A trajectory's number of turns: Pareto (`scale`, shape `alpha`) rounded up, clipped to [1, max_turns]."""
    return min(max_turns, max(1, math.ceil(scale * rng.paretovariate(alpha))))


def plan_turns(w: Workload, question: str, k: int) -> int:
    """The turns of the k-th sample of `question`: drawn from (seed, question, k) alone, so every mode of a
    benchmark, and its simulation (`benchmarks/streaming_speedup.py`), runs the same trajectories."""
    return draw_turns(random.Random(f"{w.seed}:{question}:{k}"), w.turns_scale, w.pareto_alpha, w.max_turns)


def scripted_turns(plan: int, example_searches: int) -> int:
    """The turns ScriptedEngine takes for a trajectory planned `plan` turns in a prompt whose instructions show
    `example_searches` closed `<search>` examples. Each call counts the examples among the searches made, and the
    first call's count also goes into the plan it writes down, so each example shortens the trajectory twice (the
    asearcher template shows one: a plan of 32 takes 30 turns). What the published runs ran, so kept."""
    written = plan - example_searches  # the first call searches if more than one turn is left of it
    if written <= 1:
        return 1
    return max(1, written - example_searches - 1) + 1  # later calls search while written - (examples + made) > 1


def question_of(prompt: str) -> str:
    """The question of an agent prompt, as the scripted engine reads it: the rest of the last `User:` line."""
    return prompt.split("User:")[-1].split("\n")[0].strip()


class ScriptedEngine:
    """Stands between the agent and the real engine: the engine decodes, the script decides what was said."""

    def __init__(self, engine, workload: Workload, tokenizer):
        self.engine, self.w, self.tokenizer = engine, workload, tokenizer
        self.started: dict[str, int] = {}  # trajectories begun per question: the k-th sample of a group
        self.busy = BusyClock()
        self.decoder = FullSizeDecode(engine, workload.capacity)
        self.begun = 0
        self.updates = WeightUpdates(engine) if workload.hold_first else None

    def plan(self, question: str) -> int:
        """Drawn from (seed, question, sample number), so every mode of a benchmark runs the same workload
        (OpenRLHF sends all samples of a prompt to one engine)."""
        k = self.started[question] = self.started.get(question, -1) + 1
        return plan_turns(self.w, question, k)

    async def generate(self, prompt_token_ids: list[int], params, calls: list | None = None) -> RequestOutput:
        """`calls`, when given, gets `[version, tokens]` for this call (see `CallVersions`)."""
        text = self.tokenizer.decode(prompt_token_ids)
        found = _PLAN.search(text)
        question = question_of(text) or "history"
        if found:
            plan, hold = int(found.group(1)), int(found.group(2) or 0)
        else:
            plan, hold = self.plan(question), 0
            if self.begun < self.w.hold_first:
                plan, hold = max(plan, 4), self.updates.count + self.w.hold_updates
            self.begun += 1
        turns_left = plan - text.count("</search>")
        head = "" if found else f"<think>plan {turns_left}{f' hold {hold}' if hold else ''}</think>"
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
        read = list(prompt_token_ids) + ids
        if hold and turns_left <= 1:
            await self.updates.reach(hold)
        if calls is not None:  # the engine reads the scripted tokens now, under the weights it holds now
            calls.append([getattr(self.engine, "asearcher_weight_version", None), len(ids)])
        with self.busy:
            done = await self.engine.generate(read, decode)
            if want and (getattr(done, "num_cached_tokens", None) or 0) >= len(prompt_token_ids):
                # vLLM computes prompt log-probs only past what its prefix cache served and leaves the entries
                # before unset; here the cache held the prompt to the scripted tokens (another trajectory sent the
                # same text), so they are read again past the cache. `skip_reading_prefix_cache`, vLLM's own guard
                # for prompt log-probs, stays off otherwise: it would prefill every turn's whole context
                done = await self.engine.generate(read, with_overrides(decode, skip_reading_prefix_cache=True))
            if self.w.turn_seconds:
                await self.decoder.run(self.w.turn_seconds)
        logprobs = _scripted_logprobs(done, ids) if want else None
        stop = action[action.rfind("</") :]
        out = CompletionOutput(0, self.tokenizer.decode(ids), ids, "stop", stop, logprobs, 0.0)
        return RequestOutput("", list(prompt_token_ids), [out])


class CallVersions:
    """The scripted engine as one trajectory calls it: per model call, `[version, tokens]`, the weight version the
    rollout actor held when the engine read the call's tokens (`actors.EngineVersion`; None outside the harness)
    and how many it produced (the ones the trainer's loss covers)."""

    def __init__(self, engine: ScriptedEngine):
        self.engine, self.calls = engine, []

    async def generate(self, prompt_token_ids: list[int], params) -> RequestOutput:
        return await self.engine.generate(prompt_token_ids, params, self.calls)


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


class WeightUpdates:
    """The weight updates an engine has taken: OpenRLHF's async trainer with partial rollout pauses the engines
    around every broadcast and resumes them after it (`broadcast_to_vllm`), so each resume of the engine's vLLM
    (`LLMRayActor.llm`) is counted."""

    HOLD_TIMEOUT_S = 600.0
    POLL_S = 0.1

    def __init__(self, engine):
        llm = getattr(engine, "llm", None)
        resume = getattr(llm, "resume_generation", None)
        if resume is None:
            raise RuntimeError(
                "cpu_harness.workload.hold_first needs OpenRLHF's engine actor (its vLLM engine as `.llm`), with "
                "train.partial_rollout_enable, which pauses and resumes the engines around every weight update"
            )
        self.count = 0

        async def counted(*args, **kwargs):
            result = await resume(*args, **kwargs)
            self.count += 1
            return result

        llm.resume_generation = counted

    async def reach(self, count: int) -> None:
        """Returns once `count` updates were taken, or after HOLD_TIMEOUT_S (the run then goes on, unheld)."""
        deadline = time.monotonic() + self.HOLD_TIMEOUT_S
        while self.count < count and time.monotonic() < deadline:
            await asyncio.sleep(self.POLL_S)


class FullSizeDecode:
    """The full-size model's decode that each scripted turn stands for, sharing one engine: `seconds` of work per
    turn, done at full speed while at most `capacity` turns decode on the engine and at capacity / n of it when n
    do (a saturated engine's batch decodes at a fixed token rate, shared by the sequences in it), and not at all
    while the engine is paused for a weight update (vLLM's `pause_generation(mode="keep")` freezes requests).
    `capacity=None` is the flat model: full speed however many decode, paused time excepted."""

    TICK = 0.05  # seconds between progress updates; one pause query to the engine each

    def __init__(self, engine, capacity: int | None):
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be a positive number of concurrent decodes or None, got {capacity}")
        self.engine, self.capacity = engine, capacity
        self.work: list[list] = []  # [seconds left, future] per turn decoding
        self.ticker: asyncio.Task | None = None

    async def run(self, seconds: float) -> None:
        done = asyncio.get_running_loop().create_future()
        item = [seconds, done]
        self.work.append(item)
        if self.ticker is None or self.ticker.done():
            self.ticker = asyncio.create_task(self._tick())
        try:
            await done
        finally:  # a cancelled turn (a group restarted as stale) stops taking its share at once
            if item in self.work:
                self.work.remove(item)

    def rate(self) -> float:
        """Each decoding turn's share of full speed."""
        return 1.0 if self.capacity is None else min(1.0, self.capacity / max(1, len(self.work)))

    async def _paused(self) -> bool:
        # OpenRLHF hands the agent its engine actor (LLMRayActor), whose vLLM engine is `.llm`
        for owner in (self.engine, getattr(self.engine, "llm", None)):
            is_paused = getattr(owner, "is_paused", None)
            if is_paused is not None:
                return bool(await is_paused())
        return False

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while self.work:
            await asyncio.sleep(self.TICK)
            paused = await self._paused()
            now = loop.time()
            self.advance(now - last, paused)
            last = now

    def advance(self, elapsed: float, paused: bool = False) -> None:
        """`elapsed` seconds pass: each decoding turn does its share of them, none while paused; finished turns
        return."""
        step = 0.0 if paused else elapsed * self.rate()
        for item in list(self.work):
            item[0] -= step
            if item[0] <= 1e-9:
                self.work.remove(item)
                if not item[1].done():
                    item[1].set_result(None)


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
