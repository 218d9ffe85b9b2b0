"""The streaming generator on OpenRLHF's real SamplesGenerator, with real Ray actors as engines.

OpenRLHF's samples generator and async trainer modules are imported for real (vLLM's CPU build; flash-attn is the
import-only stand-in of `asearcher_plugin.openrlhf.cpu`). The engines are Ray actors answering
`generate_responses` as OpenRLHF's rollout actors do, each with the tiny model and the real agent on the sample KB,
or counting engines that record what was sent to them.
The whole chain through OpenRLHF's `train()` is tested in tests/test_openrlhf_train_cpu.py.
"""

import asyncio
import json
import re
import time
from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.ray]

ray = pytest.importorskip("ray")
pytest.importorskip("openrlhf")


@pytest.fixture(scope="module")
def streaming():
    from asearcher_plugin.openrlhf.cpu import use_stand_ins

    use_stand_ins()
    from asearcher_plugin.openrlhf import streaming

    return streaming


@pytest.fixture()
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def make_args(batch_size=2, queue=1):
    return SimpleNamespace(
        rollout=SimpleNamespace(batch_size=batch_size, n_samples_per_prompt=2, vllm_generate_batch_size=batch_size),
        algo=SimpleNamespace(
            dynamic_filtering_enable=False,
            dynamic_filtering_range=(0.0, 1.0),
            advantage=SimpleNamespace(is_correction_level="token"),
        ),
        train=SimpleNamespace(async_queue_size=queue),
        vllm=SimpleNamespace(enable_sleep=False),
    )


class PositionLoader:
    """The part of torchdata's StatefulDataLoader that OpenRLHF's generator actor uses: one pass per iter()."""

    def __init__(self, rows):
        self.rows, self.pos = rows, 0

    def __iter__(self):
        if self.pos >= len(self.rows):
            self.pos = 0  # a new epoch
        while self.pos < len(self.rows):
            self.pos += 1
            yield self.rows[self.pos - 1]

    def __len__(self):
        return len(self.rows)

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]


KWARGS = {"max_len": 512, "temperature": 1.0, "top_p": 1.0, "n_samples_per_prompt": 2}


def engines_for(tiny_model, kb_server, n=2):
    from asearcher_plugin.commands.rollout import _actor_class

    agent = {
        "agent_type": "asearcher",
        "max_turns": 2,
        "max_new_tokens_per_turn": 12,
        "tools": {"local": {"urls": [kb_server]}},
    }
    return [_actor_class().remote(str(tiny_model), agent, seed=i) for i in range(n)]


@pytest.mark.slow
def test_streaming_generator_hands_out_batches_of_complete_groups(streaming, local_ray, tiny_model, kb_server):
    from ray.util.queue import Queue

    from asearcher_plugin.settings.config import SchedulerConfig

    engines = engines_for(tiny_model, kb_server)
    args = make_args()
    rows = [(None, [f"Question {i}?"], [json.dumps(["x"])], [None]) for i in range(9)]
    settings = SchedulerConfig(max_concurrent=4, max_staleness=1)

    def make_generator():
        return streaming.StreamingSamplesGenerator(
            strategy=SimpleNamespace(args=args),
            prompts_dataloader=PositionLoader(rows),
            eval_dataloader=None,
            tokenizer=None,
            vllm_engines=engines,
            settings=settings,
        )

    generator = make_generator()
    states, trained, consumed = [], [], 0
    # OpenRLHF's slot queue: pre-filled with one 0 token; the trainer puts its global_step back when it
    # takes a batch, then trains (global_step + 1). The tap reads the engine version off it.
    slots = Queue()
    slots.put(0)
    tap = streaming.SlotTap(slots, generator.trainer_steps)
    for step in range(3):
        tap.get(block=True)
        samples, pass_rate, drawn, exhausted = generator.generate_samples(**KWARGS)
        slots.put(step)
        assert generator._sched.version == max(0, step - 1)
        # what a checkpoint taken now stores: the position, and the prompts drawn but not trained on
        states.append(generator.prompts_dataloader.state_dict())
        trained += [s.prompts[0] for s in samples[::2]]
        replay = [p[0] for p in states[-1][streaming.REPLAY_KEY]]
        seen = [f"Question {i}?" for i in range(states[-1]["pos"])]
        assert not set(replay) & set(trained) and set(replay) | set(trained) <= set(seen)
        assert len(replay) == len(seen) - len(trained)  # nothing dropped
        consumed += drawn
        assert len(samples) == 4 and not exhausted  # 2 complete groups of 2
        prompts_in_batch = [s.prompts[0] for s in samples]
        assert prompts_in_batch[0] == prompts_in_batch[1] and prompts_in_batch[2] == prompts_in_batch[3]
        for s in samples:
            assert s.sequences.shape[1] == s.action_mask.shape[1] + 1 == s.rollout_log_probs.shape[1] + 1
            # train version of this batch (= step) minus the engine version at admission
            assert (
                s.info["staleness"].item() == step - s.info["policy_version_admitted"].item() and s.rewards is not None
            )
    assert consumed == generator._sched.prompts_drawn >= 6
    for s in samples:
        first, last = s.info["policy_version_first_token"].item(), s.info["policy_version_last_token"].item()
        assert s.info["policy_version_admitted"].item() <= first <= last <= generator._sched.version
    pending = [p[0] for p in states[0][streaming.REPLAY_KEY]]
    assert pending  # after the first batch, groups were still running
    # resume from the first checkpoint: its unconsumed prompts run first and are not counted again
    resumed = make_generator()
    resumed.prompts_dataloader.load_state_dict(states[0])
    samples, _, drawn, _ = resumed.generate_samples(**KWARGS)
    assert resumed._replayed == len(pending)
    assert drawn == resumed._sched.prompts_drawn - len(pending)
    assert resumed.prompts_dataloader.state_dict()["pos"] == states[0]["pos"] + drawn


