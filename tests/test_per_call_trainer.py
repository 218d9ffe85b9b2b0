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


def test_every_micro_batch_is_under_the_token_budget_and_the_steps_are_kept():
    """local_7b_long's shape scaled down: 42 sequences per trajectory no longer make micro-batches of 42 x micro
    sequences; each holds at most the budget (padded tokens), each step ends on one boundary, every sequence once."""
    from asearcher_plugin.openrlhf.micro_batches import cost, plan_steps

    lengths = [900, 100, 120, 80, 700, 60, 50, 40, 300, 30, 20] * 12  # 132 sequences
    plan = plan_steps(lengths, steps=2, budget=1000, packed=False)
    assert sorted(i for m in plan for i in m.indices) == list(range(len(lengths)))
    assert all(cost([lengths[i] for i in m.indices], False) <= 1000 for m in plan)
    assert [m.step for m in plan if m.boundary] == [0, 1] and plan[-1].boundary
    assert len({m.step for m in plan}) == 2 and not any(m.padding for m in plan)


def test_ranks_agree_on_the_micro_batches_of_each_step_and_a_short_rank_pads():
    """Two ranks: the one with fewer tokens runs as many micro-batches per step as the other (DeepSpeed's
    collectives pair up), the extra ones padding whose loss normaliser is infinite (zero loss, zero gradient)."""
    from asearcher_plugin.openrlhf.micro_batches import PADDING, loss_infos, plan_steps

    heavy, light = [500] * 12, [50, 40, 30]
    heavy_plan = plan_steps(heavy, steps=2, budget=1000, packed=False)
    heavy_counts = [sum(m.step == s for m in heavy_plan) for s in (0, 1)]
    assert heavy_counts == [3, 3]  # 6 sequences of 500 a step, two to a micro-batch

    def agree(counts):  # what the all-reduce max returns once both ranks have planned
        return [max(a, b) for a, b in zip(counts, heavy_counts, strict=True)]

    plan = plan_steps(light, steps=2, budget=1000, packed=False, agree=agree)
    assert [sum(m.step == s for m in plan) for s in (0, 1)] == heavy_counts
    assert sorted(i for m in plan if not m.padding for i in m.indices) == [0, 1, 2]
    assert sum(m.padding for m in plan) == 6 - 2  # the light rank's 3 sequences fit one micro-batch per step
    assert [m.step for m in plan if m.boundary] == [0, 1]
    infos = loss_infos(plan, [5, 4, 3], gas=1, dp_size=2)
    assert [i["batch_num_tokens"] == PADDING for i in infos] == [m.padding for m in plan]


def two_ranks(openrlhf, micro_batch_size: int, lengths):
    """An experience maker's view of two policy ranks, and one sample of each length (its tokens all the length)."""
    args = args_for("group_norm")
    args.actor.num_gpus_per_node, args.rollout.micro_batch_size = 2, micro_batch_size
    maker = types.SimpleNamespace(args=args, tokenizer=types.SimpleNamespace(pad_token_id=0))
    samples = [
        openrlhf.Experience(
            sequences=torch.full((1, n), n), attention_mask=torch.ones(1, n, dtype=torch.long), rewards=torch.ones(1)
        )
        for n in lengths
    ]
    return maker, samples


def test_a_short_rollout_batch_still_reaches_every_policy_rank(openrlhf):
    """Two policy ranks, rollout.micro_batch_size 3: a batch short of groups (a group failed alone, the data's end)
    makes one sample batch in OpenRLHF's own split, and its dispatch refuses fewer batches than ranks (the run
    stopped there). The hook cuts the batch per rank, every sample once."""
    from asearcher_plugin.openrlhf.micro_batches import MicroBatchError, every_rank

    maker, samples = two_ranks(openrlhf, micro_batch_size=3, lengths=(5, 7, 9))
    batches = openrlhf.Maker.split_rollout_samples(maker, samples)
    assert len(batches) == 1  # OpenRLHF's split: one sample batch for two ranks
    out = every_rank(batches, samples, ranks=2, pad_token_id=0)
    assert [len(b.sequences) for b in out] == [1, 2]
    assert [int(row[0]) for b in out for row in b.sequences] == [5, 7, 9]  # every sample, once, in order
    full = openrlhf.Maker.split_rollout_samples(maker, samples * 2)
    assert every_rank(full, samples * 2, ranks=2, pad_token_id=0) is full  # a full batch is left as it is
    with pytest.raises(MicroBatchError, match="1 samples for 2 policy ranks"):
        every_rank(batches[:1], samples[:1], ranks=2, pad_token_id=0)


