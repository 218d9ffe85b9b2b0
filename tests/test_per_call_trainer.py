"""Per-call sequences in OpenRLHF 0.11.2's trainer: the advantage is the trajectory's, taken over the trajectories
of its prompt, and a batch of any number of sequences is trained as the optimizer steps the flags ask for.

OpenRLHF's own `compute_advantages_and_returns` and `Experience` run here on args parsed by its own parser; the
expected advantages are worked out by hand in the comments.
"""

import types

import pytest
import torch

GROUPS = [  # (group, trajectory, reward, sequences): A is split in 3, C in 2
    (0, 0, 1.0, 3),
    (0, 1, 0.0, 1),
    (1, 2, 0.5, 2),
    (1, 3, 0.5, 1),
]


@pytest.fixture(scope="module")
def openrlhf():
    from asearcher_plugin.openrlhf.cpu import use_stand_ins

    use_stand_ins()
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    return types.SimpleNamespace(Experience=Experience, Maker=RemoteExperienceMaker)


def args_for(estimator: str):
    from asearcher_plugin.recipe import Recipe

    recipe = Recipe.load("cpu_tiny", [f"openrlhf.algo.advantage.estimator={estimator}"])
    return recipe.check().args


def sequence_experiences(openrlhf, rows_per_experience=2):
    """One sample per sequence, several samples per experience (OpenRLHF's micro-batches), in an order that
    interleaves trajectories."""
    from asearcher_plugin.openrlhf.per_call import GROUP_KEY, TRAJECTORY_KEY

    rows = [(g, t, r) for g, t, r, n in GROUPS for _ in range(n)]
    rows = rows[::2] + rows[1::2]
    samples = []
    for i, (g, t, r) in enumerate(rows):
        length = 6 + i  # different lengths: padding must not matter
        action = torch.zeros(1, length - 1, dtype=torch.bool)
        action[0, 2:] = True
        samples.append(
            openrlhf.Experience(
                sequences=torch.ones(1, length, dtype=torch.long),
                attention_mask=torch.ones(1, length, dtype=torch.long),
                action_mask=action,
                kl=torch.zeros(1, length - 1),
                rewards=torch.tensor([r]),
                index=[i],
                info={
                    TRAJECTORY_KEY: torch.tensor([float(t)]),
                    GROUP_KEY: torch.tensor([float(g)]),
                    "reward": torch.tensor([r]),
                },
            )
        )
    batches = [
        openrlhf.Experience.concat_experiences(samples[i : i + rows_per_experience], 0)
        for i in range(0, len(samples), rows_per_experience)
    ]
    for j, b in enumerate(batches):
        b.index = list(range(j * rows_per_experience, j * rows_per_experience + b.sequences.shape[0]))
    return batches, rows


def advantages(openrlhf, estimator: str):
    from asearcher_plugin.openrlhf.per_call import compute_per_trajectory

    args = args_for(estimator)
    maker = openrlhf.Maker.__new__(openrlhf.Maker)
    maker.strategy = types.SimpleNamespace(args=args)
    maker.kl_ctl = types.SimpleNamespace(value=0.0)
    maker.advantage_estimator = estimator
    batches, rows = sequence_experiences(openrlhf)
    out = compute_per_trajectory(maker, batches, maker.compute_advantages_and_returns)
    flat = []
    for exp in out:
        for row in range(exp.sequences.shape[0]):
            adv = exp.advantages[row][exp.action_mask[row].bool()]
            assert torch.allclose(adv, adv[0].expand_as(adv))  # gamma 1, no KL: one value per sequence
            flat.append(float(adv[0]))
    assert args.rollout.n_samples_per_prompt == 2 and args.algo.advantage.estimator == estimator  # put back
    return flat, rows, out


def by_trajectory(flat, rows):
    per = {}
    for adv, (_, t, _) in zip(flat, rows, strict=True):
        per.setdefault(t, set()).add(round(adv, 5))
    return per


@pytest.mark.parametrize(
    "estimator, expected",
    [
        # group 0: A = 1, B = 0 (mean 0.5); group 1: C = D = 0.5. Counting samples instead would give
        # group 0 a mean of 0.75 (A three times): A +0.25, B -0.75.
        ("dr_grpo", {0: 0.5, 1: -0.5, 2: 0.0, 3: 0.0}),
        # rloo: A - B = 1, B - A = -1
        ("rloo", {0: 1.0, 1: -1.0, 2: 0.0, 3: 0.0}),
        # group_norm: the sample std of [1, 0] is 0.70711, so +-0.5 / 0.70711; group 1 has std 0
        ("group_norm", {0: 0.70711, 1: -0.70711, 2: 0.0, 3: 0.0}),
    ],
)
def test_every_sequence_gets_its_trajectorys_advantage_over_the_trajectories_of_its_prompt(
    openrlhf, estimator, expected
):
    flat, rows, _ = advantages(openrlhf, estimator)
    assert by_trajectory(flat, rows) == {t: {v} for t, v in expected.items()}