@pytest.mark.slow
def test_every_episode_is_a_full_pass_over_the_prompts(streaming, local_ray, tiny_model, kb_server):
    """OpenRLHF calls generate_samples() again for each episode; each pass must consume every prompt once."""
    from asearcher_plugin.settings.config import SchedulerConfig

    rows = [(None, [f"Q{i}?"], [json.dumps(["x"])], [None]) for i in range(5)]
    generator = streaming.StreamingSamplesGenerator(
        strategy=SimpleNamespace(args=make_args()),
        prompts_dataloader=PositionLoader(rows),
        eval_dataloader=None,
        tokenizer=None,
        vllm_engines=engines_for(tiny_model, kb_server, n=1),
        settings=SchedulerConfig(max_concurrent=4, max_staleness=3),
    )
    for episode in range(2):
        got, consumed = [], 0
        while True:  # GenerateSamplesActor.fit's loop
            samples, _, drawn, exhausted = generator.generate_samples(**KWARGS)
            got += [s.prompts[0] for s in samples[::2]]
            consumed += drawn
            if exhausted:
                break
        assert sorted(got) == [f"Q{i}?" for i in range(5)] and consumed == 5, f"episode {episode}"
    assert generator.totals["consumed_prompts"] == 10


def test_a_cancelled_group_cancels_the_engine_call(streaming, local_ray):
    """Stopping a group must stop the engine's work (ray.cancel), not only the wait for it."""

    @ray.remote
    class SlowEngine:
        def __init__(self):
            self.cancelled = 0

        async def generate_responses(self):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise

        def count(self):
            return self.cancelled

    engine = SlowEngine.remote()

    async def main():
        task = asyncio.ensure_future(streaming.await_group(engine.generate_responses.remote()))
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    deadline = time.time() + 10
    while ray.get(engine.count.remote()) == 0 and time.time() < deadline:
        time.sleep(0.1)
    assert ray.get(engine.count.remote()) == 1


def test_install_replaces_the_generator_actor_and_holds_for_one_ray_job(streaming):
    import openrlhf.trainer.ppo_trainer_async as async_trainer

    from asearcher_plugin.settings.config import SchedulerConfig

    streaming.check_contract()  # the installed OpenRLHF has what install() relies on
    stock = async_trainer.GenerateSamplesActor
    with pytest.raises(streaming.StreamingInstallError, match="ray.init"):
        streaming.install(SchedulerConfig(max_staleness=3, max_concurrent=8))  # no job to bind to
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        streaming.install(SchedulerConfig(max_staleness=3, max_concurrent=8))
        cls = async_trainer.GenerateSamplesActor.__ray_actor_class__
        assert issubclass(cls, stock.__ray_actor_class__) and cls.scheduler_settings.max_staleness == 3
        # the trainer creates its generator from this module global (what Ray ships with PPOTrainerAsync)
        assert "GenerateSamplesActor" in async_trainer.PPOTrainerAsync.__ray_actor_class__.__init__.__code__.co_names
        # Ray exports the trainer class once per job: a second install or an uninstall here would be ignored
        with pytest.raises(streaming.StreamingInstallError, match="already installed"):
            streaming.install(SchedulerConfig(max_staleness=1))
        with pytest.raises(streaming.StreamingInstallError, match="ray.shutdown"):
            streaming.uninstall()
        assert async_trainer.GenerateSamplesActor.__ray_actor_class__.scheduler_settings.max_staleness == 3
    finally:
        ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:  # a new job: a new install holds
        streaming.install(SchedulerConfig(max_staleness=1))
        assert async_trainer.GenerateSamplesActor.__ray_actor_class__.scheduler_settings.max_staleness == 1
    finally:
        ray.shutdown()
    streaming.uninstall()
    assert async_trainer.GenerateSamplesActor is stock