def test_every_rank_runs_the_same_number_of_forwards(openrlhf):
    """Under ZeRO-3 each experience forward gathers the parameters collectively: OpenRLHF's dispatch gives ranks
    ceil(batches / ranks) batches by count, so 5 sample batches on 2 ranks would be 3 forwards against 2, a hang."""
    from asearcher_plugin.openrlhf.micro_batches import every_rank

    maker, samples = two_ranks(openrlhf, micro_batch_size=2, lengths=range(3, 12))
    batches = openrlhf.Maker.split_rollout_samples(maker, samples)  # 9 samples by 2: 5 batches
    assert len(batches) == 5
    out = every_rank(batches, samples, ranks=2, pad_token_id=0)
    assert len(out) == 6 and all(1 <= len(b.sequences) <= 2 for b in out)  # 3 forwards a rank, none larger
    assert [int(row[0]) for b in out for row in b.sequences] == list(range(3, 12))  # every sample once, in order
    few = every_rank(batches[:3], samples[:3], ranks=2, pad_token_id=0)  # 3 samples: 2 slices, not 4
    assert [len(b.sequences) for b in few] == [1, 2]


def test_the_gradient_of_a_step_split_by_tokens_equals_the_unsplit_one(tiny_model):
    """OpenRLHF's Actor and PolicyLoss on the tiny model; DeepSpeed's backward divides by its accumulation steps G,
    as here. One step of 6 sequences trained as one micro-batch and as the budget cuts it (k > 1 micro-batches): the
    same gradient, the token mean over the step."""
    from asearcher_plugin.openrlhf.cpu import use_stand_ins

    use_stand_ins()
    from openrlhf.models import Actor, PolicyLoss

    from asearcher_plugin.openrlhf.micro_batches import loss_infos, plan_steps

    torch.manual_seed(0)
    actor = Actor(str(tiny_model), attn_implementation="sdpa", param_dtype="bf16")
    actor.model.float()
    loss_fn = PolicyLoss()
    lengths = [40, 12, 30, 9, 25, 18]
    items = []
    for n in lengths:
        seq = torch.randint(5, 200, (n,))
        mask = torch.zeros(n - 1, dtype=torch.bool)
        mask[n // 3 :] = True
        items.append(
            types.SimpleNamespace(
                sequences=seq,
                attention_mask=torch.ones(n, dtype=torch.long),
                action_mask=mask,
                advantages=torch.randn(n - 1),
                old=torch.randn(n - 1) * 0.1 - 5,
            )
        )
    action = [int(i.action_mask.sum()) for i in items]

    def gradient(budget: int, gas: int) -> tuple[torch.Tensor, int]:
        actor.model.zero_grad()
        plan = plan_steps(lengths, steps=1, budget=budget, packed=False)
        for m, info in zip(plan, loss_infos(plan, action, gas=gas, dp_size=1), strict=True):
            batch = [items[i] for i in m.indices]
            width = max(len(b.sequences) for b in batch)

            def padded(name, b, width=width):
                value = getattr(b, name)
                return torch.nn.functional.pad(value, (0, width - len(b.sequences)))

            seqs, att, am, adv, old = (
                torch.stack([padded(name, b) for b in batch])
                for name in ("sequences", "attention_mask", "action_mask", "advantages", "old")
            )
            logp = actor(seqs, am, attention_mask=att)
            loss = loss_fn(logp, old, adv, action_mask=am, **info)[0]
            (loss / gas).backward()  # DeepSpeed's engine.backward scales by 1 / gradient_accumulation_steps
        grads = torch.cat([p.grad.flatten() for p in actor.model.parameters() if p.grad is not None])
        return grads.clone(), len(plan)

    whole, one = gradient(budget=10**6, gas=4)
    split, k = gradient(budget=80, gas=4)
    assert one == 1 and k >= 3
    assert torch.allclose(whole, split, rtol=1e-4, atol=1e-7), float((whole - split).abs().max())
    assert whole.abs().max() > 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["scheduler.enable=false"], "the streaming scheduler"),
        (["openrlhf.train.dynamic_batch_enable=true"], "no --train.dynamic_batch_enable"),
        (["openrlhf.reward.overlong_buffer_len=16"], "no --reward.overlong_buffer_len"),
        (["openrlhf.actor.loss_agg_mode=seq-mean-token-mean"], "--actor.loss_agg_mode token-mean, not seq-mean"),
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
