"""The streaming scheduler inside OpenRLHF 0.11.2's async trainer, without forking it.

`StreamingSamplesGenerator` replaces `SamplesGenerator` in the generator actor: instead of
dispatching a batch and waiting for its slowest group, it keeps groups in flight across calls
(one Ray call per group, as OpenRLHF does) and returns the first B complete groups, oldest
first. `install()` swaps the class in `openrlhf.trainer.ppo_trainer_async`; it must run in the
Ray worker that hosts the generator actor, which is what the launcher's
`worker_process_setup_hook` does.

Policy version: generate_samples() is called once per training step once a slot is free, so the
k-th call happens after at least k - async_queue_size weight updates; that lower bound is the
version used for staleness (conservative: the real version can only be newer).

Imported lazily: this module imports OpenRLHF's trainer, which needs Ray and vLLM.
"""

from __future__ import annotations

import asyncio
import threading

from .core import FatalRolloutError, Group, StreamingScheduler


def _make_class():
    import ray
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator, _collect_prompt_batch

    class StreamingSamplesGenerator(SamplesGenerator):
        def _ensure_started(self, generate_kwargs):
            if getattr(self, "_sched", None) is not None:
                return
            args = self.args
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="streaming-scheduler", daemon=True).start()
            self._calls = 0
            self._drawn_reported = 0
            # From the recipe's `scheduler:` section, passed by the launcher as env vars.
            plugin = getattr(args, "asearcher", None)
            max_concurrent = (getattr(plugin, "max_concurrent", None) or _env_int("ASEARCHER_MAX_CONCURRENT")
                              or 2 * args.rollout.batch_size)
            eta = getattr(plugin, "max_staleness", None)
            eta = _env_int("ASEARCHER_MAX_STALENESS") if eta is None else eta
            eta = args.train.async_queue_size if eta is None else eta
            low, high = args.algo.dynamic_filtering_range

            def keep(group: Group) -> bool:
                if not args.algo.dynamic_filtering_enable:
                    return True
                scores = [e.scores[0].item() for e in group.samples if e.scores is not None]
                return not scores or low < sum(scores) / len(scores) < high

            def prompts():
                it = iter(self.prompts_dataloader)
                while True:
                    batch, labels, images, exhausted = _collect_prompt_batch(it, 1)
                    if batch:
                        yield batch[0], labels[0], images[0]
                    if exhausted:
                        return

            async def run_group(item):
                prompt, label, image = item
                refs = self._dispatch_prompts_to_vllm([prompt], [label], images=[image], **generate_kwargs)
                try:
                    responses = await refs[0]
                except ray.exceptions.RayActorError as exc:  # a dead engine is not a failed trajectory
                    raise FatalRolloutError(f"a rollout engine died: {exc}") from None
                return [self._process_response_into_experience(r, **generate_kwargs) for r in responses]

            async def build():
                return StreamingScheduler(run_group, prompts(), batch_size=args.rollout.batch_size,
                                          max_concurrent=max_concurrent, max_staleness=eta, keep_group=keep)

            self._sched = asyncio.run_coroutine_threadsafe(build(), self._loop).result()

        def generate_samples(self, **generate_kwargs):
            self._ensure_started(generate_kwargs)
            self._calls += 1
            sched = self._sched
            version = max(0, self._calls - 1 - self.args.train.async_queue_size)
            self._loop.call_soon_threadsafe(sched.set_version, version)
            try:
                groups = asyncio.run_coroutine_threadsafe(sched.next_batch(), self._loop).result()
                exhausted = False
            except EOFError:
                groups, exhausted = [], True
            samples = []
            for g in groups:
                for e in g.samples:
                    e.info["policy_version_admitted"] = _tensor(g.admitted_version)
                    e.info["staleness"] = _tensor(version - g.admitted_version)
                samples.extend(g.samples)
            consumed = sched.prompts_drawn - self._drawn_reported
            self._drawn_reported = sched.prompts_drawn
            finished = sched.stats["finished"]
            pass_rate = 100.0 * (finished - sched.stats["filtered"]) / finished if finished else None
            return samples, pass_rate, consumed, exhausted and not sched.in_flight()

    def _tensor(v):
        import torch

        return torch.tensor([float(v)])

    return StreamingSamplesGenerator


def _env_int(name: str):
    import os

    value = os.environ.get(name)
    return int(value) if value else None


def install() -> None:
    """Worker setup hook: make OpenRLHF's async generator actor build the streaming generator."""
    import openrlhf.trainer.ppo_trainer_async as async_trainer

    async_trainer.SamplesGenerator = _make_class()
