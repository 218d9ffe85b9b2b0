"""The streaming generator inside OpenRLHF's SamplesGenerator API, on real Ray with CPU engine actors.

OpenRLHF's samples generator module is imported for real; only its GPU-only imports (vLLM) are
satisfied with stand-ins, as in tests/test_env_openrlhf.py. The engines are Ray actors answering
`generate_responses` / `get_num_unfinished_requests` as OpenRLHF's vLLM rollout actors do.
"""

import json
from types import SimpleNamespace

import pytest

ray = pytest.importorskip("ray")


def test_streaming_generator_hands_out_batches_of_complete_groups(tiny_model, kb_server):
    from tests.test_env_openrlhf import samples_generator_module

    samples_generator_module()
    from asearcher_plugin.rollout import _actor_class
    from asearcher_plugin.scheduler.openrlhf import REPLAY_KEY, SlotTap, _make_class

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        agent = {"agent_type": "asearcher", "max_turns": 2, "max_new_tokens_per_turn": 12,
                 "tools": {"local": {"urls": [kb_server]}}}
        engines = [_actor_class().remote(str(tiny_model), agent, seed=i) for i in range(2)]
        args = SimpleNamespace(
            rollout=SimpleNamespace(batch_size=2, n_samples_per_prompt=2, vllm_generate_batch_size=2),
            algo=SimpleNamespace(dynamic_filtering_enable=False, dynamic_filtering_range=(0.0, 1.0),
                                 advantage=SimpleNamespace(is_correction_level="token")),
            train=SimpleNamespace(async_queue_size=1), vllm=SimpleNamespace(enable_sleep=False),
            asearcher=SimpleNamespace(max_concurrent=4, max_staleness=1))
        rows = [(None, [f"Question {i}?"], [json.dumps(["x"])], [None]) for i in range(9)]

        def make_generator():
            return _make_class()(strategy=SimpleNamespace(args=args), prompts_dataloader=PositionLoader(rows),
                                 eval_dataloader=None, tokenizer=None, vllm_engines=engines)

        generator = make_generator()
        states, trained = [], []
        kwargs = {"max_len": 512, "temperature": 1.0, "top_p": 1.0, "n_samples_per_prompt": 2}
        consumed = 0
        # OpenRLHF's slot queue: pre-filled with one 0 token; the trainer puts its global_step back
        # when it takes a batch, then trains (global_step + 1). The tap reads the version off it.
        from ray.util.queue import Queue

        slots = Queue()
        slots.put(0)
        tap = SlotTap(slots, generator.trainer_steps)
        for step in range(3):
            tap.get(block=True)
            samples, pass_rate, drawn, exhausted = generator.generate_samples(**kwargs)
            slots.put(step)
            assert generator._sched.version == max(0, step - 1)
            # what a checkpoint taken now stores: the position, and the prompts drawn but not trained on
            states.append(generator.prompts_dataloader.state_dict())
            trained += [s.prompts[0] for s in samples[::2]]
            replay = [p[0] for p in states[-1][REPLAY_KEY]]
            seen = [f"Question {i}?" for i in range(states[-1]["pos"])]
            assert not set(replay) & set(trained) and set(replay) | set(trained) <= set(seen)
            assert len(replay) == len(seen) - len(trained) - generator._sched.stats["stale_dropped"]
            consumed += drawn
            assert len(samples) == 4 and not exhausted  # 2 complete groups of 2
            prompts_in_batch = [s.prompts[0] for s in samples]
            assert prompts_in_batch[0] == prompts_in_batch[1] and prompts_in_batch[2] == prompts_in_batch[3]
            for s in samples:
                assert s.sequences.shape[1] == s.action_mask.shape[1] + 1 == s.rollout_log_probs.shape[1] + 1
                assert s.info["staleness"].item() <= 1 and s.rewards is not None
        assert consumed == generator._sched.prompts_drawn >= 6
        for s in samples:
            first, last = s.info["policy_version_first_token"].item(), s.info["policy_version_last_token"].item()
            assert s.info["policy_version_admitted"].item() <= first <= last <= generator._sched.version
        assert [s.info["staleness"].item() for s in samples] == [1 - s.info["policy_version_admitted"].item()
                                                                  for s in samples]
        pending = [p[0] for p in states[0][REPLAY_KEY]]
        assert pending  # after the first batch, groups were still running
        # resume from the first checkpoint: its unconsumed prompts run first and are not counted again
        resumed = make_generator()
        resumed.prompts_dataloader.load_state_dict(states[0])
        samples, _, drawn, _ = resumed.generate_samples(**kwargs)
        assert resumed._replayed == len(pending)
        assert drawn == resumed._sched.prompts_drawn - len(pending)
        assert resumed.prompts_dataloader.state_dict()["pos"] == states[0]["pos"] + drawn
    finally:
        ray.shutdown()


class PositionLoader:
    """The part of torchdata's StatefulDataLoader that OpenRLHF's generator actor uses."""

    def __init__(self, rows):
        self.rows, self.pos = rows, 0

    def __iter__(self):
        while self.pos < len(self.rows):
            self.pos += 1
            yield self.rows[self.pos - 1]

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]


def test_trainer_steps_count_updates_and_survive_a_resume():
    from asearcher_plugin.scheduler.openrlhf import TrainerSteps

    fresh = TrainerSteps()
    for token in [0, 0, 0, 1, 2, 2, 3]:  # two pre-filled slots; 2 twice: an eval step returns its token
        fresh.observe(token)
    assert fresh.version == 3
    resumed = TrainerSteps()
    for token in [0, 0, 57, 58, 59]:  # pre-filled zeros, then the checkpoint's step
        resumed.observe(token)
    assert resumed.version == 2 and resumed.seen
    ignored = TrainerSteps()
    ignored.observe("done")
    assert not ignored.seen


def test_openrlhf_async_trainer_has_the_shape_install_relies_on():
    """`install()` patches names in openrlhf/trainer/ppo_trainer_async.py, which needs vLLM to import: read its source."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("openrlhf")
    source = (Path(spec.origin).parent / "trainer" / "ppo_trainer_async.py").read_text()
    tree = ast.parse(source)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    actor = classes["GenerateSamplesActor"]
    assert any(isinstance(d, ast.Attribute) and d.attr == "remote" for d in actor.decorator_list)
    methods = {f.name: ast.unparse(f) for f in actor.body if isinstance(f, ast.FunctionDef)}
    # the generator is built from the module-level name that install() replaces
    assert "self.samples_generator = SamplesGenerator(" in methods["__init__"]
    assert "self.rollout_slots = rollout_slots" in methods["__init__"]
    assert "prompts_dataloader=self.prompts_dataloader" in methods["__init__"]  # one dataloader object for both
    assert "from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator" in source
    # the slot token carries the trainer's step and is taken before each generate_samples() call
    fit = methods["fit"]
    assert fit.index("global_step = self.rollout_slots.get(") < fit.index("self.samples_generator.generate_samples(")
    # the checkpointed dataloader state is read after the batch is handed out, from the same dataloader
    assert fit.index("generate_samples(") < fit.index("self.prompts_dataloader.state_dict()")
    assert "self.prompts_dataloader.load_state_dict(" in methods["load_state_dict"]
    trainer_fit = ast.unparse(next(f for f in classes["TrainingActor"].body
                                   if isinstance(f, ast.FunctionDef) and f.name == "fit"))
    assert trainer_fit.index("self.rollout_slots.put(global_step") < trainer_fit.index("self.train_step(")
