"""`asearcher rollout RECIPE.yaml`: the streaming scheduler over CPU engines on Ray, no training.

Each Ray actor holds an `HFEngine` and the agent executor and answers `generate_responses`, the
call OpenRLHF's rollout actors answer; the scheduler keeps groups in flight across "steps" (a
step is one batch handed out; the policy version advances by one per step, as if a trainer had
consumed it) and every trajectory is written to JSONL with the versions it saw.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..eval.datasets import text_problem
from ..records import token_sequences
from ..scheduler.core import FatalRolloutError, StreamingScheduler, token_versions
from ..settings.config import AgentConfig, SchedulerConfig


class RolloutFlags(BaseModel):
    """The OpenRLHF flags of a recipe that `asearcher rollout` runs with, read once and typed; a flag the recipe
    leaves out takes the default below (a small CPU run's), and a bad value is refused naming the flag."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    model: Path = Field(alias="actor.model_name_or_path")
    prompt_dataset: Path = Field(alias="data.prompt_dataset")
    input_key: str = Field("input", alias="data.input_key")
    label_key: str = Field("label", alias="data.label_key")
    batch_size: int = Field(4, ge=1, alias="rollout.batch_size")
    n_samples: int = Field(1, ge=1, alias="rollout.n_samples_per_prompt")
    max_len: int = Field(2048, ge=1, alias="data.max_len")
    temperature: float = Field(1.0, ge=0, alias="rollout.temperature")

    @field_validator("label_key", mode="before")
    @classmethod
    def _label_key(cls, value):
        return value or "label"  # OpenRLHF's flag defaults to None

    @classmethod
    def of(cls, flags: dict, source: str = "recipe") -> RolloutFlags:
        try:
            return cls.model_validate(flags)
        except ValidationError as exc:
            problems = "; ".join(f"openrlhf.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"{source}: {problems}") from None


def _actor_class():
    import ray

    @ray.remote(num_cpus=0)
    class CPURolloutActor:
        def __init__(self, model_path: str, agent_config: AgentConfig | dict, seed: int):
            from ..agent.executor import AgentExecutor
            from ..engines.hf import HFEngine

            self.engine = HFEngine(model_path, seed=seed)
            self.executor = AgentExecutor(AgentConfig.model_validate(agent_config))
            self.pending = 0

        async def generate_responses(
            self, prompt, label, sampling_params, max_length, hf_tokenizer=None, num_samples=1, images=None
        ):
            """OpenRLHF's call and OpenRLHF's dicts, for callers that stand this actor in for its engines."""
            records = await self.generate_records(prompt, label, sampling_params, max_length, num_samples)
            return [r.to_openrlhf() for r in records]

        async def generate_records(self, prompt, label, sampling_params, max_length, num_samples=1):
            self.pending += num_samples
            try:
                runs = [
                    self.executor.run(prompt, label, sampling_params, max_length, self.engine.tokenizer, self.engine)
                    for _ in range(num_samples)
                ]
                return await asyncio.gather(*runs)
            finally:
                self.pending -= num_samples

        def get_num_unfinished_requests(self) -> int:
            return self.pending

    return CPURolloutActor


def load_prompts(path: str | Path, input_key: str, label_key: str) -> list[tuple[str, object]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if input_key not in row:
                raise ValueError(f"{path}:{line_no}: no {input_key!r} field (the recipe's data.input_key)")
            if problem := text_problem(row[input_key], input_key):
                raise ValueError(f"{path}:{line_no}: {problem}")
            rows.append((row[input_key], row.get(label_key)))
    return rows


def group_runner(actors, params, max_length: int, n_samples: int):
    """`run_group(item)` for the scheduler: the whole group to the least-loaded actor, as OpenRLHF assigns."""
    import ray

    load = [0] * len(actors)

    async def run_group(item):
        prompt, label = item
        e = min(range(len(actors)), key=lambda i: load[i])
        load[e] += n_samples
        try:
            return await actors[e].generate_records.remote(prompt, label, params, max_length, n_samples)
        except ray.exceptions.RayActorError as exc:
            raise FatalRolloutError(f"engine {e} (Ray actor {actors[e]._actor_id.hex()}) died: {exc}") from None
        finally:
            load[e] -= n_samples

    return run_group


async def rollout(
    model_path: str,
    agent_config: AgentConfig | dict,
    prompts: list,
    out: Path,
    engines: int,
    batch_size: int,
    n_samples: int,
    steps: int,
    scheduler: SchedulerConfig,
    max_length: int,
    temperature: float = 1.0,
) -> dict:
    """The recipe's scheduler settings; no trainer sits between batches, so versions advance once per batch."""
    import ray

    from ..engines.types import SamplingParams

    actors = [_actor_class().remote(model_path, agent_config, seed=i) for i in range(engines)]
    params = SamplingParams(temperature=temperature, max_tokens=None, logprobs=1)
    run_group = group_runner(actors, params, max_length, n_samples)
    eta = 1 if scheduler.max_staleness is None else scheduler.max_staleness
    sched = StreamingScheduler(
        run_group,
        iter(prompts),
        batch_size=batch_size,
        max_concurrent=scheduler.max_concurrent or (eta + 1) * batch_size,
        max_staleness=eta,
        on_stale=scheduler.on_stale,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    started, written = time.monotonic(), 0
    try:
        with open(out, "w", encoding="utf-8") as fh:
            written = await _drain(sched, fh, steps)
    finally:  # also on Ctrl-C or a dead engine: stop what runs, free the actors
        await sched.aclose()
        for actor in actors:
            ray.kill(actor)
    return {"trajectories": written, "seconds": time.monotonic() - started, **sched.stats}


async def _drain(sched: StreamingScheduler, fh, steps: int) -> int:
    written = 0
    for step in range(steps):
        try:
            batch = await sched.next_batch()
        except EOFError:
            break
        for group in batch:
            for sample in group.samples:
                fh.write(
                    json.dumps(
                        {
                            "step": step,
                            "prompt": group.prompt[0],
                            "label": group.prompt[1],
                            "answer": sample.answer,
                            "reward": sample.reward,
                            "truncated": sample.truncated,
                            "scores": sample.scores,
                            "logs": sample.stats,
                            "admitted_version": group.admitted_version,
                            "consumed_version": step,
                            **token_versions(sched.clock, sample.token_times),
                            "tokens": sample.tokens,
                            "sequences": token_sequences(sample),
                        }
                    )
                    + "\n"
                )
                written += 1
        sched.set_version(step + 1)
    return written
