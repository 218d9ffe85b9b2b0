"""The streaming scheduler inside OpenRLHF 0.11.2's async trainer. Every touch of OpenRLHF internals is here and in
`per_call.py` (the trainer hooks for per-call sequences, installed from here).

`install(settings)` runs in the driver after `ray.init()` and before OpenRLHF's `train()` creates its actors, once
per Ray job (Ray ships the trainer class once per job; a second install there is refused). It replaces
`GenerateSamplesActor` in `openrlhf.trainer.ppo_trainer_async` with a subclass that swaps in
`StreamingSamplesGenerator` and taps the slot queue. This works because Ray exports the trainer's
actor class by value when `train()` first creates it, with the driver's module globals as they
are then; the settings travel inside the exported class, so they reach the generator actor on
whatever node it lands. `check_contract()` fails loudly when an OpenRLHF version no longer has
what this relies on.

`StreamingSamplesGenerator` keeps groups in flight across `generate_samples()` calls (one Ray
call per group, with the arguments OpenRLHF's own dispatch builds, to the engine with the fewest
of its groups in flight) and returns the first B complete groups, oldest admitted first. Versions:
- engine version v: updates the engines hold, read from the trainer's slot tokens
  (`TrainerSteps`); admission is bounded by (eta + v + 1) x B;
- train version: the k-th batch handed out in a run is trained by the update that makes version
  k (OpenRLHF trains batches in order), so staleness = train version - admission version. The
  async queue alone makes it >= async_queue_size.

Outages: a group any of whose trajectories had a tool call fail for the infrastructure's sake (`tool_errors_infra`
in its extra_logs) never reaches the trainer: it is discarded and runs again (core.py), and the breaker pauses
admission until the KB servers answer a real `/retrieve` request again (breaker.py). The cumulative outage time,
groups re-run and trajectories discarded ride on every sample's info, so OpenRLHF logs them with its metrics.

Resume: prompts drawn but not yet trained on would be lost with a checkpoint, since the
dataloader's position is already past them. The dataloader's `state_dict()` therefore returns a
snapshot taken when the batch was handed out, with those prompts under `REPLAY_KEY`;
`load_state_dict()` takes them out again and they run first.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time

import ray
from openrlhf.trainer import ppo_trainer_async as async_trainer
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
from openrlhf.utils.logging_utils import init_logger

from ..scheduler.breaker import OutageBreaker
from ..scheduler.core import FatalRolloutError, Group, StreamingScheduler, stale_spans, token_versions
from ..scheduler.errors import EndpointOutage
from ..settings.config import SchedulerConfig
from .contract import _STOCK, OpenRLHFContractError, check_contract, stock_generator_actor  # noqa: F401
from .per_call import GROUP_KEY, TRAJECTORY_KEY, EveryRankSamples, PerCallPolicy, PerCallTrainer, mixed

logger = init_logger(__name__)  # OpenRLHF's handler: our lines show with the trainer's own logs

REPLAY_KEY = "asearcher_unconsumed_prompts"
# The pass over the prompts had ended when the snapshot was taken. The dataloader's own state then says "start a
# new pass", so after a resume the episode runs only its replayed prompts, not the whole data again.
PASS_DONE_KEY = "asearcher_pass_done"
# The trainer's global_step once the batch the snapshot was taken with is trained: the step a resume from the
# checkpoint holding that snapshot starts from (OpenRLHF gives the generator actor the dataloader state alone).
STEP_KEY = "asearcher_global_step"


class TrainerSteps:
    """The engine version seen by the generator, counted from the trainer's slot tokens.

    OpenRLHF pre-fills the slot queue with async_queue_size zeros; after that, the trainer puts its `global_step`
    back each time it takes a batch, after the weights of that step were broadcast. The engines hold version
    `token - start` of this run's updates, `start` being the step the run started from: 0, or after a resume the
    checkpoint's `global_step` (carried in the dataloader state, `STEP_KEY`). It is known before any token, never
    inferred from them: a generator call that returns nothing puts its token back, so a pre-filled 0 can come round
    again after the pre-fill, and taking it for the start would make the version jump to the checkpoint's step.
    (An eval returns the same step again.)
    """

    def __init__(self, start: int = 0):
        self.version = 0
        self.seen = False
        self._start: int | None = start

    def start_from(self, step: int | None) -> None:
        """A resume from the checkpoint of `step`; None: a checkpoint that did not say, so the first positive token
        is taken as the start (a resumed run's steps are all > 0, the pre-filled tokens 0)."""
        self._start = step

    def observe(self, step) -> None:
        if isinstance(step, bool) or not isinstance(step, int):
            return
        self.seen = True
        if self._start is None:
            if step <= 0:
                return
            self._start = step
        self.version = max(self.version, step - self._start)


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


async def await_group(ref):
    """The result of one group's Ray call; a cancelled wait cancels the engine's work too."""
    try:
        return await ref
    except asyncio.CancelledError:
        ray.cancel(ref)
        raise
    except ray.exceptions.RayActorError as exc:  # a dead engine is not a failed trajectory
        raise FatalRolloutError(f"a rollout engine died: {exc}") from None


class StreamingSamplesGenerator(SamplesGenerator):
    def __init__(
        self, *args, settings: SchedulerConfig, per_call: bool = False, kb_urls: tuple[str, ...] = (), **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.settings = settings
        self.per_call = per_call
        self.kb_urls = tuple(kb_urls)  # what the breaker asks during an outage; none: half-open trials
        self._breaker: OutageBreaker | None = None
        self.trainer_steps = TrainerSteps()
        self._start_step = 0  # the global_step this run started from (a checkpoint's, after a resume)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sched: StreamingScheduler | None = None
        self._replay, self._replayed, self._snapshot, self._live_state = [], 0, None, None
        self._pass_done = self._skip_pass = False
        self._calls = self._handed_out = self._episode = self._admitted_before = 0
        self._drawn_reported = 0
        self.engine_groups = [0] * len(self.vllm_engines)  # groups in flight per engine, kept on the loop
        self.totals = {key: 0 for key in ("consumed_prompts", *EPISODE_TOTALS)}
        self._carry_unconsumed_in_checkpoints()

    # -- checkpoints -----------------------------------------------------------------------
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
            self._skip_pass = bool(state.pop(PASS_DONE_KEY, False))
            step = state.pop(STEP_KEY, None)
            self._start_step = int(step or 0)
            self.trainer_steps.start_from(None if step is None else int(step))
            self._snapshot = None
            live_load(state)

        dl.state_dict, dl.load_state_dict = state_dict, load_state_dict
        self._live_state = live_state

    async def _take_snapshot(self):
        # On the scheduler's loop, where prompts are drawn: position and list agree.
        pending = (self._sched.unconsumed_prompts() if self._sched else []) + self._replay
        return {
            **self._live_state(),
            REPLAY_KEY: [list(p) for p in pending],
            PASS_DONE_KEY: self._pass_done,
            STEP_KEY: self._start_step + self._handed_out,  # OpenRLHF trains one step per batch handed out
        }

    # -- one pass over the prompts per episode ---------------------------------------------
    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _start_episode(self, generate_kwargs) -> StreamingScheduler:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="streaming-scheduler", daemon=True).start()
        args, s = self.args, self.settings

        def prompts():
            while self._replay:
                self._replayed += 1
                yield self._replay.pop(0)
            if self._skip_pass:  # resumed after this episode's pass had ended: its replayed prompts were the rest
                self._skip_pass = False
                return
            self._pass_done = False
            for batch in self.prompts_dataloader:  # every prompt of every batch, whatever the batch size
                _, texts, labels, images = batch
                yield from zip(texts, labels, images, strict=True)
            self._pass_done = True

        call = self._engine_call(generate_kwargs)

        async def run_group(item):
            prompt, label, image = item
            engine = self._pick_engine()
            self.engine_groups[engine] += 1
            try:
                ref = self.vllm_engines[engine].generate_responses.remote(
                    prompt=prompt, label=label, images=image, **call
                )
                responses = await await_group(ref)
            finally:
                self.engine_groups[engine] -= 1
            infra = [r for r in responses if (r.get("extra_logs") or {}).get("tool_errors_infra")]
            if infra:  # the endpoints', not the model's: never trained on
                raise EndpointOutage(
                    f"{len(infra)} of {len(responses)} trajectories had tool calls fail for the infrastructure "
                    f"({sum(r['extra_logs']['tool_errors_infra'] for r in infra):.0f} calls)",
                    trajectories=len(responses),
                )
            experiences = []
            for trajectory, r in enumerate(responses):  # OpenRLHF's dicts, from `Trajectory.to_openrlhf()`
                # per_call: one sample per sequence, each with the trajectory's reward and extra_logs
                for piece in [{**r, **seq} for seq in r["sequences"]] if r.get("sequences") else [r]:
                    e = self._sample(piece, generate_kwargs)
                    e.asearcher_trajectory = trajectory
                    experiences.append(e)
            return experiences

        async def build():
            if self._breaker is None:  # one per run: an outage may span episodes
                self._breaker = OutageBreaker(s.outage_budget_s, probe=kb_probe(self.kb_urls))
            return StreamingScheduler(
                run_group,
                prompts(),
                batch_size=args.rollout.batch_size,
                max_concurrent=s.max_concurrent,
                max_staleness=s.max_staleness,
                keep_group=self._keep,
                on_stale=s.on_stale,
                consume_lag=args.train.async_queue_size,
                admitted_before=self._admitted_before,
                breaker=self._breaker,
            )

        self._drawn_reported = self._replayed = 0
        return self._run(build())

    def _keep(self, group: Group) -> bool:
        scores = [e.scores[0].item() for e in first_sequences(group.samples) if e.scores is not None]
        return keeps_group(scores, self.args.algo, self.settings.group_filter)

    def _sample(self, piece: dict, generate_kwargs):
        """One OpenRLHF sample (OpenRLHF's own conversion) with the policy versions of its tokens."""
        clock = self._sched.clock
        e = self._process_response_into_experience(piece, **generate_kwargs)
        for key, v in token_versions(clock, piece.get("token_times")).items():
            e.info[f"policy_version_{key.removesuffix('_version')}"] = _tensor(-1 if v is None else v)
        # The version of every model call (one per action range), kept until the batch is handed out and the
        # update that trains it is known.
        spans, turns = list(piece.get("action_ranges") or []), piece.get("turn_times") or []
        calls = min(len(spans), len(turns))
        e.asearcher_turns = (spans[:calls], [clock.version_at(t) for t in turns[:calls]])
        return e

    # -- dispatch --------------------------------------------------------------------------
    def _engine_call(self, generate_kwargs) -> dict:
        """The arguments OpenRLHF's own `_dispatch_prompts_to_vllm` sends with each prompt (sampling params,
        lengths, tokenizer, n), taken from it once per episode by dispatching to a recorder, not to an engine."""
        probe = copy.copy(self)
        probe.vllm_engines = [_CallRecorder()]
        (call,) = probe._dispatch_prompts_to_vllm(["probe"], ["probe"], images=[None], **generate_kwargs)
        return {k: v for k, v in call.items() if k not in ("prompt", "label", "images")}

    def _pick_engine(self) -> int:
        """The engine with the fewest of this generator's groups in flight (OpenRLHF's generator instead asks
        every engine for its queue with a blocking call per dispatch, and an admission burst sees the same
        snapshot each time). Only this generator dispatches training rollouts, so its own counts are the load."""
        return min(range(len(self.engine_groups)), key=lambda i: (self.engine_groups[i], i))

    def generate_samples(self, **generate_kwargs):
        if self._sched is None:
            self._sched = self._start_episode(generate_kwargs)
        sched = self._sched
        self._calls += 1
        steps = self.trainer_steps
        version = steps.version if steps.seen else max(0, self._calls - 1 - self.args.train.async_queue_size)
        self._loop.call_soon_threadsafe(sched.set_version, version)
        try:
            groups = self._run(sched.next_batch())
        except EOFError:
            groups = []
        train_version = self._handed_out
        samples, turn_versions, trajectories = [], {}, 0
        metrics = {**self._outage_totals(sched), **self._scheduler_state(sched, version)}
        for j, g in enumerate(groups):
            for e in g.samples:
                e.info["policy_version_admitted"] = _tensor(g.admitted_version)
                e.info["staleness"] = _tensor(train_version - g.admitted_version)
                for key, value in metrics.items():
                    e.info[key] = _tensor(value)
                turn_versions.setdefault(g.index, []).append(self._mark_stale_turns(e, train_version))
                if self.per_call:  # which trajectory and group each sequence is, for the trainer's advantages
                    e.info[TRAJECTORY_KEY] = _tensor(trajectories + e.asearcher_trajectory)
                    e.info[GROUP_KEY] = _tensor(j)
            trajectories += 1 + max((e.asearcher_trajectory for e in g.samples), default=-1)
            samples.extend(g.samples)
        if samples:
            self._handed_out += 1
        if self._live_state is not None:
            self._snapshot = self._run(self._take_snapshot())
        drawn = sched.prompts_drawn - self._replayed  # replayed prompts were counted before the checkpoint
        consumed, self._drawn_reported = drawn - self._drawn_reported, drawn
        finished = sched.stats["finished"]
        pass_rate = 100.0 * (finished - sched.stats["filtered"]) / finished if finished else None
        exhausted = sched.drained()
        self._record(groups, version, train_version, consumed, exhausted, turn_versions)
        if exhausted:
            self._end_episode()
        return samples, pass_rate, consumed, exhausted

    def _mark_stale_turns(self, e, train_version: int) -> list:
        """Counts the generated tokens more than eta versions older than the update that trains them, and with
        on_stale=mask takes them out of the loss. OpenRLHF's action_mask[i] marks token i + 1 (the first token has
        no log-prob), cut to max_len; the reward is untouched, so it still counts in the group's baseline.

        A sample whose every turn is stale keeps its last turn: OpenRLHF 0.11.2 divides each micro-batch's metrics
        by its action tokens (ZeroDivisionError when a micro-batch has none) and averages per-sample KL over them
        (NaN). Those tokens count as stale and not masked. Returns the version of each model call."""
        spans, versions = e.__dict__.pop("asearcher_turns", ([], []))
        stale_calls = stale_spans(spans, versions, train_version, self.settings.max_staleness)
        masking = len(stale_calls) if self.settings.on_stale == "mask" else 0
        if masking and len(stale_calls) == len(spans):
            masking -= 1  # every turn stale: the last one stays
        mask, stale, masked = e.action_mask[0], 0, 0
        for i, (a, b) in enumerate(stale_calls):
            lo, hi = max(a - 1, 0), min(b - 1, mask.numel())
            tokens = int(mask[lo:hi].sum()) if hi > lo else 0
            stale += tokens
            if i < masking and hi > lo:
                masked += tokens
                mask[lo:hi] = 0
        e.info["stale_tokens"] = _tensor(stale)
        e.info["stale_tokens_masked"] = _tensor(masked)
        return versions

    def _outage_totals(self, sched) -> dict:
        """This run's outages so far, as OpenRLHF's metrics show them."""
        return {
            "outage_seconds": round(self._breaker.outage_seconds, 1),
            "outage_groups_rerun": self.totals["outage_reruns"] + sched.stats["outage_reruns"],
            "outage_trajectories_discarded": self.totals["outage_discarded"] + sched.stats["outage_discarded"],
        }

    def _scheduler_state(self, sched, version: int) -> dict:
        """The scheduler as the batch leaves it, for OpenRLHF's metrics (its log line, wandb, tensorboard): groups
        in flight and the staleness bound's capacity now, this episode's admitted, finished, filtered and failed
        groups, the engines with a group of this generator, the engines' weight version."""
        return {
            "scheduler_in_flight": len(sched.in_flight()),
            "scheduler_capacity": sched.capacity(),
            "scheduler_admitted": sched.admitted,
            **{f"scheduler_{key}": sched.stats[key] for key in ("finished", "filtered", "failed", "stale_restarted")},
            "scheduler_engines_busy": sum(1 for n in self.engine_groups if n),
            "scheduler_engine_version": version,
        }

    def _end_episode(self):
        sched, self._sched = self._sched, None
        for key in EPISODE_TOTALS:
            self.totals[key] += sched.stats[key]
        self._run(sched.aclose())
        self._admitted_before = sched.admitted
        self._episode += 1

    def _record(self, groups, version, train_version, consumed, exhausted, turn_versions):
        sched = self._sched
        self.totals["consumed_prompts"] += consumed
        staleness = [train_version - g.admitted_version for g in groups]
        logger.info(
            "streaming rollout: batch %d (episode %d) at engine version %d, %d groups, staleness max %s, "
            "%d groups in flight, %s, outage %.1f s",
            train_version,
            self._episode,
            version,
            len(groups),
            max(staleness, default="-"),
            len(sched.in_flight()),
            sched.stats,
            self._breaker.outage_seconds,
        )
        if not self.settings.trace:
            return
        row = {
            "time": time.time(),
            "episode": self._episode,
            "call": self._calls,
            "engine_version": version,
            "version_source": "trainer" if self.trainer_steps.seen else "calls",
            "admitted": sched.admitted,
            "capacity": sched.capacity(),
            "peak_over_capacity": sched.peak_over_capacity,
            "train_version": train_version,
            "prompts_consumed": consumed,
            "exhausted": exhausted,
            "in_flight": len(sched.in_flight()),
            "engine_groups": list(self.engine_groups),
            "stats": dict(sched.stats),
            "outage_seconds": self._breaker.outage_seconds,
            "groups": [
                {
                    "index": g.index,
                    "prompt": _text(g.prompt[0]),
                    "admitted_version": g.admitted_version,
                    "staleness": train_version - g.admitted_version,
                    "samples": len(g.samples),
                    "first_token_version": [_num(e.info.get("policy_version_first_token")) for e in g.samples],
                    "last_token_version": [_num(e.info.get("policy_version_last_token")) for e in g.samples],
                    "turn_versions": turn_versions.get(g.index, []),
                    "stale_tokens": [_num(e.info.get("stale_tokens")) for e in g.samples],
                    "stale_tokens_masked": [_num(e.info.get("stale_tokens_masked")) for e in g.samples],
                }
                for g in groups
            ],
        }
        with open(self.settings.trace, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


EPISODE_TOTALS = ("filtered", "failed", "stale_restarted", "stale_dropped", "outage_reruns", "outage_discarded")


def kb_probe(urls: tuple[str, ...]):
    """Whether any KB server answers a real Search-R1 `/retrieve` request (the start-up check's), or None."""
    if not urls:
        return None
    from ..tools.preflight import answers_retrieve

    async def probe() -> bool:
        for url in urls:
            try:
                await asyncio.to_thread(answers_retrieve, url, 5.0)
                return True
            except Exception:  # noqa: BLE001 - any failure is a server not answering
                continue
        return False

    return probe


class _CallRecorder:
    """Answers the two engine calls of `_dispatch_prompts_to_vllm` locally: a load of 0, and the call's kwargs."""

    class _Method:
        def __init__(self, fn):
            self.remote = fn

    def __init__(self):
        self.get_num_unfinished_requests = self._Method(lambda: ray.put(0))
        self.generate_responses = self._Method(lambda **kwargs: kwargs)


def keeps_group(scores: list[float], algo, group_filter: str) -> bool:
    """Whether dynamic filtering trains a group with these per-trajectory scores (`scheduler.group_filter`)."""
    if not algo.dynamic_filtering_enable or not scores:
        return True
    if group_filter == "scores_differ":
        return max(scores) != min(scores)
    low, high = algo.dynamic_filtering_range
    return low < sum(scores) / len(scores) < high


def first_sequences(samples: list) -> list:
    """One sample per trajectory (its first sequence): what per-trajectory statistics count."""
    seen: set = set()
    firsts = []
    for e in samples:
        key = getattr(e, "asearcher_trajectory", id(e))
        if key not in seen:
            seen.add(key)
            firsts.append(e)
    return firsts


def _tensor(v):
    import torch

    return torch.tensor([float(v)])


def _num(t):
    return None if t is None else float(t.flatten()[0])


def _text(prompt) -> str:
    return prompt if isinstance(prompt, str) else repr(prompt)


def streaming_actor_class(settings: SchedulerConfig, per_call: bool = False, kb_urls: tuple[str, ...] = ()):
    """A subclass of OpenRLHF's generator actor carrying `settings`; made per run so they travel with it."""

    class StreamingGenerateSamplesActor(stock_generator_actor().__ray_actor_class__):
        scheduler_settings = settings
        per_call_sequences = per_call
        probe_urls = tuple(kb_urls)

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            stock = self.samples_generator
            self.samples_generator = StreamingSamplesGenerator(
                strategy=stock.strategy,
                prompts_dataloader=self.prompts_dataloader,
                eval_dataloader=self.eval_dataloader,
                tokenizer=stock.tokenizer,
                vllm_engines=stock.vllm_engines,
                settings=self.scheduler_settings,
                per_call=self.per_call_sequences,
                kb_urls=self.probe_urls,
            )
            self.rollout_slots = SlotTap(self.rollout_slots, self.samples_generator.trainer_steps)

        def scheduler_totals(self) -> dict:
            return dict(self.samples_generator.totals)

    return StreamingGenerateSamplesActor


class StreamingInstallError(RuntimeError):
    """install()/uninstall() called where Ray would silently ignore it."""


def _ray_job() -> str | None:
    """The running Ray job: its id with the driver's node (a new local cluster numbers its jobs from 1 again)."""
    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    return f"{context.get_job_id()}@{context.get_node_id()[:12]}"


def install(settings: SchedulerConfig, per_call: bool = False, kb_urls: tuple[str, ...] = ()) -> None:
    """In the driver, after `ray.init()` and before `train()`: OpenRLHF's async trainer will build the streaming
    generator actor. `kb_urls`: the KB servers the agent searches, asked during an outage whether they are back.

    Ray exports `PPOTrainerAsync` (with the module globals it sees then) once per Ray job, so an install holds for
    exactly one job: it is bound to the running job, and a second install (or an uninstall) in that job is refused
    rather than silently ignored by Ray. Start a new job (`ray.shutdown()`, `ray.init()`) for another run.
    """
    job = _ray_job()
    if job is None:
        raise StreamingInstallError(
            "install() binds the streaming scheduler to the running Ray job: call ray.init() first"
        )
    if _STOCK.get("job") == job:
        raise StreamingInstallError(
            f"the streaming scheduler is already installed in Ray job {job}; Ray ships OpenRLHF's trainer "
            "class once per job, so a second install() would be ignored: ray.shutdown() and ray.init() first"
        )
    check_contract()
    stock_generator_actor()
    async_trainer.GenerateSamplesActor = ray.remote(streaming_actor_class(settings, per_call, kb_urls))
    _restore_trainer()  # an earlier job's
    from openrlhf.trainer.ray import ppo_actor

    _STOCK["trainer"], _STOCK["policy"] = async_trainer.TrainingActor, ppo_actor.PolicyModelActor
    # a batch short of groups (failed alone, the data's end) still reaches every policy rank; per_call: the trainer's
    # advantages and the policy's optimizer steps, per trajectory (per_call.py)
    async_trainer.TrainingActor = mixed(async_trainer.TrainingActor, PerCallTrainer if per_call else EveryRankSamples)
    if per_call:
        ppo_actor.PolicyModelActor = mixed(ppo_actor.PolicyModelActor, PerCallPolicy)
    _STOCK["job"] = job


def _restore_trainer() -> None:
    if "trainer" in _STOCK:
        from openrlhf.trainer.ray import ppo_actor

        async_trainer.TrainingActor = _STOCK.pop("trainer")
        ppo_actor.PolicyModelActor = _STOCK.pop("policy")


def uninstall() -> None:
    """Puts OpenRLHF's own generator actor back, for the next Ray job (refused inside the job it was installed in)."""
    if "actor" not in _STOCK:
        return
    if _STOCK.get("job") is not None and _STOCK["job"] == _ray_job():
        raise StreamingInstallError(
            f"the streaming scheduler was installed in the running Ray job {_STOCK['job']}, where Ray keeps "
            "using it: ray.shutdown() first"
        )
    async_trainer.GenerateSamplesActor = _STOCK["actor"]
    _restore_trainer()
    _STOCK.pop("job", None)