def test_whitening_estimators_still_whiten_over_the_batch(openrlhf):
    """reinforce_baseline: the baseline per trajectory as dr_grpo, then OpenRLHF whitens over action tokens."""
    flat, rows, out = advantages(openrlhf, "reinforce_baseline")
    per = by_trajectory(flat, rows)
    assert all(len(v) == 1 for v in per.values())
    a, b, c = per[0].pop(), per[1].pop(), per[2].pop()
    assert a > c > b and per[3] == {c}
    tokens = torch.cat([e.advantages[e.action_mask.bool()] for e in out])
    assert abs(float(tokens.mean())) < 1e-5 and abs(float(tokens.std(unbiased=False)) - 1) < 1e-3


def test_group_reward_std_and_the_keys_the_scheduler_added(openrlhf):
    from asearcher_plugin.openrlhf.per_call import GROUP_KEY, TRAJECTORY_KEY

    _, rows, out = advantages(openrlhf, "group_norm")
    stds = [round(float(s), 5) for e in out for s in e.info["group_reward_std"]]
    assert stds == [0.70711 if g == 0 else 0.0 for g, _, _ in rows]
    assert all(TRAJECTORY_KEY not in e.info and GROUP_KEY not in e.info for e in out)  # never logged as metrics
    # the logged reward stays the trajectory's (OpenRLHF copies the shaped value there)
    assert [float(r) for e in out for r in e.info["reward"]] == [r for _, _, r in rows]


class Buffer:
    def __init__(self, lengths):
        self.items = [types.SimpleNamespace(total_length=torch.tensor(n)) for n in lengths]
        self.dynamic_batch, self.sample_batch_size, self.dynamic_indices = False, 2, []


def strategy(batch=4, n=2, train_batch=4, gas=2):
    args = types.SimpleNamespace(
        rollout=types.SimpleNamespace(batch_size=batch, n_samples_per_prompt=n),
        train=types.SimpleNamespace(batch_size=train_batch),
    )
    return types.SimpleNamespace(args=args, accumulated_gradient=gas)


def test_a_batch_of_any_size_is_split_into_exactly_its_optimizer_steps_micro_batches():
    from asearcher_plugin.openrlhf.per_call import partition_batch

    lengths = [900, 100, 120, 80, 700, 60, 50, 40, 300, 30, 20]  # 11 sequences of 8 trajectories
    buf = Buffer(lengths)
    partition_batch(buf, strategy())  # 8 trajectories / 4 per step = 2 steps x 2 accumulation = 4 micro-batches
    assert len(buf.dynamic_indices) == 4 and buf.dynamic_batch and buf.sample_batch_size == 1
    assert sorted(i for part in buf.dynamic_indices for i in part) == list(range(11))  # each sequence once
    tokens = [sum(lengths[i] for i in part) for part in buf.dynamic_indices]
    assert max(tokens) <= 900 + 40  # balanced by tokens: the longest sequence nearly alone


def test_too_few_sequences_for_the_steps_is_a_clear_error():
    from asearcher_plugin.openrlhf.per_call import PerCallError, partition_batch

    with pytest.raises(PerCallError, match="3 sequences on this rank for 4 micro-batches"):
        partition_batch(Buffer([5, 6, 7]), strategy())


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["scheduler.enable=false"], "the streaming scheduler"),
        (["openrlhf.train.dynamic_batch_enable=true"], "no --train.dynamic_batch_enable"),
        (["openrlhf.reward.overlong_buffer_len=16"], "no --reward.overlong_buffer_len"),
    ],
)
def test_per_call_refuses_what_would_miscount_its_sequences(overrides, message):
    from asearcher_plugin.recipe import Recipe, RecipeError

    recipe = Recipe.load("cpu_tiny", ["agent.training_sequences=per_call", *overrides])
    with pytest.raises(RecipeError, match=f"training_sequences: per_call needs .*{message}"):
        recipe.check()
    assert Recipe.load("cpu_tiny", overrides).check()  # the same flags are fine for one sequence per trajectory


def test_dry_run_states_the_per_call_and_per_trajectory_budgets():
    from asearcher_plugin.recipe import Recipe

    long = Recipe.load("local_7b_long").check().summary()
    assert "each call 32768 tokens" in long and "each trajectory 128 calls" in long
    single = Recipe.load("cpu_tiny").check().summary()
    assert "the whole trajectory 1024 tokens" in single