def test_contract_check_fails_loudly_on_a_changed_openrlhf(streaming, monkeypatch):
    import openrlhf.trainer.ppo_trainer_async as async_trainer

    class Renamed:  # e.g. an upgrade that drops the @ray.remote generator actor
        pass

    monkeypatch.setattr(async_trainer, "GenerateSamplesActor", Renamed)
    with pytest.raises(streaming.OpenRLHFContractError, match="0.11.2"):
        streaming.check_contract()


def test_trainer_steps_count_updates_and_survive_a_resume(streaming):
    fresh = streaming.TrainerSteps()
    for token in [0, 0, 0, 1, 2, 2, 3]:  # two pre-filled slots; 2 twice: an eval step returns its token
        fresh.observe(token)
    assert fresh.version == 3
    resumed = streaming.TrainerSteps()
    resumed.start_from(57)
    for token in [0, 0, 57, 58, 59]:  # pre-filled zeros, then the checkpoint's step
        resumed.observe(token)
    assert resumed.version == 2 and resumed.seen
    from_step_1 = streaming.TrainerSteps()
    from_step_1.start_from(1)
    versions = []
    for token in [0, 1, 2, 3]:  # resumed from the checkpoint of step 1: the 1 is where the run starts
        from_step_1.observe(token)
        versions.append(from_step_1.version)
    assert versions == [0, 0, 1, 2]
    unsaid = streaming.TrainerSteps()
    unsaid.start_from(None)  # a checkpoint without the step: its first positive token is the start
    for token in [0, 0, 40, 41]:
        unsaid.observe(token)
    assert unsaid.version == 1
    ignored = streaming.TrainerSteps()
    ignored.observe("done")
    assert not ignored.seen


def test_a_resumed_runs_version_starts_from_the_checkpoints_step_when_its_first_call_returns_nothing(streaming):
    """OpenRLHF's protocol after a resume from the checkpoint of step 100, queue size 1: the slot queue holds one 0;
    the generator's first call hands out nothing, so it puts that 0 back (ppo_trainer_async.py ~157); then the
    trainer puts 100, 101 as it takes batches. The version must go 0, 0, 1, not jump to 100 (admission unbounded,
    on_stale: restart dropping every group in flight)."""
    from queue import Queue

    from asearcher_plugin.settings.config import SchedulerConfig

    rows = [(None, [f"Question {i}?"], [json.dumps(["x"])], [None]) for i in range(4)]
    generator = streaming.StreamingSamplesGenerator(
        strategy=SimpleNamespace(args=make_args()),
        prompts_dataloader=PositionLoader(rows),
        eval_dataloader=None,
        tokenizer=None,
        vllm_engines=[],
        settings=SchedulerConfig(max_concurrent=4, max_staleness=1),
    )
    # the state the checkpoint of step 100 holds: the snapshot taken when its batch was handed out
    generator._handed_out, generator._start_step = 100, 0
    generator._pass_done = False
    state = asyncio.run(generator._take_snapshot())
    assert state[streaming.STEP_KEY] == 100
    generator._handed_out = 0
    generator.prompts_dataloader.load_state_dict(state)
    slots = Queue()
    slots.put(0)
    tap = streaming.SlotTap(slots, generator.trainer_steps)
    versions = []
    token = tap.get()
    slots.put(token)  # the first call handed out nothing: its token goes back
    for trained in (100, 101):
        tap.get()
        versions.append(generator.trainer_steps.version)
        slots.put(trained)
    tap.get()
    versions.append(generator.trainer_steps.version)
    assert versions == [0, 0, 1]


# -- dispatch: balanced by the generator's own counts, no engine polled, every prompt of every batch ------------


@ray.remote
class CountingEngine:
    """Takes OpenRLHF's `generate_responses` call, holds it a moment, returns no samples; counts what it saw."""

    def __init__(self):
        self.prompts, self.polled = [], 0

    async def generate_responses(
        self, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples=1, images=None
    ):
        self.prompts.append(prompt)
        await asyncio.sleep(0.3)
        return []

    def get_num_unfinished_requests(self):
        self.polled += 1
        return 0

    def seen(self):
        return self.prompts, self.polled


def counting_generator(streaming, rows, engines, max_concurrent, **settings):
    from asearcher_plugin.settings.config import SchedulerConfig

    return streaming.StreamingSamplesGenerator(
        strategy=SimpleNamespace(args=make_args(batch_size=2)),
        prompts_dataloader=PositionLoader(rows),
        eval_dataloader=None,
        tokenizer=None,
        vllm_engines=engines,
        settings=SchedulerConfig(max_concurrent=max_concurrent, max_staleness=3, **settings),
    )


