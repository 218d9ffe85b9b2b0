"""The streaming scheduler inside OpenRLHF 0.11.2's async trainer, without forking it.

`StreamingSamplesGenerator` replaces `SamplesGenerator` in the generator actor: instead of
dispatching a batch and waiting for its slowest group, it keeps groups in flight across calls
(one Ray call per group, as OpenRLHF does) and returns the first B complete groups, oldest
first. `install()` swaps the class in `openrlhf.trainer.ppo_trainer_async`; it must run in the
Ray worker that hosts the generator actor, which is what the launcher's
`worker_process_setup_hook` does.

Policy version: read from the trainer's step count. OpenRLHF's trainer actor puts its
`global_step` into `rollout_slots` before each train step, and the generator actor takes one of
those tokens before each generate_samples() call; `install()` taps that queue in the generator
actor (`TrainerSteps`). Without the tap (the generator used on its own) the version falls back to
the call count: the k-th call comes after at least k - async_queue_size updates.

Resume: prompts drawn but not yet trained on (in flight, or finished and waiting) would be lost
with a checkpoint, since the dataloader's position is already past them. The generator's
dataloader `state_dict()` therefore returns a snapshot taken when the batch was handed out, with
those prompts under `REPLAY_KEY`; `load_state_dict()` takes them out again and they are run first.

Imported lazily: this module imports OpenRLHF's trainer, which needs Ray and vLLM.
"""

from __future__ import annotations

import asyncio
import threading

from .core import FatalRolloutError, Group, StreamingScheduler, token_versions

REPLAY_KEY = "asearcher_unconsumed_prompts"


class TrainerSteps:
    """The policy version seen by the generator, counted from the trainer's slot tokens.

    A token g is put after the trainer's g-th update was broadcast, so when the generator takes it
    the engines hold version >= g. Versions count +1 per token step rather than using g itself: after
    a resume the pre-filled tokens are 0 while the trainer continues from its checkpoint's step, and
    that first jump is not an update of this run's weights.
    """

    def __init__(self):
        self.version = 0
        self.seen = False
        self._last: int | None = None

    def observe(self, step) -> None:
        if isinstance(step, bool) or not isinstance(step, int):
            return
        if self._last is not None and step == self._last + 1:
            self.version += 1
        if self._last is None or step > self._last:
            self._last = step
        self.seen = True


class SlotTap:
    """`rollout_slots` as the generator actor sees it, reporting every token it takes."""

    def __init__(self, queue, steps: TrainerSteps):
        self._queue, self._steps = queue, steps

    def get(self, *args, **kwargs):
        step = self._queue.get(*args, **kwargs)
        self._steps.observe(step)
        return step

    def __getattr__(self, name):
        return getattr(self._queue, name)


def _make_class():
    import ray
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator, _collect_prompt_batch
    from openrlhf.utils.logging_utils import init_logger

    logger = init_logger(__name__)  # OpenRLHF's handler: the line shows with the trainer's own logs

    class StreamingSamplesGenerator(SamplesGenerator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.trainer_steps = TrainerSteps()
            self._replay, self._replayed, self._snapshot, self._live_state = [], 0, None, None
            self._carry_unconsumed_in_checkpoints()

        def _carry_unconsumed_in_checkpoints(self):
            dl = self.prompts_dataloader
            live_state, live_load = getattr(dl, "state_dict", None), getattr(dl, "load_state_dict", None)
            if live_state is None or live_load is None:
                return

            def state_dict():
                return self._snapshot if self._snapshot is not None else live_state()

            def load_state_dict(state):
                state = dict(state)
                self._replay = [tuple(p) for p in state.pop(REPLAY_KEY, [])]
                self._snapshot = None
                live_load(state)

            dl.state_dict, dl.load_state_dict = state_dict, load_state_dict
            self._live_state = live_state

        async def _take_snapshot(self):
            # Runs on the scheduler's loop, where prompts are drawn: position and list agree.
            return {**self._live_state(), REPLAY_KEY: [list(p) for p in self._sched.unconsumed_prompts() + self._replay]}

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
                while self._replay:
                    self._replayed += 1
                    yield self._replay.pop(0)
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
                experiences = []
                for r in responses:
                    versions = token_versions(self._sched.clock, r)
                    e = self._process_response_into_experience(r, **generate_kwargs)
                    for key, v in versions.items():
                        if v is not None:
                            e.info[f"policy_version_{key.removesuffix('_version')}"] = _tensor(v)
                    experiences.append(e)
                return experiences

            async def build():
                return StreamingScheduler(run_group, prompts(), batch_size=args.rollout.batch_size,
                                          max_concurrent=max_concurrent, max_staleness=eta, keep_group=keep)

            self._sched = asyncio.run_coroutine_threadsafe(build(), self._loop).result()

        def generate_samples(self, **generate_kwargs):
            self._ensure_started(generate_kwargs)
            self._calls += 1
            sched = self._sched
            steps = self.trainer_steps
            version = steps.version if steps.seen else max(0, self._calls - 1 - self.args.train.async_queue_size)
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
            if self._live_state is not None:
                self._snapshot = asyncio.run_coroutine_threadsafe(self._take_snapshot(), self._loop).result()
            drawn = sched.prompts_drawn - self._replayed  # replayed prompts were counted before the checkpoint
            consumed = drawn - self._drawn_reported
            self._drawn_reported = drawn
            finished = sched.stats["finished"]
            pass_rate = 100.0 * (finished - sched.stats["filtered"]) / finished if finished else None
            # cumulative counts: a growing stale_dropped means eta is too small for the trajectory lengths
            logger.info("streaming rollout at policy version %d: %d groups in flight, %s", version,
                        len(sched.in_flight()), sched.stats)
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
    # The generator actor is pickled by value when the trainer actor creates it, in a worker
    # that has run this hook, so both patches travel with it.
    actor_cls = async_trainer.GenerateSamplesActor.__ray_actor_class__
    original = actor_cls.__init__
    if getattr(original, "_asearcher_tap", False):
        return

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        steps = getattr(self.samples_generator, "trainer_steps", None)
        if steps is not None:
            self.rollout_slots = SlotTap(self.rollout_slots, steps)

    __init__._asearcher_tap = True
    actor_cls.__init__ = __init__
