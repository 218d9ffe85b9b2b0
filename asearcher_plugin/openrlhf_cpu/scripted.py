"""A scheduling workload for the CPU harness: scripted turns with a heavy-tailed turn count.

Not a model. Each trajectory draws its number of turns from a Pareto distribution (scale
`turns_scale`, shape `pareto_alpha`) clipped to [1, max_turns]: most are short, a few are very
long, as ASearcher's are (with the defaults the median is 4 turns and 1 in 20 runs 40 or more). It
searches the real KB with its question for every turn but the last, then answers. Decoding costs
`ms_per_token` per token and requests decode concurrently up to `max_num_seqs`, as vLLM's continuous batching
does, so what is measured is how well a scheduler keeps engines busy with trajectories of unequal length.

Enabled by `ASEARCHER_CPU_WORKLOAD` (JSON of `Workload`'s fields) in the environment of the Ray
workers; the plan of a trajectory rides in its first action (`<think>plan N</think>`).
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

from asearcher_plugin.engines.types import CompletionOutput, Logprob, RequestOutput

WORKLOAD_ENV = "ASEARCHER_CPU_WORKLOAD"
STATS_ENV = "ASEARCHER_CPU_ENGINE_STATS"  # a folder: each engine writes its busy time there
_PLAN = re.compile(r"<think>plan (\d+)</think>")


@dataclass
class Workload:
    max_turns: int = 64
    turns_scale: float = 2.0
    pareto_alpha: float = 1.0
    ms_per_token: float = 2.0
    tokens_per_turn: int = 24
    max_num_seqs: int = 64
    seed: int = 0

    @classmethod
    def from_env(cls) -> Workload | None:
        raw = os.environ.get(WORKLOAD_ENV)
        return cls(**json.loads(raw)) if raw else None


class ScriptedDecoder:
    def __init__(self, workload: Workload, tokenizer, running):
        self.w, self.tokenizer, self.running = workload, tokenizer, running
        self.started: dict[str, int] = {}  # trajectories begun per question: the k-th sample of a group
        self.slots = asyncio.Semaphore(workload.max_num_seqs)
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
        action = f"<search>{question[:80]}</search>" if turns_left > 1 else "<answer>unknown</answer>"
        ids = self.tokenizer(head + action, add_special_tokens=False)["input_ids"]
        ids = ids[: max(1, params.max_tokens or len(ids))]
        async with self.slots:
            with self.busy:
                await self._decode(max(len(ids), self.w.tokens_per_turn))
        logprobs = [{t: Logprob(0.0, rank=1)} for t in ids] if params.logprobs is not None else None
        out = CompletionOutput(0, self.tokenizer.decode(ids), ids, "stop", "</search>", logprobs, 0.0)
        return RequestOutput("", list(prompt_token_ids), [out])

    async def _decode(self, tokens: int) -> None:
        chunk = 8
        for _ in range(0, tokens, chunk):
            while not self.running.is_set():  # paused for a weight update: requests freeze
                await asyncio.sleep(0.005)
            await asyncio.sleep(self.w.ms_per_token * min(chunk, tokens) / 1000)


class BusyClock:
    """The intervals with at least one request decoding, appended to $ASEARCHER_CPU_ENGINE_STATS/engine-PID.jsonl."""

    def __init__(self):
        self.active, self.since = 0, 0.0
        self.folder = os.environ.get(STATS_ENV)

    def __enter__(self):
        if self.active == 0:
            self.since = time.time()
        self.active += 1

    def __exit__(self, *exc):
        self.active -= 1
        if self.active == 0 and self.folder:
            with open(os.path.join(self.folder, f"engine-{os.getpid()}.jsonl"), "a") as fh:
                fh.write(json.dumps([self.since, time.time()]) + "\n")