def test_an_admission_burst_is_spread_over_the_engines_without_polling_them(streaming, local_ray):
    engines = [CountingEngine.remote() for _ in range(2)]
    rows = [(None, [f"Q{i}?"], ["x"], [None]) for i in range(8)]
    generator = counting_generator(streaming, rows, engines, max_concurrent=8)
    generator.generate_samples(**KWARGS)  # admits all 8 groups at once: (eta + 1) x B = 8
    deadline = time.time() + 30
    while True:  # calls may still be on their way to the engines
        seen = ray.get([e.seen.remote() for e in engines])
        if sum(len(prompts) for prompts, _ in seen) >= 8 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert [len(prompts) for prompts, _ in seen] == [4, 4]  # a shared snapshot would send all 8 to engine 0
    assert [polled for _, polled in seen] == [0, 0]  # no blocking call to an engine per admission
    generator._run(generator._sched.aclose())


def test_every_prompt_of_a_larger_dataloader_batch_is_consumed(streaming, local_ray):
    engines = [CountingEngine.remote()]
    rows = [(None, [f"Q{3 * b + i}?" for i in range(3)], ["x"] * 3, [None] * 3) for b in range(3)]  # 3 batches of 3
    generator = counting_generator(streaming, rows, engines, max_concurrent=4)
    consumed = 0
    while True:
        _, _, drawn, exhausted = generator.generate_samples(**KWARGS)
        consumed += drawn
        if exhausted:
            break
    ((prompts, _),) = ray.get([e.seen.remote() for e in engines])
    assert sorted(prompts) == sorted(f"Q{i}?" for i in range(9)) and consumed == 9


# -- the contract check names what an OpenRLHF upgrade broke ----------------------------------------------------


class FitUnpacksThree:
    def fit(self):
        token = self.rollout_slots.get(block=True)
        samples, consumed, exhausted = self.samples_generator.generate_samples()
        return token, samples, consumed, exhausted


class TrainerPutsNextStep:
    def fit(self, global_step=0):
        self.rollout_slots.put(global_step + 1, block=True)


class EngineWithoutImages:
    async def generate_responses(self, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples=1):
        return []


@pytest.mark.parametrize(
    "module, name, replacement, problem",
    [
        ("ppo_trainer_async", "GenerateSamplesActor", FitUnpacksThree, "unpacks generate_samples() into 3"),
        ("ppo_trainer_async", "TrainingActor", TrainerPutsNextStep, "global_step as the slot token"),
        ("vllm_engine", "RolloutRayActor", EngineWithoutImages, "generate_responses no longer takes"),
    ],
)
def test_contract_check_names_what_changed(streaming, monkeypatch, module, name, replacement, problem):
    import openrlhf.trainer.ppo_trainer_async as async_trainer

    # the real classes, with one method swapped for the variant an upgrade might bring
    from asearcher_plugin.openrlhf import contract

    real = getattr(async_trainer if module == "ppo_trainer_async" else contract, name)
    cls = getattr(real, "__ray_actor_class__", real)
    method = "generate_responses" if name == "RolloutRayActor" else "fit"
    monkeypatch.setattr(cls, method, getattr(replacement, method))
    with pytest.raises(streaming.OpenRLHFContractError, match=re.escape(problem)):
        streaming.check_contract()


# -- which groups dynamic filtering trains (scheduler.group_filter) ---------------------------------------------


@pytest.mark.parametrize(
    "scores, by_mean, by_difference",
    [
        ([0.5, 0.5, 0.5, 0.5], True, False),  # equal partial F1s: OpenRLHF trains them, ASearcher drops them
        ([0.0, 0.0, 0.0, 1.0], True, True),
        ([1.0, 1.0], False, False),
        ([0.0, 0.0], False, False),
        ([-0.5, 0.3], False, True),  # a penalty pulls the mean out of (0, 1); the scores still differ
    ],
)
def test_group_filter_keeps_what_its_rule_says(streaming, scores, by_mean, by_difference):
    import torch

    def group():  # one sample per trajectory, as the generator's groups hold them
        samples = [SimpleNamespace(scores=torch.tensor([x]), asearcher_trajectory=i) for i, x in enumerate(scores)]
        return SimpleNamespace(samples=samples)

    generators = {}
    for rule in ("mean_in_range", "scores_differ"):
        generator = counting_generator(streaming, [], [None], 2, group_filter=rule)  # no group runs here
        generator.args.algo.dynamic_filtering_enable = True
        generators[rule] = generator
    assert generators["mean_in_range"]._keep(group()) is by_mean
    assert generators["scores_differ"]._keep(group()) is by_difference
    generators["scores_differ"].args.algo.dynamic_filtering_enable = False
    assert generators["scores_differ"]._keep(group()) is True  # no filtering asked: every group trains
